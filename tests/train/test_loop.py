"""The training loop: learning on real pairs, exact resume, packed == padded steps, the CLI."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModel, AutoTokenizer
from typer.testing import CliRunner

from bitextmine.cli import app
from bitextmine.encoder.encoder import SentenceEncoder
from bitextmine.train.data import PairBatch
from bitextmine.train.loop import TrainConfig, batch_loss, train
from bitextmine.train.model import TrainContext, TrainEncoder
from bitextmine.train.objectives.base import ObjectiveSetup
from bitextmine.train.objectives.registry import build_objectives
from tests import helpers
from tests.helpers import TRAINING_TEXT, require_shared, straight_and_interrupted

TINY = {"vocab_size": 600, "layers": 2, "hidden": 64, "heads": 4}


def log(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def real_pairs(tmp_path_factory) -> Path:
    """The first 200 de-en news pairs of ../shared/data/parallel as a small X.de / X.en corpus."""
    source = require_shared("data/parallel/de-en")
    out = tmp_path_factory.mktemp("pairs")
    for lang in ("de", "en"):
        lines = (source / f"news.{lang}").read_text(encoding="utf-8").splitlines()[:200]
        (out / f"news.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out / "news.de"


@pytest.fixture
def toy_pairs(tmp_path) -> Path:
    """TRAINING_TEXT alternates English and German: 4 pairs, repeated into 48 lines."""
    return helpers.toy_pairs(tmp_path)


@pytest.mark.integration
def test_a_tiny_model_from_scratch_learns_real_pairs(real_pairs, tmp_path):
    out = tmp_path / "model"
    config = TrainConfig(
        data=[str(real_pairs)],
        out=out,
        objectives={"contrastive": 1.0},
        from_scratch=True,
        scratch=TINY,
        max_steps=80,
        lr=2e-3,
        warmup_steps=5,
        max_tokens=1500,
        max_pairs=32,
        checkpoint_every=0,
        bf16="off",
        options={"temperature": 0.1},
    )
    summary = train(config)
    records = log(out)
    first, last = records[:5], records[-5:]
    mean = lambda rows, key: sum(r[key] for r in rows) / len(rows)  # noqa: E731
    assert mean(last, "loss") < mean(first, "loss") - 0.3  # batches hold 10-32 pairs: log(B) varies
    assert mean(last, "contrastive/in_batch_accuracy") > mean(first, "contrastive/in_batch_accuracy") + 0.2
    assert summary.steps == 80 and (out / "checkpoints").is_dir()
    settings = json.loads((out / "bitextmine.json").read_text())
    assert settings["training"]["steps"] == 80 and settings["encoder"]["pooling"] == "mean"
    encoder = SentenceEncoder.load(str(out), device="cpu")
    assert encoder.encode(["Guten Morgen.", "Good morning."]).vectors.shape == (2, 64)


@pytest.mark.integration  # training steps on a tiny model: seconds
def test_resume_from_a_checkpoint_continues_with_identical_losses(tiny_model_dir, toy_pairs, tmp_path):
    def config(out: Path) -> TrainConfig:
        return TrainConfig(
            data=[str(toy_pairs)],
            out=out,
            objectives={
                "contrastive": 1.0,
                "mexma": 1.0,
            },  # mexma: masks drawn from the checkpointed generator
            base=str(tiny_model_dir("bert")),
            max_steps=8,
            lr=1e-3,
            warmup_steps=2,
            max_tokens=120,
            shuffle_buffer=16,
            checkpoint_every=4,
            bf16="off",
            device="cpu",  # bit-for-bit needs deterministic kernels; GPU reductions are not
        )

    straight, interrupted = straight_and_interrupted(config, tmp_path, 6)  # steps 5 and 6 are lost
    summary = train(config(interrupted))
    assert summary.resumed_from == 4 and summary.steps == 8
    want = [(r["step"], r["loss"]) for r in log(straight) if "loss" in r]
    got = [(r["step"], r["loss"]) for r in log(interrupted) if "loss" in r]
    assert got == want  # 1-4 from the first attempt, 5-8 after the resume (logged once), bit for bit


def test_a_checkpoint_from_other_settings_is_refused(tiny_model_dir, toy_pairs, tmp_path):
    common = dict(data=[str(toy_pairs)], out=tmp_path, base=str(tiny_model_dir("bert")), max_steps=1)
    train(TrainConfig(objectives={"contrastive": 1.0}, checkpoint_every=1, max_tokens=120, **common))
    with pytest.raises(Exception, match="written by a run with other settings"):
        train(TrainConfig(objectives={"contrastive": 1.0}, lr=1.0, max_tokens=120, **common))


@pytest.mark.integration  # training steps on tiny models: seconds
@pytest.mark.parametrize("kind", ["bert", "xlm-roberta"])
@pytest.mark.parametrize("objective", ["contrastive", "mexma", "rtl", "vmsst", "xtr"])
def test_packed_step_equals_padded_step(tiny_model_dir, kind, objective):
    model_dir = tiny_model_dir(kind)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    ids = tokenizer(TRAINING_TEXT, truncation=True, max_length=30)["input_ids"]
    batch = PairBatch(ids[1::2], ids[0::2], ["de"] * 4, 4)
    results = []
    for packed in (True, False):
        torch.manual_seed(0)
        model = AutoModel.from_pretrained(model_dir).eval()  # eval: no dropout, so both see the same net
        encoder = TrainEncoder(copy.deepcopy(model), packed=packed)
        ctx = TrainContext(
            encoder,
            tokenizer.mask_token_id,
            frozenset(tokenizer.all_special_ids),
            len(tokenizer),
            ["de", "en"],
            torch.Generator().manual_seed(0),
        )
        weights = {objective: 1.0}
        torch.manual_seed(0)
        objectives = build_objectives(weights, ObjectiveSetup(encoder, ctx))
        loss, _ = batch_loss(encoder, objectives, weights, batch, ctx)
        loss.backward()
        results.append(
            (loss.item(), {n: p.grad.clone() for n, p in encoder.named_parameters() if p.grad is not None})
        )
    (packed_loss, packed_grads), (padded_loss, padded_grads) = results
    assert packed_loss == pytest.approx(padded_loss, rel=1e-5)
    assert packed_grads.keys() == padded_grads.keys() and len(packed_grads) > 10
    for name, grad in packed_grads.items():
        torch.testing.assert_close(grad, padded_grads[name], atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.integration
def test_train_command_end_to_end_and_its_errors(tiny_model_dir, toy_pairs, tmp_path):
    runner = CliRunner()
    out = tmp_path / "model"
    args = [
        "train",
        "--data",
        str(toy_pairs),
        "--base",
        str(tiny_model_dir("xlm-roberta")),
        "--out",
        str(out),
    ]
    result = runner.invoke(app, [*args, "--max-steps", "3", "--max-tokens", "120", "--bf16", "off"])
    assert result.exit_code == 0, result.output
    assert "trained 3 steps" in result.output
    encoded = runner.invoke(
        app, ["encode", str(toy_pairs), "--lang", "de", "--model", str(out), "-w", str(tmp_path / "w")]
    )
    assert encoded.exit_code == 0, encoded.output
    for extra, message, status in (
        ([], "no budget: pass --max-steps", 1),
        (["--max-steps", "1", "--objectives", "magic"], "unknown objective 'magic'", 2),  # the parser's
        (["--max-steps", "1", "--from-scratch"], "exactly one of --base MODEL and --from-scratch", 1),
    ):
        result = runner.invoke(app, [*args, *extra])
        assert result.exit_code == status and message in result.output, result.output
