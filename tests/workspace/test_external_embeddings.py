"""`encode --embeddings`: vectors made elsewhere (.npy or LASER's raw rows) imported into the workspace,
then indexed and mined exactly as encoded ones; the errors; `mine --force` across models."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bitextmine.encoder.encoder import SentenceEncoder
from tests.helpers import heavy_imports, read_mined, run, sentences

SHARED_LINES = sentences(10, seed=0)
CORPORA = {"de": SHARED_LINES + sentences(15, seed=1), "en": sentences(12, seed=2) + SHARED_LINES}


def _write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def _vectors(model: Path, lines: list[str]) -> np.ndarray:
    return SentenceEncoder.load(str(model), precision="fp32").encode(lines).vectors


def _import(text: Path, lang: str, work: Path, vectors: Path, *extra: str) -> tuple[int, str]:
    return run(
        "encode", "--lid", "off", str(text), "-l", lang, "-w", str(work), "--embeddings", str(vectors), *extra
    )


def _index_and_mine(work: Path, *extra: str) -> bytes:
    for lang in ("de", "en"):
        code, output = run("index", lang, "-w", str(work))
        assert code == 0, output
    code, output = run("mine", "de", "en", "-w", str(work), *extra)
    assert code == 0, output
    return (work / "mined" / "de-en.tsv.zst").read_bytes()


def _one_line_error(code: int, output: str, *parts: str) -> None:
    """Exit status 1 and one line `error: ...` holding every part."""
    assert code == 1, output
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and all(part in errors[0] for part in parts), output


@pytest.mark.integration
def test_npy_and_raw_vectors_mine_the_same_file_as_encode(tmp_path, tiny_model_dir):
    model = tiny_model_dir("bert")
    texts = {lang: _write_lines(tmp_path / f"{lang}.txt", lines) for lang, lines in CORPORA.items()}
    for lang, text in texts.items():
        args = ("-l", lang, "-m", str(model), "-w", str(tmp_path / "enc"), "--precision", "fp32")
        code, output = run("encode", "--lid", "off", str(text), *args)
        assert code == 0, output
        vectors = _vectors(model, CORPORA[lang])
        np.save(tmp_path / f"{lang}.npy", vectors)
        vectors.astype(np.float32).tofile(tmp_path / f"{lang}.raw")
    encoded = _index_and_mine(tmp_path / "enc")
    for suffix, extra in ((".npy", []), (".raw", ["--dim", "32"])):
        work = tmp_path / f"imported{suffix}"
        for lang, text in texts.items():
            code, output = _import(
                text, lang, work, tmp_path / f"{lang}{suffix}", "--model-name", "tiny", *extra
            )
            assert code == 0, output
        assert _index_and_mine(work) == encoded
        manifest = json.loads((work / "emb" / "de" / "manifest.json").read_text())
        assert manifest["model"]["name"] == "tiny" and manifest["model"]["precision"] == "external"
        assert manifest["model"]["settings"]["source"]["path"] == str(tmp_path / f"de{suffix}")


@pytest.mark.integration
def test_a_rerun_skips_the_imported_shards_and_changed_vectors_import_again(tmp_path):
    text = _write_lines(tmp_path / "de.txt", CORPORA["de"])
    vectors = np.random.default_rng(0).standard_normal((25, 8)).astype(np.float32)
    np.save(tmp_path / "de.npy", vectors)
    args = (text, "de", tmp_path / "w", tmp_path / "de.npy", "--model-name", "m", "--shard-size", "10")
    assert _import(*args)[0] == 0
    code, output = _import(*args)
    assert code == 0 and "3 (0 encoded now)" in output, output
    np.save(tmp_path / "de.npy", -vectors)
    code, output = _import(*args)
    assert code == 0 and "3 (3 encoded now)" in output, output
    stored = np.load(tmp_path / "w" / "emb" / "de" / "shard-00000.npy")
    unit = -vectors[:10] / np.linalg.norm(vectors[:10], axis=1, keepdims=True)
    np.testing.assert_array_equal(stored, unit.astype(np.float16))


def test_empty_and_duplicate_lines_pick_the_rows_of_their_line_numbers(tmp_path):
    lines = ["alpha one", "", "beta two", "alpha one", "", "gamma three"]
    text = _write_lines(tmp_path / "de.txt", lines)
    vectors = np.zeros((6, 4), dtype=np.float32)
    vectors[[0, 2, 3, 5], [0, 1, 2, 3]] = [2.0, 3.0, 4.0, 5.0]  # rows of empty lines: zero, never read
    np.save(tmp_path / "de.npy", vectors)
    work = tmp_path / "w"
    code, output = _import(text, "de", work, tmp_path / "de.npy", "--model-name", "m", "--dedup")
    assert code == 0, output
    stored = np.load(work / "emb" / "de" / "shard-00000.npy")
    np.testing.assert_array_equal(stored, np.eye(4, dtype=np.float16)[[0, 1, 3]])  # the duplicate dropped
    shard = (work / "corpora" / "de" / "shard-00000.tsv").read_text().splitlines()
    assert [row.split("\t")[1] for row in shard] == ["1", "3", "6"]


def test_float16_raw_vectors_with_their_dtype(tmp_path):
    text = _write_lines(tmp_path / "de.txt", ["one", "two"])
    np.array([[3.0, 4.0], [0.0, 2.0]], dtype=np.float16).tofile(tmp_path / "de.f16")
    args = ("--model-name", "m", "--dim", "2", "--embeddings-dtype", "float16")
    code, output = _import(text, "de", tmp_path / "w", tmp_path / "de.f16", *args)
    assert code == 0, output
    stored = np.load(tmp_path / "w" / "emb" / "de" / "shard-00000.npy")
    np.testing.assert_array_equal(stored, np.array([[0.6, 0.8], [0.0, 1.0]], dtype=np.float16))


@pytest.mark.parametrize(
    ("name", "vectors", "extra", "message"),
    [
        ("rows.npy", np.ones((2, 4), np.float32), [], ["rows.npy has 2 rows but", "de.txt has 3 lines"]),
        ("odd.raw", np.ones(13, np.float32), ["--dim", "4"], ["odd.raw: 52 bytes", "float32 rows of dim 4"]),
        ("zero.npy", np.eye(3, 4, dtype=np.float32) * np.float32([[1], [0], [1]]), [], ["zero.npy: row 2"]),
        ("nan.npy", np.full((3, 4), np.nan, np.float32), [], ["nan.npy: row 1", "non-finite"]),
        (
            "dim.npy",
            np.ones((3, 4), np.float32),
            ["--dim", "8"],
            ["dim.npy: the vectors have dim 4, not --dim 8"],
        ),
        ("nodim.raw", np.ones(12, np.float32), [], ["nodim.raw: a raw vectors file needs --dim"]),
    ],
)
def test_bad_vectors_are_a_one_line_error_naming_the_file(tmp_path, name, vectors, extra, message):
    text = _write_lines(tmp_path / "de.txt", ["one", "two", "three"])
    path = tmp_path / name
    np.save(path, vectors) if name.endswith(".npy") else vectors.tofile(path)
    code, output = _import(text, "de", tmp_path / "w", path, "--model-name", "m", *extra)
    _one_line_error(code, output, *message)


@pytest.mark.parametrize(("name", "extra"), [("v.npz", ["--dim", "4"]), ("v.npy", [])])
def test_an_npz_archive_is_refused_whatever_its_name(tmp_path, name, extra):
    text = _write_lines(tmp_path / "de.txt", ["one", "two", "three"])
    with open(tmp_path / name, "wb") as fh:
        np.savez(fh, vectors=np.ones((3, 4), np.float32))
    code, output = _import(text, "de", tmp_path / "w", tmp_path / name, "--model-name", "m", *extra)
    _one_line_error(code, output, f"{name}: an .npz archive, not one array")


def test_model_name_is_required_and_one_input_file_only(tmp_path):
    text = _write_lines(tmp_path / "de.txt", ["one", "two", "three"])
    np.save(tmp_path / "de.npy", np.ones((3, 4), np.float32))
    code, output = _import(text, "de", tmp_path / "w", tmp_path / "de.npy")
    _one_line_error(code, output, "de.npy: --embeddings needs --model-name")
    args = (
        "encode",
        "--lid",
        "off",
        str(text),
        str(text),
        "-l",
        "de",
        "-w",
        str(tmp_path / "w"),
        "--model-name",
        "m",
    )
    code, output = run(*args, "--embeddings", str(tmp_path / "de.npy"))
    _one_line_error(code, output, "de.npy: --embeddings takes exactly one input file (not stdin)")
    assert not (tmp_path / "w" / "emb").exists()


@pytest.mark.integration
def test_languages_of_different_models_mine_only_when_forced(tmp_path):
    rng = np.random.default_rng(0)
    work = tmp_path / "w"
    for lang, name in (("de", "model-a"), ("en", "model-b")):
        text = _write_lines(tmp_path / f"{lang}.txt", CORPORA[lang])
        np.save(tmp_path / f"{lang}.npy", rng.standard_normal((len(CORPORA[lang]), 8)).astype(np.float32))
        assert _import(text, lang, work, tmp_path / f"{lang}.npy", "--model-name", name)[0] == 0
        assert run("index", lang, "-w", str(work))[0] == 0
    code, output = run("mine", "de", "en", "-w", str(work))
    _one_line_error(code, output, "'de' was encoded with model-a", "with model-b", "pass --force")
    code, output = run("mine", "de", "en", "-w", str(work), "--force")
    assert code == 0 and "warning: 'de' was encoded with model-a" in " ".join(output.split()), output
    code, output = run("mine", "de", "en", "-w", str(work), "--force", "--threshold", "auto")
    _one_line_error(code, output, "--embeddings VECTORS_DIR --model-name model-a", "pass --threshold FLOAT")


@pytest.mark.integration
def test_two_dimensions_under_one_model_name_are_one_line_before_any_work(tmp_path):
    work = _import_random(tmp_path, {"de": 8, "en": 12})
    code, output = run("index", "en", "-w", str(work))  # measures recall with de's vectors
    _one_line_error(code, output, "'de' has 8-dimensional vectors of m but 'en' 12-dimensional ones")
    assert run("index", "de", "-w", str(work), "--queries-from", "self")[0] == 0
    assert run("index", "en", "-w", str(work), "--queries-from", "self")[0] == 0
    for force in ([], ["--force"]):
        code, output = run("mine", "de", "en", "-w", str(work), *force)
        _one_line_error(code, output, "'de' has 8-dimensional vectors of m but 'en' 12-dimensional ones")
    assert not (work / "mined" / ".neighbours").exists()


def _import_random(tmp_path: Path, dims: dict[str, int], name: str = "m") -> Path:
    """A workspace of CORPORA's languages imported from random vectors of `dims` dimensions."""
    rng = np.random.default_rng(0)
    work = tmp_path / "w"
    for lang, dim in dims.items():
        text = _write_lines(tmp_path / f"{lang}.txt", CORPORA[lang])
        np.save(tmp_path / f"{lang}.npy", rng.standard_normal((len(CORPORA[lang]), dim)).astype(np.float32))
        code, output = _import(text, lang, work, tmp_path / f"{lang}.npy", "--model-name", name)
        assert code == 0, output
    return work


