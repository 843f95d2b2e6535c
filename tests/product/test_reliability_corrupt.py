"""Damaged vectors and index files: `index` and `mine` stop with one line naming the file and what to run,
never a traceback or a FAISS C++ message, and following that advice mends the workspace."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import run, sentences

pytestmark = pytest.mark.integration  # the CLI end to end


def _cut(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip(offset: int) -> Callable[[Path], None]:
    def flip(path: Path) -> None:
        data = bytearray(path.read_bytes())
        for i in range(offset, offset + 8):
            data[i] ^= 0xFF
        path.write_bytes(bytes(data))

    return flip


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _fewer_rows(path: Path) -> None:
    np.save(path, np.load(path)[:-1])


@pytest.fixture(scope="module")
def pristine(tmp_path_factory, tiny_model_dir) -> tuple[Path, dict[str, bytes], list[str]]:
    """An encoded and indexed de/en workspace, its mined pairs, and the command that encodes de."""
    root = tmp_path_factory.mktemp("corrupt")
    work, model = root / "work", str(tiny_model_dir("bert"))
    shared = sentences(10, seed=0)
    encode_de: list[str] = []
    for lang, lines in (("de", shared + sentences(15, seed=1)), ("en", sentences(12, seed=2) + shared)):
        path = root / f"{lang}.txt"
        path.write_text("\n".join(lines) + "\n")
        command = ["encode", str(path), "-l", lang, "-m", model, "-w", str(work), "--shard-size", "7"]
        encode_de = encode_de or command
        for args in (command, ["index", lang, "-w", str(work)]):
            code, output = run(*args)
            assert code == 0, output
    reference = _mine(work)
    return work, reference, encode_de


def _mine(work: Path) -> dict[str, bytes]:
    code, output = run("mine", "de", "en", "-w", str(work))
    assert code == 0, output
    return {p.name: p.read_bytes() for p in (work / "mined").glob("de-en.*") if not p.name.endswith(".json")}


def _copy(pristine, tmp_path: Path) -> Path:
    """The pristine workspace without its saved neighbour lists (with them, `mine` searches nothing)."""
    work = tmp_path / "work"
    shutil.copytree(pristine[0], work, ignore=shutil.ignore_patterns("mined"))
    return work


IVF = ("--factory", "IVF1,Flat")  # a FAISS file (exact indexes have none), searched exactly: one list


def _faiss_indexed(work: Path) -> Path:
    code, output = run("index", "de", "-w", str(work), *IVF)
    assert code == 0, output
    return work


def _one_line_error(args: list[str], *fragments: str) -> str:
    code, output = run(*args)
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert code == 1 and len(errors) == 1 and "Traceback" not in output, output
    message = " ".join(output[output.index("error:") :].split())  # rich may wrap a long line
    for fragment in fragments:
        assert fragment in message, message
    assert "faiss::" not in message and ".cpp" not in message, message
    return message


DAMAGES = {"cut short": _cut, "header garbled": _flip(10), "emptied": _empty, "a row short": _fewer_rows}


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_embedding_shard_is_one_line_and_a_plain_encode_mends_it(pristine, tmp_path, damage):
    work = _copy(pristine, tmp_path)
    shard = work / "emb" / "de" / "shard-00001.npy"
    DAMAGES[damage](shard)
    for command in (["mine", "de", "en"], ["index", "de"]):
        _one_line_error([*command, "-w", str(work)], f"{shard}: damaged embedding shard", "bitextmine encode")
    code, output = run(*pristine[2][:-4], "-w", str(work), "--shard-size", "7")  # the same encode again
    assert code == 0, output
    assert np.load(shard).shape == (7, 32)
    assert _mine(work) == pristine[1]


@pytest.mark.parametrize("damage", ["cut short", "bytes flipped in the lists", "emptied"])
def test_a_damaged_index_file_is_one_line_and_a_new_index_mends_it(pristine, tmp_path, damage):
    work = _faiss_indexed(_copy(pristine, tmp_path))
    index = work / "index" / "de.faiss"
    {"cut short": _cut, "bytes flipped in the lists": _flip(-100), "emptied": _empty}[damage](index)
    _one_line_error(
        ["mine", "de", "en", "-w", str(work)], f"{index}: damaged FAISS index", "bitextmine index de"
    )
    index.unlink()
    _faiss_indexed(work)
    assert _mine(work) == pristine[1]


def test_a_damaged_shard_of_a_sharded_index_is_named(pristine, tmp_path):
    work = _copy(pristine, tmp_path)
    code, output = run("index", "de", "-w", str(work), "--max-memory", "0.000002", *IVF)
    assert code == 0, output
    info = json.loads((work / "index" / "de.json").read_text())
    shard = work / "index" / info["shards"][1]["file"]
    _flip(-100)(shard)
    _one_line_error(["mine", "de", "en", "-w", str(work)], f"{shard}: damaged FAISS index")


def test_an_index_recorded_without_checksums_that_faiss_cannot_read_is_one_line(pristine, tmp_path):
    """Indexes saved before checksums were recorded: FAISS's own read error, named and without C++."""
    work = _faiss_indexed(_copy(pristine, tmp_path))
    record = work / "index" / "de.json"
    record.write_text(
        json.dumps({k: v for k, v in json.loads(record.read_text()).items() if k != "checksums"})
    )
    _cut(work / "index" / "de.faiss")
    _one_line_error(
        ["mine", "de", "en", "-w", str(work)], "de.faiss: cannot read this FAISS index", "bitextmine index de"
    )


def test_checksums_naming_files_outside_the_index_dir_are_refused(pristine, tmp_path):
    work = _faiss_indexed(_copy(pristine, tmp_path))
    record = work / "index" / "de.json"
    data = json.loads(record.read_text())
    record.write_text(json.dumps({**data, "checksums": {"../../secret": "0" * 64}}))
    _one_line_error(["mine", "de", "en", "-w", str(work)], "names files outside the index dir")
