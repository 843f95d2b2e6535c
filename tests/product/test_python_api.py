"""The public Python API: what `bitextmine` exports, that importing it changes nothing, and the runnable
example in examples/python_api.py on the shared model and data."""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import zstandard

import bitextmine
from tests.helpers import REPO, TRAINING_TEXT, build_tiny_model, require_shared, sentences, write_bucc


def test_every_exported_name_resolves():
    assert sorted(bitextmine.__all__) == sorted(bitextmine._EXPORTS)
    for name in bitextmine.__all__:
        assert getattr(bitextmine, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'mine_workspace'"):
        bitextmine.mine_workspace  # noqa: B018


def test_no_exported_name_is_shadowed_by_a_subpackage_import():
    """Importing bitextmine.X binds X on the package: an export named like a subpackage would flip between
    the two with import order (once `bm.train`, the function, broke `import bitextmine.train.data as d`)."""
    import importlib
    import pkgutil

    subpackages = {module.name for module in pkgutil.iter_modules(bitextmine.__path__)}
    assert not subpackages & set(bitextmine.__all__)
    importlib.import_module("bitextmine.train.recipes")  # binds bitextmine.train, the subpackage
    assert bitextmine.train_encoder.__module__ == "bitextmine.train.loop"
    assert importlib.import_module("bitextmine.train.data").__name__ == "bitextmine.train.data"


@pytest.mark.integration
def test_import_loads_nothing_heavy_and_changes_no_global_state():
    """In a fresh interpreter: no torch, FAISS or transformers, the same warning and logging setup."""
    probe = """
import logging, sys, warnings
def state():
    loggers = dict(logging.root.manager.loggerDict)
    return warnings.showwarning, list(warnings.filters), logging.root.level, loggers
before = state()
import bitextmine
bitextmine.Workspace, bitextmine.__all__
after = state()
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "faiss", "transformers", "numpy"))
print(before == after, heavy)
"""
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "True []"


@pytest.mark.integration
def test_the_python_api_example_mines_what_calibration_measured(tmp_path):
    """The example's workspace steps and its calibration score the same vectors: equal F1."""
    model = require_shared("models/multilingual-e5-small-q4")
    bucc = require_shared("data/bucc-like/de-en")
    shared_before = {p.name: p.stat().st_mtime_ns for p in model.iterdir()}
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "examples" / "python_api.py"),
            "--model",
            str(model),
            "--bucc",
            str(bucc),
            "--work",
            str(tmp_path / "work"),
            "--sentences",
            "300",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    calibrated = re.search(r"calibrated: threshold ([\d.]+), F1 ([\d.]+)", result.stdout)
    mined = re.search(r"mined: ([\d,]+) pairs -> (\S+), F1 ([\d.]+)", result.stdout)
    assert calibrated and mined, result.stdout + result.stderr
    assert mined[3] == calibrated[2] and float(mined[3]) > 80
    assert Path(mined[2]).is_file() and Path(mined[2]).parent == tmp_path / "work" / "mined"
    assert re.search(r"in memory: [\d,]+ pairs at the calibrated threshold", result.stdout)
    assert {p.name: p.stat().st_mtime_ns for p in model.iterdir()} == shared_before  # the model is only read


# ------------------------------------------------------------------ what a sentence-transformers user does


@pytest.fixture(scope="module")
def tiny_encoder(tiny_model_dir):
    return bitextmine.load_encoder(str(tiny_model_dir("bert")), device="cpu", precision="fp32")


class Recording:
    """An object with sentence-transformers' `.encode` keywords that records its calls; its vectors are
    not unit vectors."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], int, bool | None]] = []

    def encode(self, sentences, batch_size=32, show_progress_bar=None):
        self.calls.append((list(sentences), batch_size, show_progress_bar))
        return np.array([[len(s), 2.0, 1.0] for s in sentences]) * 3


class Plain:
    """An object whose `.encode` takes the sentences alone and returns lists."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def encode(self, sentences):
        self.calls.append(list(sentences))
        return [[1.0, float(len(s))] for s in sentences]


def as_stored(vectors: np.ndarray) -> np.ndarray:
    """Unit rows rounded through float16, as `embed` returns them."""
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return unit.astype(np.float16).astype(np.float32)