@pytest.mark.integration
def test_mine_refuses_to_write_over_the_vectors_the_workspace_imported(tmp_path):
    work = _import_random(tmp_path, {"de": 8, "en": 8})
    vectors = tmp_path / "de.npy"
    before = vectors.read_bytes()
    for lang in ("de", "en"):
        assert run("index", lang, "-w", str(work))[0] == 0
    code, output = run("mine", "de", "en", "-w", str(work), "-o", str(vectors), "--format", "tsv")
    _one_line_error(code, output, f"{vectors}: the same file as {vectors}, which the workspace")
    assert vectors.read_bytes() == before


# `bitextmine ARGS...` in a fresh interpreter, then whether torch or transformers was imported
@pytest.mark.integration
def test_index_and_mine_of_imported_vectors_import_neither_torch_nor_transformers(tmp_path):
    """An IVF index that FAISS searches itself (here IVF-SQ8) is built and mined without torch; exact search
    (torch's matrix products) and the IVF-Flat list scan import it when they run."""
    rng = np.random.default_rng(0)
    work = tmp_path / "w"
    for lang, lines in CORPORA.items():
        text = _write_lines(tmp_path / f"{lang}.txt", lines)
        np.save(tmp_path / f"{lang}.npy", rng.standard_normal((len(lines), 8)).astype(np.float32))
        assert _import(text, lang, work, tmp_path / f"{lang}.npy", "--model-name", "m")[0] == 0
    ivf = ["--factory", "IVF2,SQ8", "-w", str(work)]
    for command in (["index", "de", *ivf], ["index", "en", *ivf], ["mine", "de", "en", "-w", str(work)]):
        assert heavy_imports(*command) == [], command
    assert len(read_mined(work / "mined" / "de-en.tsv.zst")) > 0


