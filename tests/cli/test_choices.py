"""Choices are checked by the parser, before any work, and listed in --help; `--version`."""

from __future__ import annotations

import tomllib
import typing

import pytest
from typer.testing import CliRunner

import bitextmine
from bitextmine.cli import app
from bitextmine.cli.app import AttentionOption, PrecisionOption
from bitextmine.cli.encode import Pooling
from bitextmine.cli.mine import OutputFormat
from bitextmine.encoder.attention import ATTENTION_BACKENDS
from bitextmine.encoder.precision import PRECISIONS
from bitextmine.encoder.st_files import POOLING_MODES
from bitextmine.errors import BitextmineError
from bitextmine.mining.mined_file import FORMATS
from bitextmine.mining.settings import MiningSettings
from bitextmine.steps.mine import MineOptions
from bitextmine.steps.score import ScoreOptions
from tests.helpers import REPO

runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "valid"),
    [
        (["mine", "de", "en", "--margin", "ration"], "'ratio', 'distance', 'csls', 'absolute'"),
        (["mine", "de", "en", "--strategy", "both"], "'max', 'intersect', 'fwd', 'bwd'"),
        (["mine", "de", "en", "--launcher", "slurmm"], "'local', 'slurm', 'submitit-local'"),
        (["mine", "de", "en", "--format", "parq"], "'tsv.zst', 'tsv.gz', 'tsv', 'jsonl', 'parquet'"),
        (["encode", "x.txt", "-l", "de", "--precision", "fp16"], "'auto', 'fp32', 'bf16', 'int8'"),
        (["encode", "x.txt", "-l", "de", "--device", "gpu"], "'auto', 'cpu', 'cuda', 'cuda:N'"),
        (["encode", "x.txt", "-l", "de", "--attention", "flash"], "'auto', 'varlen', 'xformers', 'sdpa'"),
        (["train", "--data", "x", "--out", "o", "--bf16", "yes"], "'auto', 'on', 'off'"),
        (["train", "--data", "x", "--out", "o", "--mexma-alignment", "cos"], "'mse', 'contrastive'"),
    ],
)
def test_a_mistyped_choice_is_a_usage_error_listing_the_valid_values(tmp_path, monkeypatch, args, valid):
    monkeypatch.setenv("BITEXTMINE_WORKDIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert valid in " ".join(result.output.replace("│", " ").split()), result.output
    assert list(tmp_path.iterdir()) == []  # nothing ran


TRAIN = ["train", "--data", "x", "--out", "o", "--base", "m", "--max-steps", "1"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["mine", "de", "en", "--threshold", "abc"], "--threshold must be a number, auto or auto:PAIR"),
        (["mine", "de", "en", "--threshold", "auto:xx"], "bad language pair 'xx'"),
        (["mine", "de/x", "en"], "invalid language code 'de/x'"),
        (["mine", "de", "en", "--filters", "webb"], "unknown filter preset 'webb'"),
        (["mine", "de", "en", "--filter", "lang"], "unknown filter 'lang'"),
        (["mine", "de", "en", "--filter", "length-ratio=two"], "'two' is not a valid value for length-ratio"),
        (["index", "../de"], "invalid language code '../de'"),
        (["index", "de", "--queries-from", "e n"], "invalid language code 'e n'"),
        (["index", "de", "--max-memory", "0"], "must be above 0, not 0"),
        (["index", "de", "--target-recall", "0"], "must be above 0, not 0"),
        (["index", "de", "--seed", "-1"], "'--seed'"),
        (["encode", "x.txt", "-l", "d e"], "invalid language code 'd e'"),
        (["encode", "x.txt", "-l", "de", "--pooling", "avg"], "'cls', 'max', 'mean'"),
        (["encode", "x.txt", "-l", "de", "--max-length", "0"], "'--max-length'"),
        (
            ["score", "x.tsv", "--src", "de", "--tgt", "en", "-o", "o", "--threshold", "x"],
            "--threshold must be",
        ),
        (
            ["score", "x.tsv", "--src", "de", "--tgt", "en", "-o", "o", "--columns", "2", "2"],
            "bad bitext columns",
        ),
        (["calibrate", "--bucc", "b", "--pair", "deen"], "bad language pair 'deen'"),
        (["calibrate", "--bucc", "b", "--pair", "de-en", "--target-precision", "1.5"], "at most 1, not 1.5"),
        (["calibrate", "--bucc", "b", "--pair", "de-en", "--plateau", "-1"], "--plateau must be at least 0"),
        (["eval", "bucc", "--bucc", "b", "--pair", "de-en", "--threshold", "best"], "--threshold must be"),
        ([*TRAIN, "--lr", "0"], "must be above 0, not 0"),
        ([*TRAIN, "--temperature", "-0.1"], "must be above 0, not -0.1"),
        ([*TRAIN, "--max-minutes", "0"], "must be above 0, not 0"),
        ([*TRAIN, "--mask-ratio", "1.5"], "'--mask-ratio'"),
        ([*TRAIN, "--heads", "0"], "'--heads'"),
    ],
)
def test_a_bad_option_value_is_a_usage_error_before_any_work(tmp_path, monkeypatch, args, message):
    monkeypatch.setenv("BITEXTMINE_WORKDIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.replace("│", " ").split()), result.output
    assert list(tmp_path.iterdir()) == []  # nothing ran


K_OUT_OF_RANGE = [
    ("2147483648", "less than or equal to 4096"),
    ("1" + "0" * 20, "less than or equal to 4096"),
]


@pytest.mark.parametrize(
    "command",
    [
        ["mine", "de", "en"],
        ["score", "x.tsv", "--src", "de", "--tgt", "en", "-o", "out.tsv"],
        ["calibrate", "--bucc", "b", "--pair", "de-en"],
        ["eval", "bucc", "--bucc", "b", "--pair", "de-en"],
        ["eval", "words", "--pair", "de-en", "--parallel", "p", "--dict", "d"],
    ],
    ids=lambda command: " ".join(command[:2]),
)
@pytest.mark.parametrize(("k", "message"), [*K_OUT_OF_RANGE, ("0", "greater than or equal to 1")])
def test_k_out_of_its_range_is_a_usage_error_before_any_work(tmp_path, monkeypatch, command, k, message):
    monkeypatch.setenv("BITEXTMINE_WORKDIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, [*command, "--k", k])
    assert result.exit_code == 2 and "'--k'" in result.output, result.output
    assert message in " ".join(result.output.replace("│", " ").split()), result.output
    assert list(tmp_path.iterdir()) == []


def test_the_cli_precisions_are_the_encoders():
    (choices,) = typing.get_args(PrecisionOption)[:1]
    assert typing.get_args(choices) == ("auto", *PRECISIONS)


def test_the_cli_attention_backends_are_the_encoders():
    (choices,) = typing.get_args(AttentionOption)[:1]
    assert typing.get_args(choices) == ATTENTION_BACKENDS


def test_the_cli_output_formats_are_the_writers():
    assert typing.get_args(OutputFormat) == FORMATS


def test_the_cli_poolings_are_the_encoders():
    assert typing.get_args(Pooling) == POOLING_MODES


def test_version_is_written_once_in_the_package():
    """pyproject.toml takes the package's version from bitextmine/version.py, which --version prints."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "bitextmine.version.__version__"}
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output == f"bitextmine {bitextmine.__version__}\n"


@pytest.mark.parametrize("options", [MineOptions, ScoreOptions, MiningSettings])
def test_api_options_check_their_margin_when_made(options):
    with pytest.raises(BitextmineError, match="unknown margin 'ration'; choose one of ratio, distance"):
        options(margin="ration")


@pytest.mark.parametrize("options", [MineOptions, MiningSettings])
def test_api_options_check_their_strategy_when_made(options):
    with pytest.raises(BitextmineError, match="unknown candidate strategy 'both'"):
        options(strategy="both")
