"""sentence-transformers' `do_lower_case` (sentence_bert_config.json): texts, prompt included, are
lowercased before tokenizing, in both forwards and in training, and the setting is part of the
fingerprint."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
from transformers import AutoTokenizer
from typer.testing import CliRunner

from bitextmine.cli import app
from bitextmine.encoder.encoder import SentenceEncoder
from bitextmine.encoder.loading import model_fingerprint
from bitextmine.encoder.settings import EncoderSettings
from tests.helpers import build_tiny_model
from tests.st_models import HIDDEN, cosines, spread_weights

SENTENCES = ["Der Hund schläft auf dem Sofa", "KINDER spielen im Park", "Ein Mann fährt", "die Preise"]


def build_lowercasing_model(directory: Path, lowercase: bool) -> Path:
    """A tiny mean-pooled model with a capitalised prompt, saved by sentence-transformers, with
    `do_lower_case` in sentence_bert_config.json as older sentence-transformers versions wrote it (the
    tokenizer itself is cased)."""
    hf_dir = spread_weights(build_tiny_model("bert", directory / "hf"))
    modules = [Transformer(str(hf_dir)), Pooling(HIDDEN, pooling_mode="mean"), Normalize()]
    prompts = {"query": "Query: "}
    SentenceTransformer(modules=modules, device="cpu", prompts=prompts, default_prompt_name="query").save(
        str(directory / "st")
    )
    config_path = directory / "st" / "sentence_bert_config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "do_lower_case": lowercase}))
    return directory / "st"


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[bool, Path]:
    return {
        flag: build_lowercasing_model(tmp_path_factory.mktemp(f"lower-{flag}"), flag)
        for flag in (True, False)
    }


@pytest.mark.integration  # sentence-transformers loads the model: seconds
@pytest.mark.parametrize("packed", [True, False], ids=["packed", "padded"])
def test_lowercasing_models_encode_as_sentence_transformers_does(models, packed):
    want = SentenceTransformer(str(models[True]), device="cpu").encode(SENTENCES)
    cased = SentenceTransformer(str(models[False]), device="cpu").encode(SENTENCES)
    assert cosines(want, cased).min() < 0.999  # lowercasing changes these vectors: the test can fail
    encoder = SentenceEncoder.load(str(models[True]), device="cpu", packed=packed, precision="fp32")
    assert encoder.settings.lowercase and encoder.packed is packed
    got = encoder.encode(SENTENCES).vectors
    assert cosines(got, want).min() >= 0.9999
    assert np.allclose(encoder.encode([s.lower() for s in SENTENCES]).vectors, got, atol=1e-6)


def test_lowercasing_is_in_the_fingerprint_and_other_models_keep_theirs(models):
    settings = SentenceEncoder.load(str(models[True]), device="cpu", precision="fp32").settings
    cased = replace(settings, lowercase=False)
    assert model_fingerprint(models[True], settings) != model_fingerprint(models[True], cased)
    assert "lowercase" not in EncoderSettings().as_dict()  # so fingerprints from before it stay


@pytest.mark.integration  # training steps on a tiny model: seconds
def test_training_tokenizes_lowercased_and_the_trained_model_keeps_it(models, tmp_path):
    (tmp_path / "toy.de").write_text("Ein Hund\nZwei Katzen\nDrei Mäuse\n")
    (tmp_path / "toy.en").write_text("A dog\nTwo cats\nThree mice\n")
    out = tmp_path / "out"
    args = ["train", "--data", str(tmp_path / "toy.de"), "--base", str(models[True]), "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--max-steps", "1", "--bf16", "off", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert "Dense" not in result.output  # no Dense layer, no warning about one
    assert json.loads((out / "bitextmine.json").read_text())["encoder"]["lowercase"] is True
    tokenizer = AutoTokenizer.from_pretrained(out)  # saved from the one training used
    assert tokenizer("Hund KINDER")["input_ids"] == tokenizer("hund kinder")["input_ids"]
    trained = SentenceEncoder.load(str(out), device="cpu", precision="fp32")
    with torch.no_grad():
        vectors = trained.encode(["Der Hund", "der hund"]).vectors
    assert np.allclose(vectors[0], vectors[1], atol=1e-6)
