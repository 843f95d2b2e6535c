"""Every bad input has a tested answer: a one-line error naming the file (and line), no traceback and
nothing half-written left behind, or a warning with counts where the input is repaired.

The README table "what happens when ..." points here and to the tests of cases covered elsewhere.
A strict xfail records a known gap; its reason names the module that needs the fix.
"""

from __future__ import annotations

import builtins
import errno
import gzip
import io
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import pytest
import zstandard
from click.testing import Result
from typer.testing import CliRunner

from bitextmine import files
from bitextmine.cli import app
from bitextmine.workspace.embeddings import EmbeddingStore
from tests.helpers import TRAINING_TEXT

pytestmark = pytest.mark.integration  # the CLI end to end (docs: make test-fast leaves these out)

runner = CliRunner()
FAST = ["--precision", "fp32", "--threads", "1"]


def cli(*args: str | Path) -> Result:
    return runner.invoke(app, [str(a) for a in args])


def assert_one_line_error(result: Result, *fragments: str) -> str:
    """Exit status 1, no traceback, exactly one `error:` line, containing every fragment."""
    output = result.output
    assert result.exit_code == 1, output
    assert isinstance(result.exception, SystemExit) and "Traceback" not in output, output
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, output
    for fragment in fragments:
        assert fragment.lower() in errors[0].lower(), output
    return errors[0]


def temporaries(root: Path) -> list[Path]:
    """Leftover atomic-write temporaries (``.NAME.tmp-PID``) below `root`."""
    return sorted(root.rglob(".*.tmp-*"))


