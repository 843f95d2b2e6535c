"""Flags reach the options one way: each command passes every flag by name to the field that holds it,
so a flag given on the command line lands in its field, and every field with a flag is reached."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

import bitextmine.steps.mine as mine_step
import bitextmine.steps.mine_files as mine_files_step
from bitextmine.errors import BitextmineError
from bitextmine.mining.filters import parse_filters
from bitextmine.steps.mine import MineOptions
from tests.helpers import run

# mine's flags with values other than their defaults, and what each field of MineOptions then holds
MINE_FLAGS = {
    "k": (["--k", "7"], 7),
    "margin": (["--margin", "distance"], "distance"),
    "strategy": (["--strategy", "intersect"], "intersect"),
    "threshold": (["--threshold", "auto"], "auto"),
    "min_precision": (["--min-precision", "0.8"], 0.8),
    "thresholds": (["--thresholds", "t.json"], Path("t.json")),
    "nprobe": (["--nprobe", "3"], 3),
    "device": (["--device", "cpu"], "cpu"),
    "max_codes": (["--max-codes", "50"], 50),
    "job_rows": (["--job-rows", "9"], 9),
    "model": (["--model", "m"], "m"),
    "force": (["--force"], True),
    "filters": (["--filters", "none", "--filter", "copies=0.8"], parse_filters("none", ["copies=0.8"])),
    "output": (["--output", "o.jsonl"], Path("o.jsonl")),
    "format": (["--format", "jsonl"], "jsonl"),
}
WITHOUT_A_FLAG = {"block_rows"}  # a memory bound for the Python API


@pytest.fixture
def options_made(monkeypatch) -> list[MineOptions]:
    """The MineOptions each `mine` or `mine-files` passes on; no mining runs."""
    seen: list[MineOptions] = []

    def stop(*args, **kwargs):
        seen.append(next(arg for arg in (*args, *kwargs.values()) if isinstance(arg, MineOptions)))
        raise BitextmineError("stopped before mining")

    monkeypatch.setattr(mine_step, "mine", stop)
    monkeypatch.setattr(mine_files_step, "mine_files", stop)
    return seen


def test_every_mine_option_with_a_flag_gets_the_flags_value(options_made, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert set(MINE_FLAGS) == {field.name for field in fields(MineOptions)} - WITHOUT_A_FLAG
    flags = [arg for args, _ in MINE_FLAGS.values() for arg in args]
    code, output = run("mine", "de", "en", "-w", str(tmp_path / "w"), *flags)
    assert code == 1 and "stopped before mining" in output, output
    (options,) = options_made
    assert {name: getattr(options, name) for name in MINE_FLAGS} == {
        name: value for name, (_, value) in MINE_FLAGS.items()
    }


def test_mine_files_passes_its_share_of_mines_flags(options_made, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shared = ["k", "margin", "strategy", "threshold", "min_precision", "thresholds", "filters", "output"]
    shared += ["format", "device"]
    flags = [arg for name in shared for arg in MINE_FLAGS[name][0]]
    files = ["a.txt", "b.txt", "--src", "de", "--tgt", "en", "-m", "m"]
    code, output = run("mine-files", *files, *flags)
    assert code == 1 and "stopped before mining" in output, output
    (options,) = options_made
    assert {name: getattr(options, name) for name in shared} == {name: MINE_FLAGS[name][1] for name in shared}
    assert (options.model, options.job_rows, options.force) == ("m", MineOptions.job_rows, False)


@pytest.fixture
def train_configs(monkeypatch) -> list:
    """The TrainConfig each `train` builds; no training runs."""
    import bitextmine.train.loop as loop

    seen: list[loop.TrainConfig] = []

    def stub(config: loop.TrainConfig, reporter) -> loop.TrainSummary:
        seen.append(config)
        return loop.TrainSummary(0, 0, 0, 0.0, 0, 0.0, {}, config.out)

    monkeypatch.setattr(loop, "train", stub)
    return seen


def test_every_train_flag_but_the_runs_own_is_a_field_of_train_flags():
    import typer.main

    from bitextmine.cli import app
    from bitextmine.cli.train_flags import TrainFlags

    command = typer.main.get_command(app).commands["train"]
    settings = {param.name for param in command.params if param.expose_value} - {
        "recipe",
        "threads",
        "json_path",
    }
    assert settings == {field.name for field in fields(TrainFlags)}


def test_the_vmsst_layer_flags_reach_its_settings_and_are_stored_only_when_given(train_configs, tmp_path):
    from bitextmine.train.objectives.settings import VmsstSettings

    common = ["train", "--data", "x", "--out", str(tmp_path), "--base", "b", "--max-steps", "1"]
    layers = ["--vmsst-language-layers", "3", "--vmsst-decoder-layers", "2"]
    assert run(*common, "--objectives", "vmsst", *layers)[0] == 0
    assert run(*common, "--objectives", "vmsst")[0] == 0
    with_flags, without = (config.options.of("vmsst") for config in train_configs)
    assert (with_flags.vmsst_language_layers, with_flags.vmsst_decoder_layers) == (3, 2)
    assert without == VmsstSettings()
    assert list(train_configs[0].options)[-2:] == ["vmsst_language_layers", "vmsst_decoder_layers"]
    assert "vmsst_language_layers" not in train_configs[1].options  # checkpoints from before still resume