def test_a_string_is_one_sentence_not_its_characters(tiny_encoder):
    one = bitextmine.embed(tiny_encoder, "the dog sleeps")
    assert one.shape == (tiny_encoder.dim,)
    np.testing.assert_array_equal(one, bitextmine.embed(tiny_encoder, ["the dog sleeps"])[0])
    assert tiny_encoder.encode("the dog sleeps").vectors.shape == (tiny_encoder.dim,)
    assert bitextmine.embed(Plain(), "abc").shape == (2,)


def test_encoded_sentences_are_a_float32_array(tiny_encoder):
    encoded = tiny_encoder.encode(TRAINING_TEXT[:3])
    array = np.asarray(encoded)
    assert array.dtype == np.float32 and array.shape == (3, tiny_encoder.dim)
    np.testing.assert_array_equal(array, encoded.vectors)
    vectors = bitextmine.embed(tiny_encoder, TRAINING_TEXT[:3])
    assert isinstance(vectors, np.ndarray) and vectors.dtype == np.float32 and vectors.shape == array.shape


@pytest.mark.integration  # a model loaded and run: seconds
def test_embed_loads_a_model_given_by_its_path(tiny_model_dir):
    model = tiny_model_dir("bert")
    want = bitextmine.embed(bitextmine.load_encoder(str(model)), TRAINING_TEXT[:3])
    np.testing.assert_allclose(bitextmine.embed(model, TRAINING_TEXT[:3]), want, atol=1e-3)
    np.testing.assert_allclose(bitextmine.embed(str(model), TRAINING_TEXT[:3]), want, atol=1e-3)


@pytest.mark.integration  # a model loaded and run: seconds
def test_embed_by_path_loads_a_model_saved_again_there(tmp_path):
    model = build_tiny_model("bert", tmp_path / "model", seed=0)
    first = bitextmine.embed(model, TRAINING_TEXT[:3])
    np.testing.assert_array_equal(bitextmine.embed(model, TRAINING_TEXT[:3]), first)
    build_tiny_model("bert", model, seed=1)  # trained again into the same dir
    assert not np.allclose(bitextmine.embed(model, TRAINING_TEXT[:3]), first, atol=1e-2)


def test_embed_wraps_an_object_with_encode_and_passes_its_keywords():
    recording = Recording()
    vectors = bitextmine.embed(recording, ["ab", "abcd"], batch_size=8)
    assert recording.calls == [(["ab", "abcd"], 8, False)]  # its own progress bar kept off
    np.testing.assert_array_equal(vectors, as_stored(np.array([[6.0, 6, 3], [12, 6, 3]])))


def test_an_object_without_batch_size_gets_batch_size_sentences_a_call():
    plain = Plain()
    vectors = bitextmine.embed(plain, ["a", "bb", "ccc", "dddd", "e"], batch_size=2)
    assert plain.calls == [["a", "bb"], ["ccc", "dddd"], ["e"]]
    np.testing.assert_array_equal(vectors, as_stored(np.array([[1.0, n] for n in (1, 2, 3, 4, 1)])))


@pytest.mark.parametrize(
    ("returned", "message"),
    [([[1.0, 0.0]], "returned 1 vectors for 2 sentences"), ([[1.0, np.nan]] * 2, "row 0 holds NaN")],
)
def test_what_an_object_returns_is_checked(returned, message):
    class Wrong:
        def encode(self, sentences):
            return returned

    with pytest.raises(ValueError, match=message):
        bitextmine.embed(Wrong(), ["a", "b"])


def test_embed_refuses_what_it_cannot_use(tiny_encoder, tmp_path):
    with pytest.raises(TypeError, match=r"sentences\[1\] is a int, not a string"):
        bitextmine.embed(tiny_encoder, ["a", 3])
    with pytest.raises(TypeError, match=r"an object with \.encode"):
        bitextmine.embed(object(), ["a"])
    with pytest.raises(ValueError, match="batch_size must be a whole number >= 1, not 0"):
        bitextmine.embed(tiny_encoder, ["a"], batch_size=0)
    with pytest.raises(ValueError, match=r"cache_dir: .* a Plain does not have"):
        bitextmine.embed(Plain(), ["a"], cache_dir=tmp_path)


def test_load_encoder_sends_a_loaded_model_to_embed():
    with pytest.raises(TypeError, match=r"not a Plain; pass an object with \.encode .* to bitextmine\.embed"):
        bitextmine.load_encoder(Plain())


