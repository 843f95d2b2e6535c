"""Training from a base whose sentence-transformers pipeline has a Dense layer (LaBSE's shape): training
neither uses nor saves it, and says so in one line when it starts."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from bitextmine.cli import app
from bitextmine.encoder.encoder import SentenceEncoder
from tests.st_models import HIDDEN, SHAPES, build_st_model


@pytest.mark.integration  # training steps on a tiny model: seconds
def test_a_dense_layer_in_the_base_is_warned_about_once_and_left_out(tmp_path):
    base = build_st_model(SHAPES["labse"], tmp_path / "labse")
    (tmp_path / "toy.de").write_text("ein Hund\nzwei Katzen\ndrei Mäuse\n")
    (tmp_path / "toy.en").write_text("a dog\ntwo cats\nthree mice\n")
    out = tmp_path / "out"
    args = ["train", "--data", str(tmp_path / "toy.de"), "--base", str(base), "--out", str(out)]
    result = CliRunner().invoke(
        app, [*args, "--max-steps", "1", "--bf16", "off", "--device", "cpu", "--max-pairs", "2"]
    )
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        f"warning: {base}: its sentence-transformers pipeline has 1 Dense layer(s) after the pooling, which "
        f"training neither uses nor saves: {out} will encode with the transformer's cls pooling, without "
        "them (docs/training.md)"
    ]
    assert result.stderr.index("warning:") < result.stderr.index("train: starting")
    trained = SentenceEncoder.load(str(out), device="cpu", precision="fp32")
    assert (trained.dim, trained.settings.pooling, len(trained.head.dense)) == (HIDDEN, "cls", 0)
