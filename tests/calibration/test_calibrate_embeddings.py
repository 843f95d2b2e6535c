"""`calibrate --embeddings DIR --model-name NAME` learns a threshold on a BUCC-format split (or two
line-aligned files) from vectors made elsewhere (DIR/PAIR.SPLIT.LANG.npy, or DIR/NAME.npy a file; row i
for line i), stored where `mine --threshold auto` finds it for languages imported under NAME; bad vectors
are one-line errors naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bitextmine.calibration.bucc import read_bucc
from bitextmine.encoder.encoder import SentenceEncoder
from bitextmine.workspace.external import external_fingerprint
from tests.helpers import eval_bucc_dev, run, sentences, write_bucc

SPLIT_ROWS = 28  # write_bucc: 8 shared sentences and 20 others a side


@pytest.fixture
def bucc(tmp_path) -> Path:
    directory = tmp_path / "bucc"
    directory.mkdir()
    write_bucc(directory, sentences(8, seed=4))
    return directory


def calibrate(bucc: Path, work: Path, *options: str) -> tuple[int, str]:
    return run("calibrate", "--bucc", str(bucc), "--pair", "de-en", "-w", str(work), *options)


def save_sides(directory: Path, de: np.ndarray, en: np.ndarray) -> Path:
    directory.mkdir(exist_ok=True)
    np.save(directory / "de-en.dev.de.npy", de)
    np.save(directory / "de-en.dev.en.npy", en)
    return directory


def one_line_error(code: int, output: str, message: str) -> None:
    assert code == 1, output
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], output


def random_rows(rows: int = SPLIT_ROWS, dim: int = 8, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)


@pytest.mark.integration
def test_vectors_made_elsewhere_calibrate_the_threshold_that_mine_auto_uses(tmp_path, bucc, tiny_model_dir):
    model = str(tiny_model_dir("bert"))
    encoder = SentenceEncoder.load(model, precision="fp32")
    split = read_bucc(bucc, "de-en", "dev")
    vectors = save_sides(
        tmp_path / "vectors", *(encoder.encode(side.sentences).vectors for side in (split.src, split.tgt))
    )
    work = tmp_path / "w"
    code, output = calibrate(bucc, work, "--embeddings", str(vectors), "--model-name", "tiny model")
    assert code == 0, output
    [record] = json.loads((work / "thresholds.json").read_text())["thresholds"]
    assert (record["model"], record["fingerprint"]) == ("tiny model", external_fingerprint("tiny model"))
    assert record["f1"] == 100.0
    assert f"sentence vectors: read from {vectors / 'de-en.dev.de.npy'} and" in output

    for side, lang in ((split.src, "de"), (split.tgt, "en")):  # the split's sentences as corpora, imported
        text = tmp_path / f"{lang}.txt"
        text.write_text("".join(s + "\n" for s in side.sentences))
        imported = ("--embeddings", str(vectors / f"de-en.dev.{lang}.npy"), "--model-name", "tiny model")
        imported += ("--lid", "off")  # word salad: language identification would drop some of its lines
        assert run("encode", str(text), "-l", lang, "-w", str(work), *imported)[0] == 0
        assert run("index", lang, "-w", str(work))[0] == 0
    code, output = run("mine", "de", "en", "-w", str(work), "--threshold", "auto", "--filters", "none")
    assert code == 0, output
    stats = json.loads((work / "mined" / "de-en.stats.json").read_text())
    assert stats["threshold"]["value"] == record["value"]
    code, output = eval_bucc_dev(bucc, "--mined", str(work / "mined" / "de-en.tsv.zst"))
    assert code == 0 and "100.00" in output, output


@pytest.mark.integration
def test_mine_auto_on_imported_vectors_says_how_to_calibrate_them(tmp_path):
    """It said `calibrate` could not calibrate external embeddings."""
    work = tmp_path / "w"
    for lang, seed in (("de", 1), ("en", 2)):
        text = tmp_path / f"{lang}.txt"
        text.write_text("".join(s + "\n" for s in sentences(12, seed)))
        np.save(tmp_path / f"{lang}.npy", random_rows(12, seed=seed))
        args = ("--embeddings", str(tmp_path / f"{lang}.npy"), "--model-name", "laser 2")
        assert run("encode", str(text), "-l", lang, "-w", str(work), *args)[0] == 0
        assert run("index", lang, "-w", str(work))[0] == 0
    code, output = run("mine", "de", "en", "-w", str(work), "--threshold", "auto")
    one_line_error(code, output, "--embeddings VECTORS_DIR --model-name 'laser 2' --thresholds")


def test_random_vectors_calibrate_and_the_json_says_where_they_came_from(tmp_path, bucc):
    vectors = save_sides(tmp_path / "v", random_rows(seed=1), random_rows(seed=2).astype(np.float16))
    report = tmp_path / "r.json"
    code, output = calibrate(
        bucc, tmp_path / "w", "--embeddings", str(vectors), "--model-name", "m", "--json", str(report)
    )
    assert code == 0, output
    result = json.loads(report.read_text())
    assert result["vectors"] is None and result["model"] == "m"
    assert result["fingerprint"] == external_fingerprint("m")


@pytest.mark.parametrize(
    ("de", "en", "message"),
    [
        (None, random_rows(), "de-en.dev.de.npy: no such file (calibrate --embeddings DIR reads DIR/"),
        (random_rows(27), random_rows(), "de-en.dev.de.npy has 27 rows but de-en.dev.de has 28 lines"),
        (random_rows(), random_rows(dim=6), "de-en.dev.de.npy has dim 8 but de-en.dev.en.npy has dim 6"),
        (random_rows(), np.zeros((SPLIT_ROWS, 8), np.float32), "de-en.dev.en.npy: row 1 (line 1"),
        (random_rows(), random_rows().astype(np.float64), "expected a 2-D float32 or float16 array"),
    ],
)
def test_bad_vectors_are_a_one_line_error_naming_the_file(tmp_path, bucc, de, en, message):
    vectors = tmp_path / "v"
    save_sides(vectors, random_rows() if de is None else de, en)
    if de is None:
        (vectors / "de-en.dev.de.npy").unlink()
    code, output = calibrate(bucc, tmp_path / "w", "--embeddings", str(vectors), "--model-name", "m")
    one_line_error(code, output, message)
    assert not (tmp_path / "w" / "thresholds.json").exists()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--embeddings", "V"], "--embeddings needs --model-name"),
        (["--model-name", "m"], "--model-name names the model of --embeddings: add --embeddings DIR"),
        (
            ["--embeddings", "V", "--model-name", "m", "--model", "x", "--precision", "bf16"],
            "without a model: --model, --precision cannot apply",
        ),
    ],
)
def test_options_that_cannot_go_with_embeddings_are_refused(tmp_path, bucc, options, message):
    save_sides(tmp_path / "V", random_rows(), random_rows())
    options = [str(tmp_path / o) if o == "V" else o for o in options]
    one_line_error(*calibrate(bucc, tmp_path / "w", *options), message)


def test_a_model_in_the_environment_is_not_a_model_given(tmp_path, bucc, monkeypatch):
    monkeypatch.setenv("BITEXTMINE_MODEL", "some/model")
    vectors = save_sides(tmp_path / "v", random_rows(seed=1), random_rows(seed=2))
    code, output = calibrate(bucc, tmp_path / "w", "--embeddings", str(vectors), "--model-name", "m")
    assert code == 0, output


def write_pairs_files(directory: Path, lines: int = 50) -> tuple[Path, Path]:
    """Two line-aligned files of `lines` lines, the fourth blank on the target side."""
    src, tgt = directory / "own.de", directory / "own.en"
    src.write_text("".join(f"Satz {i}\n" for i in range(lines)))
    tgt.write_text("".join("\n" if i == 3 else f"sentence {i}\n" for i in range(lines)))
    return src, tgt


def test_line_aligned_files_calibrate_from_vectors_of_their_lines(tmp_path):
    """Each file's vectors, a row a line (blank ones too): the split keeps the rows of its lines, and the
    gold pairs kept for `mine` to plant are the vectors of every second kept line."""
    src, tgt = write_pairs_files(tmp_path)
    de = random_rows(50, seed=1)
    en = de + 0.01 * random_rows(50, seed=2)  # each line's target close to its source
    vectors = tmp_path / "v"
    vectors.mkdir()
    np.save(vectors / "own.de.npy", de)
    np.save(vectors / "own.en.npy", en)
    work = tmp_path / "w"
    code, output = run(
        "calibrate", "--pairs", str(src), str(tgt), "--pair", "de-en", "-w", str(work),
        "--embeddings", str(vectors), "--model-name", "m",
    )  # fmt: skip
    assert code == 0, output
    assert f"sentence vectors: read from {vectors / 'own.de.npy'} and {vectors / 'own.en.npy'}" in output
    [record] = json.loads((work / "thresholds.json").read_text())["thresholds"]
    assert record["f1"] == 100.0 and record["fingerprint"] == external_fingerprint("m")
    kept = [i for i in range(50) if i != 3][::2]  # line 4 blank: left out; every second line paired
    stored = np.load(next((work / "thresholds-pairs").iterdir()))

    def unit(rows):
        return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float16)

    assert np.array_equal(stored[0], unit(de[kept])) and np.array_equal(stored[1], unit(en[kept]))


@pytest.mark.parametrize(
    ("rows", "missing", "message"),
    [
        (49, None, "own.de.npy has 49 rows but own.de has 50 lines: give one vector a line"),
        (
            50,
            "own.en.npy",
            "own.en.npy: no such file (calibrate --embeddings DIR reads DIR/NAME.npy for each",
        ),
    ],
)
def test_vectors_of_line_aligned_files_that_do_not_fit_are_one_line_errors(tmp_path, rows, missing, message):
    src, tgt = write_pairs_files(tmp_path)
    vectors = tmp_path / "v"
    vectors.mkdir()
    np.save(vectors / "own.de.npy", random_rows(rows))
    np.save(vectors / "own.en.npy", random_rows(50))
    if missing:
        (vectors / missing).unlink()
    code, output = run(
        "calibrate", "--pairs", str(src), str(tgt), "--pair", "de-en", "-w", str(tmp_path / "w"),
        "--embeddings", str(vectors), "--model-name", "m",
    )  # fmt: skip
    one_line_error(code, output, message)


def test_line_aligned_files_of_one_name_are_refused_before_reading_vectors(tmp_path):
    """de/dev.txt and en/dev.txt would both read DIR/dev.txt.npy: one side's vectors for both sides, a
    threshold learned on a sentence against itself."""
    for lang in ("de", "en"):
        (tmp_path / lang).mkdir()
        (tmp_path / lang / "dev.txt").write_text("".join(f"{lang} {i}\n" for i in range(50)))
    vectors = tmp_path / "v"
    vectors.mkdir()
    np.save(vectors / "dev.txt.npy", random_rows(50))
    work = tmp_path / "w"
    code, output = run(
        "calibrate", "--pairs", str(tmp_path / "de" / "dev.txt"), str(tmp_path / "en" / "dev.txt"),
        "--pair", "de-en", "-w", str(work), "--embeddings", str(vectors), "--model-name", "m",
    )  # fmt: skip
    one_line_error(code, output, "are both named dev.txt, so DIR/dev.txt.npy cannot hold the vectors of each")
    assert not work.exists()
