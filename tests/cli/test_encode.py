"""`bitextmine encode` end to end: output files, resume, refusal to mix models, one-line errors."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import zstandard
from typer.testing import CliRunner

from bitextmine.cli import app
from bitextmine.encoder.encoder import SentenceEncoder
from bitextmine.errors import BitextmineWarning
from bitextmine.workspace.corpus import read_text_shard
from tests.helpers import TRAINING_TEXT, require_shared

pytestmark = pytest.mark.integration  # the CLI end to end (docs: make test-fast leaves these out)

runner = CliRunner()


def write_zst(path: Path, lines: list[str]) -> Path:
    path.write_bytes(zstandard.ZstdCompressor().compress(("\n".join(lines) + "\n").encode()))
    return path


def encode(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["encode", *args])
    return result.exit_code, result.output


def corpus_lines(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    words = " ".join(TRAINING_TEXT).split()
    return [" ".join(rng.choice(words, size=rng.integers(1, 25))) for _ in range(n)]


def test_encode_small_zst_end_to_end(tmp_path, tiny_model_dir):
    lines = corpus_lines(45)
    lines[3] = "   "  # empty after cleaning: skipped, numbering kept
    lines[10] = lines[9]  # exact duplicate, dropped with --dedup
    source = write_zst(tmp_path / "de.txt.zst", lines)
    work = tmp_path / "work"
    args = [str(source), "--lang", "de", "--model", str(tiny_model_dir("bert")), "--workdir", str(work)]
    args += ["--shard-size", "10", "--dedup", "--precision", "fp32", "--lid", "off"]  # word salad, not German
    code, output = encode(*args, "--max-tokens", "64")
    assert code == 0, output
    assert "rows kept" in output

    texts, sources, line_numbers = [], [], []
    for shard in sorted((work / "corpora" / "de").glob("shard-*.tsv")):
        t, s, n = read_text_shard(shard)
        texts += t
        sources += s.tolist()
        line_numbers += n.tolist()
    expected_lines = [i + 1 for i in range(45) if i not in (3, 10)]
    assert line_numbers == expected_lines and set(sources) == {0}
    assert texts == [lines[i - 1] for i in expected_lines]

    manifest = json.loads((work / "emb" / "de" / "manifest.json").read_text())
    assert manifest["model"]["dim"] == 32 and len(list((work / "emb" / "de").glob("shard-*.json"))) == 5
    vectors = np.concatenate(
        [np.load(work / "emb" / "de" / f"shard-{i:05d}.npy", mmap_mode="r") for i in range(5)]
    )
    assert vectors.dtype == np.float16 and vectors.shape == (43, 32)
    assert np.allclose(np.linalg.norm(vectors.astype(np.float32), axis=1), 1.0, atol=2e-3)
    reference = SentenceEncoder.load(str(tiny_model_dir("bert")), device="cpu", packed=False).encode(texts)
    assert np.allclose(vectors, reference.vectors, atol=2e-3)

    code, output = encode(*args)
    assert code == 0 and "0 encoded now" in output and "reusing 5 text shard" in output


def test_stdin_and_gzip_inputs_give_the_same_embeddings(tmp_path, tiny_model_dir):
    lines = corpus_lines(12, seed=1)
    data = ("\r\n".join(lines) + "\r\n").encode()  # CRLF line ends are accepted
    (tmp_path / "c.gz").write_bytes(gzip.compress(data))
    model = str(tiny_model_dir("bert"))
    work = str(tmp_path / "w")
    assert encode(str(tmp_path / "c.gz"), "-l", "a", "--force-lang", "-m", model, "-w", work)[0] == 0
    result = runner.invoke(
        app, ["encode", "-", "-l", "b", "--force-lang", "-m", model, "-w", str(tmp_path / "w")], input=data
    )
    assert result.exit_code == 0, result.output
    a = np.load(tmp_path / "w" / "emb" / "a" / "shard-00000.npy")
    b = np.load(tmp_path / "w" / "emb" / "b" / "shard-00000.npy")
    assert a.shape == (12, 32) and np.array_equal(a, b)


def test_mixing_models_in_one_language_is_refused(tmp_path, tiny_model_dir):
    source = write_zst(tmp_path / "x.zst", corpus_lines(5))
    work = str(tmp_path / "w")
    assert encode(str(source), "-l", "de", "-m", str(tiny_model_dir("bert")), "-w", work)[0] == 0
    code, output = encode(str(source), "-l", "de", "-m", str(tiny_model_dir("xlm-roberta")), "-w", work)
    assert code == 1
    assert "error:" in output and "were made with" in output and "--overwrite" in output
    assert "Traceback" not in output
    code, output = encode(
        str(source), "-l", "de", "-m", str(tiny_model_dir("xlm-roberta")), "-w", work, "--overwrite"
    )
    assert code == 0, output
    manifest = json.loads((Path(work) / "emb" / "de" / "manifest.json").read_text())
    assert manifest["model"]["name"] == str(tiny_model_dir("xlm-roberta"))


def _bad_inputs(tmp: Path) -> dict[str, tuple[Path, str]]:
    good = zstandard.ZstdCompressor().compress(b"ein Satz\n" * 2000)
    (tmp / "dir").mkdir()
    (tmp / "trunc.zst").write_bytes(good[: len(good) // 2])
    (tmp / "corrupt.gz").write_bytes(b"\x1f\x8b\x08\x00" + b"garbage" * 50)
    (tmp / "bin.txt").write_bytes(b"ok line\nbad\x00line\n")
    (tmp / "empty.txt").write_bytes(b"")
    return {
        "missing": (tmp / "nope.txt", "no such file"),
        "directory": (tmp / "dir", "is a directory"),
        "truncated zst": (tmp / "trunc.zst", "corrupt or truncated"),
        "corrupt gz": (tmp / "corrupt.gz", "corrupt or truncated"),
        "binary": (tmp / "bin.txt", "bin.txt:2: binary data"),
        "empty": (tmp / "empty.txt", "no sentences"),
    }


@pytest.mark.parametrize("case", ["missing", "directory", "truncated zst", "corrupt gz", "binary", "empty"])
def test_bad_input_is_a_one_line_error_naming_the_file(tmp_path, tiny_model_dir, case):
    path, message = _bad_inputs(tmp_path)[case]
    code, output = encode(str(path), "-l", "de", "-m", str(tiny_model_dir("bert")), "-w", str(tmp_path / "w"))
    assert code == 1
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0] and path.name in errors[0], output
    assert "Traceback" not in output


def test_invalid_utf8_and_overlong_lines_are_warned_and_counted(tmp_path, tiny_model_dir):
    source = tmp_path / "odd.txt"
    source.write_bytes(b"gut\n" + b"caf\xe9 au lait\n" + b"Hund " * 5000 + b"\nEnde\n")
    code, output = encode(
        str(source),
        "-l",
        "de",
        "-m",
        str(tiny_model_dir("bert")),
        "-w",
        str(tmp_path / "w"),
        "--max-chars",
        "100",
    )
    assert code == 0, output
    assert "odd.txt:2" in output and "invalid UTF-8" in output
    assert "odd.txt:3" in output and "100 characters" in output
    texts, _, lines = read_text_shard(tmp_path / "w" / "corpora" / "de" / "shard-00000.tsv")
    assert lines.tolist() == [1, 2, 3, 4] and texts[1] == "caf\ufffd au lait" and len(texts[2]) <= 100


def test_no_model_is_a_clear_error(tmp_path):
    source = write_zst(tmp_path / "x.zst", ["a"])
    result = runner.invoke(app, ["encode", str(source), "-l", "de"], env={"BITEXTMINE_MODEL": ""})
    assert result.exit_code == 1 and "no model" in result.output


def test_help_explains_inputs_and_outputs():
    output = runner.invoke(app, ["encode", "--help"], terminal_width=200).output
    assert "WORK/corpora/LANG" in output and "WORK/emb/LANG" in output and "--max-tokens" in output


def _digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def _encode_cmd(source: Path, model: Path, work: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bitextmine",
        "encode",
        str(source),
        "--lang",
        "de",
        "--lid",
        "off",  # word salad, not German
        "--model",
        str(model),
        "--workdir",
        str(work),
        "--shard-size",
        "200",
        "--threads",
        "1",
    ]


def test_sigkill_mid_run_then_rerun_equals_uninterrupted_run(tmp_path, tiny_model_dir):
    model = tiny_model_dir("xlm-roberta")
    source = write_zst(tmp_path / "big.zst", corpus_lines(6000, seed=7))
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    subprocess.run(_encode_cmd(source, model, reference), check=True, capture_output=True)
    shards = len(list((reference / "emb" / "de").glob("shard-*.npy")))
    assert shards == 30

    process = subprocess.Popen(
        _encode_cmd(source, model, killed), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    emb = killed / "emb" / "de"
    deadline = time.monotonic() + 120
    while len(list(emb.glob("shard-*.npy"))) < 3 and time.monotonic() < deadline:
        time.sleep(0.005)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    done_at_kill = len(list(emb.glob("shard-*.npy")))
    assert 3 <= done_at_kill < shards, "the run must be killed mid-way"

    subprocess.run(_encode_cmd(source, model, killed), check=True, capture_output=True)
    assert _digest(emb) == _digest(reference / "emb" / "de")
    assert _digest(killed / "corpora" / "de") == _digest(reference / "corpora" / "de")
    rows = sum(np.load(p, mmap_mode="r").shape[0] for p in emb.glob("shard-*.npy"))
    assert rows == 6000


@pytest.mark.integration
def test_encode_real_bucc_slice_with_e5(tmp_path, e5_dir):
    lines = (require_shared("data/bucc-like/de-en") / "de-en.dev.en").read_text().splitlines()[:30]
    source = write_zst(tmp_path / "en.zst", [line.split("\t", 1)[1] for line in lines])
    code, output = encode(str(source), "-l", "en", "-m", str(e5_dir), "-w", str(tmp_path / "w"))
    assert code == 0, output
    vectors = np.load(tmp_path / "w" / "emb" / "en" / "shard-00000.npy").astype(np.float32)
    similarity = vectors @ vectors.T
    assert vectors.shape == (30, 384)
    assert (
        np.allclose(np.diag(similarity), 1.0, atol=2e-3) and similarity[~np.eye(30, dtype=bool)].max() < 0.99
    )


def test_precision_is_recorded_and_a_resume_at_another_precision_is_refused(tmp_path, tiny_model_dir):
    source = write_zst(tmp_path / "de.txt.zst", corpus_lines(12))
    work = tmp_path / "work"
    args = [str(source), "--lang", "de", "--model", str(tiny_model_dir("bert")), "--workdir", str(work)]
    code, output = encode(*args, "--precision", "bf16")
    assert code == 0 and "bf16" in output, output
    assert json.loads((work / "emb" / "de" / "manifest.json").read_text())["model"]["precision"] == "bf16"
    copy = shutil.copytree(tiny_model_dir("bert"), tmp_path / "model-copy")
    code, output = encode(*args[:-4], "--model", str(copy), "--workdir", str(work), "--precision", "fp32")
    assert code == 0, output  # nothing left to encode: the bf16 vectors stand, the new path is recorded
    manifest = json.loads((work / "emb" / "de" / "manifest.json").read_text())["model"]
    assert (manifest["precision"], manifest["name"]) == ("bf16", str(copy))
    more = write_zst(tmp_path / "more.txt.zst", corpus_lines(14))
    code, output = encode(*args, str(more), "--precision", "fp32")
    assert code == 1 and "made at precision bf16, not fp32; pass --precision bf16" in output, output
    assert len(output.strip().splitlines()) <= 3  # the shard lines, then one error line
    code, output = encode(*args, "--precision", "fp16")
    expected = "'fp16' is not one of 'auto', 'fp32', 'bf16', 'int8'"  # the parser's usage error
    assert code == 2 and expected in " ".join(output.replace("│", " ").split()), output


def test_shard_jobs_through_submitit_encode_what_the_local_run_encodes(tmp_path, tiny_model_dir):
    """--launcher submitit-local: the input file's corpus part and each text shard are jobs in their own
    processes, the shard jobs loading the encoder from its spec; the vectors and shard records equal an
    in-process run's, and job logs are kept."""
    source = write_zst(tmp_path / "c.zst", corpus_lines(30, seed=4))
    model = str(tiny_model_dir("bert"))
    common = [str(source), "-l", "de", "-m", model, "--shard-size", "15", "--precision", "fp32"]
    assert encode(*common, "-w", str(tmp_path / "local"))[0] == 0
    code, output = encode(*common, "-w", str(tmp_path / "jobs"), "--launcher", "submitit-local")
    assert code == 0, output
    assert _digest(tmp_path / "jobs" / "emb" / "de") == _digest(tmp_path / "local" / "emb" / "de")
    assert len(list((tmp_path / "jobs" / "logs" / "encode").glob("*_log.out"))) == 3  # 1 part, 2 shards


def test_library_warnings_print_on_one_line_each_time(capsys):
    from bitextmine.cli.app import user_errors

    with user_errors():  # what every command runs in
        for _ in range(2):
            warnings.warn("xFormers has no bfloat16 kernel here", BitextmineWarning, stacklevel=1)
    assert capsys.readouterr().err == "warning: xFormers has no bfloat16 kernel here\n" * 2