def test_batch_size_caps_the_sentences_of_a_forward(tiny_encoder, monkeypatch):
    want = tiny_encoder.encode(TRAINING_TEXT).vectors
    forwards: list[int] = []
    encode_batch = tiny_encoder._encode_batch
    monkeypatch.setattr(
        tiny_encoder, "_encode_batch", lambda ids: forwards.append(len(ids)) or encode_batch(ids)
    )
    got = tiny_encoder.encode(TRAINING_TEXT, batch_size=3).vectors
    assert forwards == [3, 3, 2]
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_progress_is_shown_only_when_asked(tiny_encoder, capsys):
    bitextmine.embed(tiny_encoder, TRAINING_TEXT[:3])
    bitextmine.embed(Plain(), ["a"])
    assert capsys.readouterr().err == ""
    bitextmine.embed(tiny_encoder, TRAINING_TEXT[:3], show_progress_bar=True)
    assert re.fullmatch(
        r"encoding: 3/3 \(100%\), [\d.,]+ sent/s, [\d,]+ tok/s, 0:00:\d\d\n", capsys.readouterr().err
    )
    bitextmine.embed(Plain(), ["a", "b"], show_progress_bar=True)
    assert re.fullmatch(r"encoding: 2/2 \(100%\), 0:00:\d\d\n", capsys.readouterr().err)


@pytest.mark.integration
def test_embed_takes_a_sentence_transformer_as_it_is(tmp_path):
    from sentence_transformers import SentenceTransformer

    from tests.st_models import SHAPES, build_st_model

    model = SentenceTransformer(str(build_st_model(SHAPES["max"], tmp_path)), device="cpu")  # not normalised
    got = bitextmine.embed(model, TRAINING_TEXT, batch_size=3)
    np.testing.assert_allclose(got, as_stored(model.encode(TRAINING_TEXT)), atol=1e-3)


@pytest.mark.integration
def test_wrapping_an_object_imports_no_sentence_transformers():
    probe = """
import sys
import bitextmine
class Encoder:
    def encode(self, sentences):
        return [[1.0, 2.0] for _ in sentences]
print(bitextmine.embed(Encoder(), ["a"]).shape, "sentence_transformers" in sys.modules)
"""
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "(1, 2) False"


@pytest.mark.integration  # a model loaded and run: seconds
def test_encode_takes_one_corpus_file_given_as_a_string(tmp_path, tiny_model_dir, capsys):
    corpus = tmp_path / "de.txt"
    corpus.write_text("".join(f"{line}\n" for line in TRAINING_TEXT))
    work = bitextmine.Workspace(tmp_path / "work")
    model = tiny_model_dir("bert")
    with pytest.raises(ValueError, match="show_progress_bar=True or a progress, not both"):
        bitextmine.encode(
            work, str(corpus), "de", model, progress=bitextmine.Progress(), show_progress_bar=True
        )
    with pytest.raises(TypeError, match=r"not a Plain; vectors made .* through import_embeddings"):
        bitextmine.encode(work, corpus, "de", Plain())
    with pytest.raises(TypeError, match=r"encode: the first argument is a bitextmine\.Workspace, not a str"):
        bitextmine.encode(str(corpus), "de", work, model)  # the order before the steps took theirs first
    summary = bitextmine.encode(work, str(corpus), "de", model, show_progress_bar=True)
    assert summary.rows == 4 and summary.counts.wrong_language == 4  # the English half: --lid reject
    assert re.match(r"encoding de: 4/4 \(100%\)", capsys.readouterr().err)
    assert bitextmine.encode(work, corpus, "de", str(model), show_progress_bar=True).shards_encoded == 0
    assert capsys.readouterr().err == ""  # nothing left to encode: no progress shown


# ------------------------------------------------------------------------------ docs/api.md's examples


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", page.read_text(), re.S | re.M)


@pytest.mark.integration
def test_the_python_examples_in_the_api_docs_run(tmp_path, monkeypatch, tiny_model_dir):
    """Every ```python block of docs/api.md, run in order with tiny models in place of the hub ids and
    the corpus files it names written first."""
    from tests.st_models import SHAPES, build_st_model

    models = {
        "intfloat/multilingual-e5-small": tiny_model_dir("bert"),
        "sentence-transformers/LaBSE": build_st_model(SHAPES["labse"], tmp_path / "labse"),
    }
    shared = sentences(10, seed=0)
    for name, lines in (("news.de.txt.zst", shared + sentences(15, seed=1)), ("news.en.txt.zst", shared)):
        (tmp_path / name).write_bytes(zstandard.compress("".join(f"{line}\n" for line in lines).encode()))
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks(REPO / "docs" / "api.md")
    assert len(blocks) == 3
    for block in blocks:
        for name, model in models.items():
            block = block.replace(f'"{name}"', repr(str(model)))
        exec(compile(block, "docs/api.md", "exec"), {})
    assert (tmp_path / "bitextmine-work" / "mined" / "de-en.tsv.zst").is_file()