def _bucc_slice(split: Path, out: Path, gold_pairs: int = 100, others: int = 200) -> dict[str, Path]:
    """Text files of the sentences of the split's first `gold_pairs` gold pairs and of the first `others`
    lines of each side, in file order (about 300 a side)."""
    gold = [line.split("\t") for line in (split / "de-en.dev.gold").read_text().splitlines()[:gold_pairs]]
    texts = {}
    for side, lang in enumerate(("de", "en")):
        wanted = {pair[side] for pair in gold}
        rows = [line.split("\t", 1) for line in (split / f"de-en.dev.{lang}").read_text().splitlines()]
        kept = [text for n, (ident, text) in enumerate(rows) if n < others or ident in wanted]
        texts[lang] = _write_lines(out / f"{lang}.txt", kept)
    return texts


def test_sentence_transformers_vectors_mine_the_pairs_encode_mines(tmp_path, e5_dir):
    """e5 vectors from sentence-transformers (the same "query: " prefix and mean pooling
    as bitextmine's encoder) imported with --embeddings mine the pairs that encoding with the model does."""
    from sentence_transformers import SentenceTransformer

    texts = _bucc_slice(e5_dir.parents[1] / "data" / "bucc-like" / "de-en", tmp_path)
    st_model = SentenceTransformer(str(e5_dir), device="cpu")
    for lang, text in texts.items():
        args = ("-l", lang, "-m", str(e5_dir), "-w", str(tmp_path / "enc"), "--precision", "fp32")
        code, output = run("encode", "--lid", "off", str(text), *args)
        assert code == 0, output
        lines = text.read_text(encoding="utf-8").splitlines()
        np.save(tmp_path / f"{lang}.npy", st_model.encode(lines, prompt="query: ", batch_size=64))
        code, output = _import(text, lang, tmp_path / "st", tmp_path / f"{lang}.npy", "--model-name", "e5")
        assert code == 0, output
    pairs = {}
    for work in ("enc", "st"):
        _index_and_mine(tmp_path / work, "--threshold", "1.04")
        pairs[work] = {(r[1], r[2]) for r in read_mined(tmp_path / work / "mined" / "de-en.tsv.zst")}
    assert len(pairs["enc"]) > 50 and pairs["st"] == pairs["enc"]


def test_encoder_and_launcher_flags_with_embeddings_are_refused_not_ignored(tmp_path):
    source = tmp_path / "de.txt"
    source.write_text("eins\nzwei\n")
    np.save(tmp_path / "v.npy", np.eye(2, 4, dtype=np.float32))
    for flags, named in (
        (["--precision", "bf16"], "--precision"),
        (["--pooling", "cls", "--padded"], "--pooling, --padded"),
        (["--launcher", "submitit-local"], "--launcher"),
    ):
        code, output = run(
            "encode",
            "--lid",
            "off",
            str(source),
            "-l",
            "de",
            "-w",
            str(tmp_path / "w"),
            "--embeddings",
            str(tmp_path / "v.npy"),
            "--model-name",
            "m",
            *flags,
        )
        assert code == 1 and f"without a model: {named} cannot apply" in " ".join(output.split()), output
    assert not (tmp_path / "w" / "emb").exists()