def sentences(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    words = " ".join(TRAINING_TEXT).split()
    return [" ".join(rng.choice(words, size=rng.integers(3, 10))) + f" s{seed}n{i}" for i in range(n)]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def zst(data: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(data)


@pytest.fixture(scope="module")
def model(tiny_model_dir: Callable[[str], Path]) -> Path:
    return tiny_model_dir("bert")


def encode(source: Path, lang: str, model: Path, work: Path, *extra: str) -> Result:
    return cli("encode", "--lid", "off", source, "-l", lang, "-m", model, "-w", work, *FAST, *extra)


def deny_reading(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """chmod 000; as root, whom permissions do not stop, opening `path` fails with EACCES instead."""
    if os.geteuid() != 0:
        path.chmod(0)
        return
    real_open = io.open

    def guarded_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, str | os.PathLike) and os.fspath(file) == str(path):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded_open)
    monkeypatch.setattr(io, "open", guarded_open)


class _FullDisk:
    """A file whose writes store half their bytes, then fail as on a full disk."""

    def __init__(self, fh: Any) -> None:
        self._fh = fh

    def write(self, data: bytes) -> int:
        self._fh.write(data[: len(data) // 2])
        self._fh.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fh, name)

    def __enter__(self) -> _FullDisk:
        return self

    def __exit__(self, *exc: object) -> None:
        self._fh.close()


def fill_disk_at(monkeypatch: pytest.MonkeyPatch, name: str) -> list[Path]:
    """Make the atomic write of the file called `name` hit a full disk; return its temporaries."""
    attempts: list[Path] = []

    def full_disk_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        fh = builtins.open(file, mode, *args, **kwargs)  # noqa: SIM115 - the caller closes it
        if "w" in mode and Path(file).name.startswith(f".{name}.tmp-"):
            attempts.append(Path(file))
            return _FullDisk(fh)
        return fh

    monkeypatch.setattr(files, "open", full_disk_open, raising=False)
    return attempts


def summary_value(output: str, label: str) -> str:
    """The value next to `label` in encode's summary table."""
    match = re.search(rf"{re.escape(label)}\s*│\s*([\d,]+)", output)
    assert match, output
    return match.group(1)


def corpus_files(work: Path, lang: str) -> list[str]:
    return sorted(p.name for p in (work / "corpora" / lang).glob("*"))


def vectors(work: Path, lang: str) -> np.ndarray:
    return np.concatenate([np.load(p) for p in sorted((work / "emb" / lang).glob("shard-*.npy"))])


# ---------------------------------------------------------------------------------------------------
# encode: unreadable, corrupt, binary, empty input


def _bad_corpora(tmp: Path) -> dict[str, tuple[Path, str]]:
    """Case -> (file, what the error line says)."""
    good = zst(b"ein Satz\n" * 20)
    gz = gzip.compress("".join(f"Satz {i}\n" for i in range(3000)).encode())
    (tmp / "garbage.zst").write_bytes(good[:4] + os.urandom(200))
    (tmp / "trailing.zst").write_bytes(good + b"not a zstd frame")
    (tmp / "truncated.gz").write_bytes(gz[: len(gz) // 2])
    (tmp / "late-nul.txt").write_bytes(b"a line\n" * 30 + b"bin\x00ary\n")
    (tmp / "blank.txt").write_bytes(b"\n  \n\t\r\n\xc2\xa0\n")
    (tmp / "unreadable.txt").write_bytes(b"a line\n")
    return {
        "garbage zst frame": (tmp / "garbage.zst", "garbage.zst: corrupt or truncated zstd data after line"),
        "trailing garbage": (tmp / "trailing.zst", "trailing.zst: corrupt or truncated zstd data after line"),
        "truncated gz": (tmp / "truncated.gz", "truncated.gz: corrupt or truncated gzip data after line"),
        "NUL after a shard": (tmp / "late-nul.txt", "late-nul.txt:31: binary data (NUL byte)"),
        "blank lines only": (tmp / "blank.txt", "no sentences in"),
        "unreadable": (tmp / "unreadable.txt", "unreadable.txt: permission denied"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "garbage zst frame",
        "trailing garbage",
        "truncated gz",
        "NUL after a shard",
        "blank lines only",
        "unreadable",
    ],
)
def test_bad_corpus_is_one_line_error_and_leaves_nothing(tmp_path, model, monkeypatch, case):
    path, message = _bad_corpora(tmp_path)[case]
    if case == "unreadable":
        deny_reading(path, monkeypatch)
    work = tmp_path / "w"
    line = assert_one_line_error(encode(path, "de", model, work, "--shard-size", "5"), message)
    assert str(path) in line
    assert corpus_files(work, "de") == [] and not (work / "emb").exists()


def test_bad_new_input_keeps_the_embeddings_for_a_rerun_with_the_old_files(tmp_path, model):
    good = write_lines(tmp_path / "good.txt", sentences(12, seed=10))
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\nbin\x00ary\n")
    work = tmp_path / "w"
    assert encode(good, "de", model, work, "--shard-size", "5").exit_code == 0
    before = vectors(work, "de")
    both = cli(
        "encode", "--lid", "off", good, bad, "-l", "de", "-m", model, "-w", work, *FAST, "--shard-size", "5"
    )
    assert_one_line_error(both, f"{bad}:2: binary data")
    assert corpus_files(work, "de") == []
    rerun = encode(good, "de", model, work, "--shard-size", "5")
    assert rerun.exit_code == 0 and "3 (0 encoded now)" in rerun.output, rerun.output
    assert np.array_equal(vectors(work, "de"), before)


def test_invalid_utf8_and_long_lines_are_counted_per_file_and_in_total(tmp_path, model):
    one = tmp_path / "one.txt"
    one.write_bytes(b"gut\n\xff erstes\nok\n\xc3( zweites\n")
    two = tmp_path / "two.txt.zst"
    two.write_bytes(zst(b"x" * 300 + b"\nkurz\n" + b"y " * 400 + b"\n\xe9t\xe9\n"))
    work = tmp_path / "w"
    result = encode(one, "de", model, work, "--max-chars", "100")
    result_two = encode(two, "fr", model, work, "--max-chars", "100")
    assert result.exit_code == 0 and result_two.exit_code == 0, result.output + result_two.output
    output = " ".join((result.output + result_two.output).split())
    assert f"{one}:2: invalid UTF-8 replaced by U+FFFD (2 lines in this file)" in output
    assert f"{two}:1: line longer than 100 characters, cut (2 lines in this file)" in output
    assert f"{two}:4: invalid UTF-8 replaced by U+FFFD (1 lines in this file)" in output
    counts = {
        lang: json.loads((work / "corpora" / lang / "manifest.json").read_text())["counts"]
        for lang in ("de", "fr")
    }
    assert (counts["de"]["invalid_utf8"], counts["de"]["kept"]) == (2, 4)
    assert (counts["fr"]["too_long"], counts["fr"]["invalid_utf8"], counts["fr"]["kept"]) == (2, 1, 4)
    assert summary_value(result.output, "invalid UTF-8 (replaced)") == "2"
    assert summary_value(result_two.output, "cut to --max-chars") == "2"


# ---------------------------------------------------------------------------------------------------
# A full disk: one line naming the file, the temporary removed, a rerun resumes


@pytest.mark.parametrize(("folder", "shard"), [("corpora", "shard-00001.tsv"), ("emb", "shard-00001.npy")])
def test_disk_full_during_encode_then_rerun_completes(tmp_path, model, monkeypatch, folder, shard):
    source = write_lines(tmp_path / "de.txt", sentences(12, seed=0))
    work, reference = tmp_path / "w", tmp_path / "reference"
    assert encode(source, "de", model, reference, "--shard-size", "5").exit_code == 0
    with monkeypatch.context() as patch:
        attempts = fill_disk_at(patch, shard)
        result = encode(source, "de", model, work, "--shard-size", "5")
    target = work / folder / "de" / shard
    assert_one_line_error(result, f"{target}: cannot write: No space left on device; free some space")
    assert attempts and not any(p.exists() for p in attempts) and not temporaries(work)
    assert not target.exists()
    if folder == "emb":  # the finished shard is kept and recorded; the failed one is not
        assert sorted(EmbeddingStore(work / "emb" / "de", "de").manifest.shards) == ["shard-00000"]
    else:
        assert corpus_files(work, "de") == [] and not (work / "emb").exists()
    rerun = encode(source, "de", model, work, "--shard-size", "5")
    assert rerun.exit_code == 0, rerun.output
    encoded_now = 2 if folder == "emb" else 3
    assert f"3 ({encoded_now} encoded now)" in rerun.output
    assert np.array_equal(vectors(work, "de"), vectors(reference, "de"))


@pytest.fixture(scope="module")
def indexed(tmp_path_factory, model) -> Path:
    """A workspace with de and en encoded and indexed by the tiny model (copy it before changing it)."""
    root = tmp_path_factory.mktemp("indexed")
    work = root / "w"
    shared = sentences(6, seed=1)
    for lang, lines in (("de", shared + sentences(8, seed=2)), ("en", sentences(7, seed=3) + shared)):
        assert encode(write_lines(root / f"{lang}.txt", lines), lang, model, work).exit_code == 0
        assert cli("index", lang, "-w", work).exit_code == 0
    return work


def copy_of(work: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(work, tmp_path / "w"))


def test_disk_full_while_writing_mined_pairs_keeps_the_old_file(indexed, tmp_path, monkeypatch):
    work = copy_of(indexed, tmp_path)
    mined = work / "mined" / "de-en.tsv.zst"
    assert cli("mine", "de", "en", "-w", work).exit_code == 0
    before = mined.read_bytes()
    with monkeypatch.context() as patch:
        attempts = fill_disk_at(patch, mined.name)
        result = cli("mine", "de", "en", "-w", work)
    assert_one_line_error(result, f"{mined}: cannot write: No space left on device")
    assert attempts and not any(p.exists() for p in attempts) and not temporaries(work)
    assert mined.read_bytes() == before
    mined.unlink()
    assert cli("mine", "de", "en", "-w", work).exit_code == 0
    assert mined.read_bytes() == before


def test_disk_full_while_writing_an_index(indexed, tmp_path, monkeypatch):
    work = copy_of(indexed, tmp_path)

    def full_disk(index: Any, path: str) -> None:
        Path(path).write_bytes(b"partial")
        raise RuntimeError(
            f"Error in faiss::FileIOWriter at impl/io.cpp:102: fwrite to {path}: No space left"
        )

    monkeypatch.setattr(faiss, "write_index", full_disk)
    result = cli("index", "de", "-w", work, "--factory", "IVF1,Flat")  # exact indexes write no FAISS file
    assert_one_line_error(result, f"{work / 'index'}/de.", ".faiss: cannot write")  # its trained template
    assert not temporaries(work)


# ---------------------------------------------------------------------------------------------------
# Mismatched model fingerprints and stale indexes


def test_index_of_older_embeddings_is_refused(indexed, tmp_path, model):
    work = copy_of(indexed, tmp_path)
    more = write_lines(tmp_path / "more.txt", sentences(20, seed=4))
    assert encode(more, "de", model, work).exit_code == 0
    result = cli("mine", "de", "en", "-w", work)
    assert_one_line_error(result, "index of 'de' is stale", "rerun `bitextmine index de`")
    assert not (work / "mined").exists()


def test_index_of_other_embeddings_of_the_same_size_is_refused(indexed, tmp_path, model):
    work = copy_of(indexed, tmp_path)
    other = write_lines(tmp_path / "other.txt", sentences(14, seed=5))
    assert encode(other, "de", model, work).exit_code == 0
    assert_one_line_error(cli("mine", "de", "en", "-w", work), "index of 'de' is stale")


def test_recall_queries_from_another_model_are_refused(indexed, tmp_path, tiny_model_dir):
    work = copy_of(indexed, tmp_path)
    source = write_lines(tmp_path / "fr.txt", sentences(5, seed=6))
    assert encode(source, "fr", tiny_model_dir("xlm-roberta"), work).exit_code == 0
    result = cli("index", "de", "-w", work, "--queries-from", "fr")
    assert_one_line_error(result, "cannot measure recall with 'fr'", "fingerprint")


# ---------------------------------------------------------------------------------------------------
# calibrate / eval: BUCC files, Tatoeba files, mined files


def bucc_side(side: str, second: bytes | None = None) -> bytes:
    """The BUCC file of `side` (4 sentences), its second sentence replaced by `second` if given."""
    lines = [f"{side}-{i}\t{s}\n".encode() for i, s in enumerate(sentences(4, seed=7))]
    if second is not None:
        lines[1] = f"{side}-1\t".encode() + second + b"\n"
    return b"".join(lines)


def write_bucc(directory: Path) -> Path:
    directory.mkdir()
    for side in ("de", "en"):
        (directory / f"de-en.dev.{side}").write_bytes(bucc_side(side))
    write_lines(directory / "de-en.dev.gold", [f"de-{i}\ten-{i}" for i in range(4)])
    return directory


BUCC_CASES = {
    "missing": (None, "de-en.dev.de: no such file (expected BUCC 2018 files"),
    "unreadable": (bucc_side("de"), "de-en.dev.de: permission denied"),
    "empty": (b"", "de-en.dev.de: empty split, no sentences"),
    "binary": (bucc_side("de", b"bin\x00ary"), "de-en.dev.de:2: binary data"),
}


@pytest.mark.parametrize("case", list(BUCC_CASES))
def test_bad_bucc_file_is_one_line_error(tmp_path, model, monkeypatch, case):
    bucc = write_bucc(tmp_path / "bucc")
    content, message = BUCC_CASES[case]
    side = bucc / "de-en.dev.de"
    if content is None:
        side.unlink()
    else:
        side.write_bytes(content)
    if case == "unreadable":
        deny_reading(side, monkeypatch)
    result = cli("calibrate", "--bucc", bucc, "--pair", "de-en", "-m", model, "-w", tmp_path / "w", *FAST)
    assert_one_line_error(result, str(bucc / message), message)
    assert not (tmp_path / "w" / "thresholds.json").exists()


def test_unreadable_binary_and_invalid_tatoeba_files(tmp_path, model, monkeypatch):
    data = tmp_path / "tatoeba"
    data.mkdir()
    xx, eng = data / "tatoeba.deu-eng.deu", data / "tatoeba.deu-eng.eng"
    write_lines(eng, sentences(3, seed=8))
    xx.write_bytes(b"ok\nkaput \xff\nok\n")
    args = ["eval", "tatoeba", "--data", data, "-m", model, "-w", tmp_path / "w", *FAST]
    result = cli(*args)  # invalid UTF-8 is replaced and warned about on one line, as in every reader
    assert result.exit_code == 0 and f"warning: {xx}:2: invalid UTF-8 replaced by U+FFFD" in result.output
    xx.write_bytes(b"ok\nbin\x00ary\nok\n")
    assert_one_line_error(cli(*args), f"{xx}:2: binary data (NUL byte)")
    write_lines(xx, sentences(3, seed=8))
    deny_reading(eng, monkeypatch)
    assert_one_line_error(cli(*args), f"{eng}: permission denied")


@pytest.mark.parametrize("case", ["garbage", "truncated"])
def test_corrupt_mined_file_given_to_eval_is_one_line_error(tmp_path, case):
    bucc = write_bucc(tmp_path / "bucc")
    blob = zst("".join(f"1.0\ta{i}\tb{i}\t0:{i}\t0:{i}\n" for i in range(2000)).encode())
    mined = tmp_path / "de-en.tsv.zst"
    mined.write_bytes(b"not zstd at all" if case == "garbage" else blob[: len(blob) // 2])
    result = cli("eval", "bucc", "--bucc", bucc, "--pair", "de-en", "--split", "dev", "--mined", mined)
    assert_one_line_error(result, str(mined))


def test_unwritable_eval_json_is_one_line_error(tmp_path, model):
    data = tmp_path / "tatoeba"
    data.mkdir()
    for ext in ("deu", "eng"):
        write_lines(data / f"tatoeba.deu-eng.{ext}", sentences(3, seed=9))
    (tmp_path / "file").write_text("a file, not a folder")
    report = tmp_path / "file" / "report.json"
    result = cli(
        "eval", "tatoeba", "--data", data, "-m", model, "-w", tmp_path / "w", "--json", report, *FAST
    )
    assert_one_line_error(result, str(report))


# ---------------------------------------------------------------------------------------------------
# train --data


def train(data: Path, out: Path, model: Path) -> Result:
    args = ["--out", out, "--base", model, "--max-steps", "1", "--max-tokens", "120", "--bf16", "off"]
    return cli("train", "--data", data, *args, "--threads", "1")


def _bad_training_data(tmp: Path) -> dict[str, tuple[Path, str]]:
    """Case -> (file, what the error line says besides the file name)."""
    blob = zst("".join(f"a{i}\tb{i}\n" for i in range(5000)).encode())
    (tmp / "cut.de-en.tsv").write_bytes(blob[: len(blob) // 2])
    (tmp / "nul.de").write_bytes(b"ein Satz\nbin\x00ary\n")
    write_lines(tmp / "nul.en", ["a sentence", "binary"])
    (tmp / "tab.de-en.tsv").write_bytes(b"a\tb\nbin\x00ary\tbinary\n")
    (tmp / "empty.de-en.tsv").write_bytes(b"")
    (tmp / "locked.de").write_bytes(b"ein Satz\n")
    write_lines(tmp / "locked.en", ["a sentence"])
    return {
        "missing": (tmp / "missing.de", "missing.de: no such file or directory"),
        "unreadable": (tmp / "locked.de", "locked.de: permission denied"),
        "truncated zst": (tmp / "cut.de-en.tsv", "cut.de-en.tsv: corrupt or truncated zstd data after line"),
        "NUL in X.xx": (tmp / "nul.de", "nul.de:2: binary data (NUL byte)"),
        "NUL in TSV": (tmp / "tab.de-en.tsv", "tab.de-en.tsv:2: binary data (NUL byte)"),
        "empty": (tmp / "empty.de-en.tsv", "no training pairs"),
    }


@pytest.mark.parametrize(
    "case", ["missing", "unreadable", "truncated zst", "NUL in X.xx", "NUL in TSV", "empty"]
)
def test_bad_training_data_is_one_line_error(tmp_path, model, monkeypatch, case):
    path, message = _bad_training_data(tmp_path)[case]
    if case == "unreadable":
        deny_reading(path, monkeypatch)
    out = tmp_path / "out"
    line = assert_one_line_error(train(path, out, model), message)
    assert str(path) in line
    assert not list(out.rglob("*.pt")) and not (out / "config.json").exists()


def test_invalid_utf8_in_training_data_is_warned(tmp_path, model):
    (tmp_path / "u.de").write_bytes(b"ein Satz\nkaput \xff\n")
    write_lines(tmp_path / "u.en", ["a sentence", "broken"])
    result = train(tmp_path / "u.de", tmp_path / "out", model)
    assert result.exit_code == 0, result.output
    assert f"{tmp_path / 'u.de'}:2: invalid UTF-8" in " ".join(result.output.split())


def _training_pairs(tmp: Path) -> Path:
    write_lines(tmp / "p.en", sentences(8, seed=12))
    return write_lines(tmp / "p.de", sentences(8, seed=11))


@pytest.mark.parametrize(
    "failure",
    [
        OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)),
        RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598"),
    ],
    ids=["OSError", "torch RuntimeError"],
)
def test_disk_full_while_saving_a_checkpoint(tmp_path, model, monkeypatch, failure):
    import torch

    def full_disk(state: Any, file: Any, *args: Any, **kwargs: Any) -> None:
        Path(file).write_bytes(b"partial")
        raise failure

    monkeypatch.setattr(torch, "save", full_disk)
    out = tmp_path / "out"
    result = train(_training_pairs(tmp_path), out, model)
    checkpoint = out / "checkpoints" / "step-00000001.pt"
    line = assert_one_line_error(result, f"{checkpoint}: cannot write")
    assert ("No space left on device" if isinstance(failure, OSError) else "unexpected pos 704") in line
    assert not temporaries(out) and not list(out.rglob("*.pt"))


def test_disk_full_while_appending_to_the_training_log(tmp_path, model, monkeypatch):
    from bitextmine.train import loop

    def full_disk_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        fh = builtins.open(file, mode, *args, **kwargs)  # noqa: SIM115 - the caller closes it
        return _FullDisk(fh) if Path(file).name == loop.LOG_FILE and "a" in mode else fh

    monkeypatch.setattr(loop, "open", full_disk_open, raising=False)
    out = tmp_path / "out"
    result = train(_training_pairs(tmp_path), out, model)
    log = out / loop.LOG_FILE
    assert_one_line_error(result, f"{log}: cannot write: No space left on device")
    assert log.read_bytes() == b""  # the half record written is cut off again
    assert not list(out.rglob("*.pt"))