@pytest.mark.integration  # a model loaded and run: seconds
def test_mine_sentences_gives_the_pairs_with_their_sentences_and_scores(tiny_encoder, tiny_model_dir):
    german = TRAINING_TEXT[1::2] + sentences(4, seed=1)
    english = sentences(3, seed=2) + TRAINING_TEXT[1::2]  # the German sentences again: perfect pairs
    pairs = bitextmine.mine_sentences(tiny_encoder, german, english)
    assert isinstance(pairs, bitextmine.SentencePairs) and len(pairs) == len(pairs.candidates) > 0
    score, src, tgt, i, j = pairs[0]  # paraphrase_mining's order: the score first
    assert (src, tgt) == (german[i], english[j]) and score == max(p.score for p in pairs)
    assert isinstance(pairs[0], bitextmine.SentencePair) and isinstance(pairs[:2], bitextmine.SentencePairs)
    kept = bitextmine.mine_sentences(str(tiny_model_dir("bert")), german, english, threshold=score)
    assert [(p.src, p.tgt) for p in kept] == [(src, tgt)]
    table = pairs.to_pandas()
    assert list(table.columns) == ["score", "src", "tgt", "src_index", "tgt_index", "cosine"]
    assert table.iloc[0]["src"] == src and table.iloc[0]["tgt_index"] == j


@pytest.mark.integration  # a model loaded and run: seconds
def test_encode_takes_the_keywords_and_shapes_of_sentence_transformers(tiny_encoder, capsys):
    import torch

    texts = TRAINING_TEXT[:3]
    reference = tiny_encoder.encode(texts).vectors
    tensor = tiny_encoder.encode(texts, convert_to_tensor=True, normalize_embeddings=True, batch_size=2)
    assert isinstance(tensor, torch.Tensor) and tensor.shape == (3, tiny_encoder.dim)
    np.testing.assert_allclose(tensor.numpy(), reference, atol=1e-6)  # other batches: other sums
    listed = tiny_encoder.encode(texts, convert_to_numpy=False)
    assert isinstance(listed, list) and len(listed) == 3 and listed[0].shape == (tiny_encoder.dim,)
    assert np.asarray(tiny_encoder.encode(texts[0])).shape == (tiny_encoder.dim,)
    assert tiny_encoder.encode(texts[0], convert_to_tensor=True).shape == (tiny_encoder.dim,)
    capsys.readouterr()
    tiny_encoder.encode(texts, show_progress_bar=True)
    assert "encoding: 3/3" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unit vectors"):
        tiny_encoder.encode(texts, normalize_embeddings=False)


def test_path_parameters_take_a_string(tiny_encoder, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bitextmine.embed(tiny_encoder, TRAINING_TEXT[:2], cache_dir="cache")
    assert len(list((tmp_path / "cache").glob("*.npy"))) == 1
    shared = sentences(6, seed=3)
    write_bucc(tmp_path, shared)
    split = bitextmine.read_bucc(str(tmp_path), "de-en", "dev")
    (tmp_path / "m.tsv").write_text("".join(f"1.5\t{s}\t{s}\tx:{i}\ty:{i}\n" for i, s in enumerate(shared)))
    assert bitextmine.score_mined_file("m.tsv", split).f1 == 1.0


def test_dir_lists_the_public_api_alone():
    assert dir(bitextmine) == sorted(bitextmine.__all__)
    assert not {"Any", "TYPE_CHECKING", "annotations", "importlib"} & set(dir(bitextmine))


def test_margins_of_k_or_fewer_sentences_a_side_are_warned_about():
    vectors = np.eye(4, dtype=np.float32)
    with pytest.warns(bitextmine.BitextmineWarning, match="4 x 4 sentences with k=4"):
        bitextmine.mine_arrays(vectors, vectors)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bitextmine.mine_arrays(vectors, vectors, k=3)
