"""sentence-transformers pipelines (Transformer -> Pooling -> Dense -> Normalize) encoded by bitextmine
against `SentenceTransformer.encode` on tiny random models built and saved with sentence-transformers'
own classes; refusals of what bitextmine does not run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from sentence_transformers import SentenceTransformer

import bitextmine
from bitextmine.encoder.encoder import SentenceEncoder
from bitextmine.encoder.precision import CHECK_SENTENCES
from bitextmine.errors import BitextmineError
from tests.helpers import TRAINING_TEXT, read_mined, run, sentences
from tests.st_models import HIDDEN, SHAPES, Shape, build_st_model, cosines

SENTENCES = [*TRAINING_TEXT, "Hund", "a", "the the the the " * 30, "unknown ÿ words ✓ here"]
# Cosine to sentence-transformers' fp32 vectors: fp32 is the same computation in another order; bf16 and
# int8 as in test_precision.py (the transformer in lower precision, the head in fp32).
# bf16 and int8 round the transformer (the head runs in float32). On these deliberately large random
# weights (spread_weights) bf16 measured 0.99966 at 1 and 2 threads, and once below 0.999 inside a
# full-suite run; int8 padded measured 0.99793 alone, and 0.97966 (one sentence) in one CI run whose
# cause is not found (global torch state left by another test is the suspect). A model without its
# Dense layer would give vectors of another size, and a wrong head would not get near either floor.
FLOOR = {"fp32": 0.9999, "bf16": 0.995, "int8": 0.97}


# Every pooling mode with the prompt's tokens left out of it (sentence-transformers' include_prompt=False).
WITHOUT_PROMPT = {
    f"{mode}-without-prompt": Shape("bert", mode, prompt="query: ", include_prompt=False)
    for mode in ("cls", "mean", "max", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
}


@pytest.fixture(scope="module")
def st_model(tmp_path_factory):
    """(model dir, sentence-transformers' vectors of SENTENCES) for a shape name, built once."""
    built: dict[str, tuple[Path, np.ndarray]] = {}

    def make(name: str) -> tuple[Path, np.ndarray]:
        if name not in built:
            directory = build_st_model({**SHAPES, **WITHOUT_PROMPT}[name], tmp_path_factory.mktemp(name))
            built[name] = directory, SentenceTransformer(str(directory), device="cpu").encode(SENTENCES)
        return built[name]

    return make


def bitextmine_vectors(model_dir: Path, packed: bool, precision: str = "fp32") -> np.ndarray:
    encoder = SentenceEncoder.load(
        str(model_dir), device="cpu", packed=packed, precision=precision, max_tokens=50
    )
    assert encoder.packed is packed
    vectors = encoder.encode(SENTENCES, window=5).vectors
    assert vectors.shape == (len(SENTENCES), encoder.dim)
    return vectors


@pytest.mark.integration  # sentence-transformers loads each model: seconds
@pytest.mark.parametrize("packed", [True, False], ids=["packed", "padded"])
@pytest.mark.parametrize("name", [*SHAPES, *WITHOUT_PROMPT])
def test_vectors_match_sentence_transformers(st_model, name, packed):
    model_dir, want = st_model(name)
    got = bitextmine_vectors(model_dir, packed)
    assert got.shape == want.shape
    assert cosines(got, want).min() >= FLOOR["fp32"], f"min cosine {cosines(got, want).min():.6f}"
    assert np.allclose(np.linalg.norm(got, axis=1), np.linalg.norm(want, axis=1), rtol=1e-4)


@pytest.mark.integration  # the precision self-check encodes its sample twice
@pytest.mark.parametrize("packed", [True, False], ids=["packed", "padded"])
@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_lower_precisions_go_through_the_same_head(st_model, precision, packed):
    model_dir, want = st_model("labse")
    got = bitextmine_vectors(model_dir, packed, precision)
    assert got.shape == want.shape == (len(SENTENCES), SHAPES["labse"].dense)
    assert cosines(got, want).min() >= FLOOR[precision]


def test_the_head_sets_dim_and_fingerprint(st_model, tiny_model_dir):
    model_dir, _ = st_model("labse")
    encoder = SentenceEncoder.load(str(model_dir), device="cpu")
    assert (encoder.dim, encoder.settings.pooling, encoder.max_length) == (24, "cls", 40)
    plain = SentenceEncoder.load(str(tiny_model_dir("bert")), device="cpu", overrides={"pooling": "cls"})
    assert plain.head.identity() == b"" and encoder.head.identity() != b""


def test_shared_model_matches_sentence_transformers(e5_dir):
    sentences = list(CHECK_SENTENCES)
    want = SentenceTransformer(str(e5_dir), device="cpu").encode(sentences)
    for packed in (True, False):
        got = SentenceEncoder.load(str(e5_dir), device="cpu", packed=packed).encode(sentences).vectors
        assert cosines(got, want).min() >= FLOOR["fp32"]


@pytest.mark.integration
def test_labse_shape_mined_end_to_end_gives_sentence_transformers_pairs(st_model, tmp_path):
    model_dir, _ = st_model("labse")
    shared = sentences(10, seed=0)
    texts = {"de": shared + sentences(15, seed=1), "en": sentences(12, seed=2) + shared}
    work = tmp_path / "work"
    for lang, lines in texts.items():
        path = tmp_path / f"{lang}.txt"
        path.write_text("\n".join(lines) + "\n")
        args = ["-l", lang, "-m", str(model_dir), "-w", str(work), "--precision", "fp32", "--device", "cpu"]
        code, output = run("encode", "--lid", "off", str(path), *args)
        assert code == 0, output
        assert json.loads((work / "emb" / lang / "manifest.json").read_text())["model"]["dim"] == 24
        code, output = run("index", lang, "-w", str(work))
        assert code == 0, output
    code, output = run("mine", "de", "en", "-w", str(work), "--threshold", "1.0", "--filters", "none")
    assert code == 0, output
    mined = {(row[1], row[2]) for row in read_mined(work / "mined" / "de-en.tsv.zst")}

    st = SentenceTransformer(str(model_dir), device="cpu")
    candidates = bitextmine.mine_arrays(st.encode(texts["de"]), st.encode(texts["en"])).above(1.0)
    assert mined == {
        (texts["de"][s], texts["en"][t]) for s, t in zip(candidates.src, candidates.tgt, strict=True)
    }
    assert {(s, s) for s in shared} <= mined


def write_modules(model_dir: Path, *types: str) -> None:
    entries = [
        {"idx": i, "name": str(i), "path": "" if i == 0 else f"{i}_M", "type": t} for i, t in enumerate(types)
    ]
    (model_dir / "modules.json").write_text(json.dumps(entries))


ST = "sentence_transformers.models."


def test_dense_weights_cut_short_are_a_one_line_error_naming_the_file(tiny_model_dir, tmp_path):
    model_dir = shutil.copytree(tiny_model_dir("bert"), tmp_path / "model")
    write_modules(model_dir, ST + "Transformer", ST + "Pooling", ST + "Dense")
    dense = model_dir / "2_M"
    dense.mkdir()
    (dense / "config.json").write_text(json.dumps({"in_features": HIDDEN, "out_features": 8}))
    weights = dense / "model.safetensors"
    save_file({"linear.weight": torch.zeros(8, HIDDEN), "linear.bias": torch.zeros(8)}, weights)
    weights.write_bytes(weights.read_bytes()[:-8])
    with pytest.raises(BitextmineError, match="cannot read the weights") as error:
        SentenceEncoder.load(str(model_dir), device="cpu")
    assert str(error.value).startswith(f"{weights}: ") and "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("types", "configs", "message"),
    [
        (
            (ST + "Transformer", ST + "Pooling", ST + "LayerNorm"),
            {},
            rf"module '{ST}LayerNorm' is not supported",
        ),
        ((ST + "Transformer", "my_package.Dense"), {}, r"module 'my_package.Dense' is not supported"),
        ((ST + "Transformer", ST + "Normalize", ST + "Pooling"), {}, r"Transformer -> Normalize -> Pooling"),
        (
            (ST + "Transformer", ST + "Pooling"),
            {"1_M": {"pooling_mode": "median"}},
            "unknown pooling mode 'median'",
        ),
        (
            (ST + "Transformer", ST + "Pooling"),
            {"1_M": {"pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": True}},
            r"pooling modes max \+ mean combined",
        ),
        (
            (ST + "Transformer", ST + "Pooling", ST + "Dense"),
            {"2_M": {"in_features": HIDDEN, "out_features": 8, "activation_function": "os.system"}},
            "activation 'os.system' is not a torch.nn module",
        ),
        (
            (ST + "Transformer", ST + "Pooling", ST + "Dense"),
            {"2_M": {"in_features": HIDDEN, "out_features": 8}},
            "no model.safetensors or pytorch_model.bin",
        ),
        (
            (ST + "Transformer", ST + "Pooling", ST + "Dense"),
            {"2_M": {"in_features": 64, "out_features": 8}},
            f"Dense takes 64 features, gets {HIDDEN}",
        ),
    ],
    ids=[
        "unknown-module",
        "foreign-module",
        "order",
        "unknown-mode",
        "combined-modes",
        "activation",
        "no-weights",
        "dense-size",
    ],
)
def test_what_bitextmine_does_not_run_is_a_one_line_error(tiny_model_dir, tmp_path, types, configs, message):
    model_dir = shutil.copytree(tiny_model_dir("bert"), tmp_path / "model")
    write_modules(model_dir, *types)
    for folder, config in configs.items():
        (model_dir / folder).mkdir()
        (model_dir / folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(BitextmineError, match=message) as error:
        SentenceEncoder.load(str(model_dir), device="cpu")
    assert "\n" not in str(error.value) and str(model_dir) in str(error.value)
