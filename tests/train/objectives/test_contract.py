"""The objectives' contract: a toy objective added through it alone trains; the settings are typed, and what
they store (checkpoints, bitextmine.json), their weights' names and a run's losses are those of the code
before them.

tests/fixtures/train_1e66aa2.json was written with the code of commit 1e66aa2: `CLI_ARGS` run through
`bitextmine train` (its first checkpoint's settings, bitextmine.json's options, the logged losses), the
settings of `API_CONFIG`, and the names and shapes of each objective's weights on the tiny BERT.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from bitextmine.errors import BitextmineError
from bitextmine.train import loop
from bitextmine.train.checkpoint import load_checkpoint
from bitextmine.train.loop import TrainConfig, TrainSummary, train
from bitextmine.train.model import TrainContext, TrainEncoder
from bitextmine.train.objectives import registry, settings
from bitextmine.train.objectives.base import Objective, ObjectiveInputs, ObjectiveOutput, ObjectiveSetup
from bitextmine.train.objectives.names import parse_objectives
from bitextmine.train.objectives.registry import build_objectives
from bitextmine.train.objectives.settings import ObjectiveOptions, ObjectiveSettings, RtlSettings
from tests import helpers
from tests.helpers import run

FIXTURE = json.loads((Path(__file__).parents[2] / "fixtures" / "train_1e66aa2.json").read_text())
CLI_ARGS = (
    "--objectives contrastive,xtr=0.5 --projection --temperature 0.1 --max-steps 2 --checkpoint-every 1"
)
CLI_ARGS += " --max-tokens 120 --lr 1e-3 --warmup-steps 1 --bf16 off --device cpu"
API_CONFIG = dict(
    data=["d"],
    out=Path("o"),
    objectives={"contrastive": 1.0, "mexma": 0.5},
    base="b",
    max_steps=1,
    options={"temperature": 0.1, "margin": 0.3, "rtl_layers": 1},
)


@pytest.fixture
def toy_pairs(tmp_path) -> Path:
    return helpers.toy_pairs(tmp_path)


@pytest.fixture
def tables() -> Iterator[None]:
    """The objectives a test defines are gone after it."""
    built_in = set(settings.objective_names())
    yield
    for table in (settings._SETTINGS, registry._CLASSES):
        for name in set(table) - built_in:
            del table[name]


def test_a_toy_objective_added_through_the_contract_trains(tables, tiny_model_dir, toy_pairs, tmp_path):
    @dataclass(frozen=True)
    class ToySettings(ObjectiveSettings, objective="toy"):
        toy_scale: float = 1.0

    class Toy(Objective):
        Settings = ToySettings

        def __init__(self, settings: ToySettings) -> None:
            super().__init__()
            self.scale = torch.nn.Parameter(torch.tensor(settings.toy_scale))

        @classmethod
        def build(cls, settings: ToySettings, setup: ObjectiveSetup) -> Toy:
            return cls(settings)

        def forward(self, inputs: ObjectiveInputs) -> ObjectiveOutput:
            distance = (inputs.src.pooled - inputs.tgt.pooled).pow(2).sum(-1).mean()
            return ObjectiveOutput(self.scale * distance, {"distance": distance.item()})

    assert parse_objectives("contrastive,toy=0.5") == {"contrastive": 1.0, "toy": 0.5}
    out = tmp_path / "model"
    config = TrainConfig(
        data=[str(toy_pairs)],
        out=out,
        objectives={"contrastive": 1.0, "toy": 0.5},
        base=str(tiny_model_dir("bert")),
        max_steps=1,
        max_tokens=120,
        options={"toy_scale": 3.0},
        device="cpu",
    )
    assert config.options.of("toy") == ToySettings(toy_scale=3.0)
    assert train(config).steps == 1
    record = json.loads((out / "train_log.jsonl").read_text().splitlines()[0])
    assert record["toy/distance"] > 0 and "contrastive/contrastive" in record
    state = load_checkpoint(out / "checkpoints" / "step-00000001.pt")
    assert state["objectives"]["toy.scale"].item() != 3.0  # trained
    assert json.loads((out / "bitextmine.json").read_text())["training"]["options"] == {"toy_scale": 3.0}


def test_a_cli_run_stores_and_resumes_as_before_the_settings_were_typed(tiny_model_dir, toy_pairs, tmp_path):
    out, base = tmp_path / "model", tiny_model_dir("bert")
    args = ["train", "--data", str(toy_pairs), "--out", str(out), "--base", str(base), *CLI_ARGS.split()]
    code, output = run(*args)
    assert code == 0, output
    losses = [json.loads(line)["loss"] for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert losses == pytest.approx(FIXTURE["cli_losses"], rel=1e-5)
    assert (
        json.loads((out / "bitextmine.json").read_text())["training"]["options"]
        == FIXTURE["cli_training_options"]
    )
    before = json.loads(
        json.dumps(FIXTURE["cli_resume_key"]).replace("{data}", str(toy_pairs)).replace("{base}", str(base))
    )
    first, second = out / "checkpoints" / "step-00000001.pt", out / "checkpoints" / "step-00000002.pt"
    state = load_checkpoint(first)
    assert state["config"] == before
    # the first checkpoint as the code before wrote it: its settings from the fixture, the second gone
    torch.save({**state, "config": before}, first)
    second.unlink()
    code, output = run(*args)
    assert code == 0 and "resuming at step 1" in output, output
    resumed = json.loads((out / "train_log.jsonl").read_text().splitlines()[1])["loss"]
    assert resumed == pytest.approx(FIXTURE["cli_losses"][1], rel=1e-5)


def test_settings_made_from_options_are_stored_as_given():
    config = TrainConfig(**API_CONFIG)
    assert config.resume_key() == FIXTURE["api_resume_key"]
    assert config.options.of("rtl") == RtlSettings(rtl_layers=1)
    assert config.options.of("contrastive").temperature == 0.1
    assert config.options.of("vmsst").vmsst_lambda == 0.025  # not given: the default


def test_an_unknown_setting_or_objective_is_refused():
    with pytest.raises(BitextmineError, match="unknown objective setting temprature"):
        ObjectiveOptions({"temprature": 0.1})
    with pytest.raises(BitextmineError, match="unknown objective 'contrastiv': choose from contrastive"):
        TrainConfig(**{**API_CONFIG, "objectives": {"contrastiv": 1.0}})


@pytest.mark.parametrize("built", list(FIXTURE["objective_weights"]))
def test_the_objectives_weights_keep_their_names(tiny_model_dir, built):
    name, options = built.split(" ", 1)
    model_dir = tiny_model_dir("bert")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    encoder = TrainEncoder(AutoModel.from_pretrained(model_dir))
    specials = frozenset(tokenizer.all_special_ids)
    ctx = TrainContext(
        encoder, tokenizer.mask_token_id, specials, len(tokenizer), ["de", "en"], torch.Generator()
    )
    objectives = build_objectives({name: 1.0}, ObjectiveSetup(encoder, ctx), json.loads(options))
    shapes = {key: "x".join(map(str, value.shape)) for key, value in objectives.state_dict().items()}
    assert shapes == FIXTURE["objective_weights"][built]


def test_the_new_flags_reach_the_settings_and_are_stored_only_when_given(monkeypatch, tmp_path):
    configs: list[TrainConfig] = []

    def stub(config: TrainConfig, reporter) -> TrainSummary:
        configs.append(config)
        return TrainSummary(0, 0, 0, 0.0, 0, 0.0, {}, config.out)

    monkeypatch.setattr(loop, "train", stub)
    common = ["train", "--data", "x", "--out", str(tmp_path), "--base", "b", "--max-steps", "1"]
    assert run(*common, "--objectives", "rtl,vmsst", "--rtl-layers", "1", "--vmsst-latent-dim", "8")[0] == 0
    assert run(*common)[0] == 0
    with_flags, without = configs
    assert (
        with_flags.options.of("rtl").rtl_layers == 1 and with_flags.options.of("vmsst").vmsst_latent_dim == 8
    )
    assert list(with_flags.options)[-2:] == ["rtl_layers", "vmsst_latent_dim"]
    assert dict(without.options) == FIXTURE["cli_training_options"] | {
        "temperature": 0.05,
        "projection": False,
    }
