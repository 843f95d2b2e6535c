"""The corpus pass in parts (corpus/parts.py): one part per input file, then a merge that must
write the very bytes of the single pass (`build_corpus`); parts survive a crash, follow their input,
and can be built in several processes."""

from __future__ import annotations

import gzip
import io
import os
import signal
import subprocess
import sys
import types
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bitextmine.cli import app
from bitextmine.corpus import parts as corpus_parts
from bitextmine.corpus.build import build_corpus
from bitextmine.corpus.parts import build_corpus_from_parts
from bitextmine.corpus.settings import CorpusSettings
from bitextmine.errors import BitextmineError
from bitextmine.faults import FAULT_ENV
from bitextmine.launch import jobs
from bitextmine.steps.encode import EncodeOptions, prepare_corpus
from bitextmine.text.lid import DEFAULT_MIN_CONFIDENCE, RULE_CONFIDENCE, LidFilter, model_id
from bitextmine.text.reader import Columns, CorpusError
from bitextmine.workspace.layout import Workspace

GERMAN_LID = LidFilter("de", DEFAULT_MIN_CONFIDENCE, model_id())
GERMAN_REJECT = LidFilter("de", RULE_CONFIDENCE["reject"], model_id(), "reject")
DE = [
    "Die Regierung hat am Dienstag neue Regeln für den Wohnungsbau beschlossen.",
    "Der Zug nach Berlin fährt heute eine Stunde später ab.",
    "Wir haben gestern Abend lange über das Buch gesprochen.",
    "Das Wetter wird morgen in ganz Deutschland sonnig und warm.",
]
EN = [
    "The government approved new rules for housing construction on Tuesday.",
    "We talked about the book for a long time yesterday evening.",
]
# meta<TAB>sentence lines; with the whole line as the sentence, the TAB becomes a space
FILES = {
    "a.txt": [
        f"a1\t{DE[0]}",
        f"a2\t{EN[0]}",
        f"a3\t{DE[0]}",
        "",
        f"a5\t{DE[1]}",
        "no columns",
        f"a7\t{EN[0]}",
    ],
    "b.txt.gz": [f"b1\t{EN[0]}", f"b2\t{DE[0]}", f"b3\t{DE[2]}", f"b4\t{EN[1]}", f"b5\t{DE[2]}"],
    "empty.txt": ["", "  "],
    "c.txt": [f"c1\r\t{DE[3]}", f"c2\t{EN[1]}", f"c3\t{DE[1]}", f"c4\t{DE[3]}", "c5\t\xff" + DE[2][1:]],
}
SETTINGS = {
    "dedup": {"dedup": True},
    "no dedup": {"dedup": False},
    "dedup, lid": {"dedup": True, "lid": GERMAN_LID},
    "lid": {"dedup": False, "lid": GERMAN_LID},
    "dedup, lid reject": {"dedup": True, "lid": GERMAN_REJECT},
    "columns, meta, max_chars, dedup, lid": {
        "dedup": True,
        "lid": GERMAN_LID,
        "columns": Columns(2, 1),
        "max_chars": 40,
    },
}


def write_inputs(root: Path, files: dict[str, list[str]] = FILES) -> list[str]:
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, lines in files.items():
        data = "".join(f"{line}\n" for line in lines).encode()
        data = data.replace("\xff".encode(), b"\xff")  # one byte of invalid UTF-8
        (root / name).write_bytes(gzip.compress(data, mtime=0) if name.endswith(".gz") else data)
        paths.append(str(root / name))
    return paths


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def single_pass(paths: list[str], out: Path, **settings) -> tuple[dict[str, bytes], list[str]]:
    warnings: list[str] = []
    build_corpus(paths, "de", out, CorpusSettings(shard_size=2, **settings), warn=warnings.append)
    return files(out), warnings


def in_parts(
    paths: list[str], root: Path, workers: int = 1, **settings
) -> tuple[dict[str, bytes], list[str]]:
    warnings: list[str] = []
    build_corpus_from_parts(
        paths,
        "de",
        root / "corpus",
        root / "parts",
        CorpusSettings(shard_size=2, **settings),
        warn=warnings.append,
        workers=workers,
    )
    return files(root / "corpus"), warnings


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The inputs of the parts built in this process, in order."""
    names: list[str] = []
    real = corpus_parts.build_part

    def spy(path, *args, **kwargs):
        names.append(Path(path).name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(corpus_parts, "build_part", spy)
    return names


@pytest.fixture
def pools(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the local process pools the launcher ran jobs in."""
    sizes: list[int] = []
    real = jobs.run_in_processes

    def spy(calls, names, workers, ended):
        sizes.append(workers)
        return real(calls, names, workers, ended)

    monkeypatch.setattr(jobs, "run_in_processes", spy)
    return sizes


@pytest.mark.parametrize("settings", SETTINGS.values(), ids=SETTINGS.keys())
def test_parts_write_the_bytes_and_warnings_of_the_single_pass(tmp_path: Path, settings) -> None:
    paths = write_inputs(tmp_path / "in")
    want, warned = single_pass(paths, tmp_path / "single", **settings)
    assert in_parts(paths, tmp_path / "parts", **settings) == (want, warned)
    assert len(list((tmp_path / "parts" / "parts").iterdir())) == len(paths)


def test_every_corner_of_the_counts_is_reached(tmp_path: Path) -> None:
    """The inputs above drop a sentence for its language in one file and meet it again in a later one,
    and repeat sentences within and across files: the counts that prove it."""
    settings = SETTINGS["columns, meta, max_chars, dedup, lid"]
    warnings: list[str] = []
    paths = write_inputs(tmp_path / "in")
    manifest = build_corpus_from_parts(
        paths, "de", tmp_path / "c", tmp_path / "p", CorpusSettings(2, **settings), warn=warnings.append
    )
    counts = manifest.counts
    # duplicates: 2 within a, EN[0] (dropped for its language in a) and DE[0] of a again in b, 1 within b,
    # EN[1] (dropped in b) and DE[1] of a again in c, 1 within c; kept: DE[0..3] and c's cut DE[2]
    assert (counts.duplicates, counts.wrong_language, counts.kept, counts.missing_columns) == (8, 2, 5, 1)
    assert counts.too_long and counts.invalid_utf8 and counts.empty
    assert any("empty file" in w for w in warnings)


def test_a_crash_after_some_parts_resumes_with_them(tmp_path: Path, built: list[str]) -> None:
    paths = write_inputs(tmp_path / "in")
    want, warned = single_pass(paths, tmp_path / "single", dedup=True)
    out, parts = tmp_path / "corpus", tmp_path / "parts"
    script = (
        "import sys; from bitextmine.corpus.parts import build_corpus_from_parts as b; "
        "from bitextmine.corpus.settings import CorpusSettings as S; "
        "b(sys.argv[3:], 'de', sys.argv[1], sys.argv[2], S(2, dedup=True), warn=print)"
    )
    env = {**os.environ, FAULT_ENV: "after-rename@2"}  # killed once the second part is in place
    killed = subprocess.run([sys.executable, "-c", script, str(out), str(parts), *paths], env=env)
    assert killed.returncode == -signal.SIGKILL
    kept = {p.name: p.stat().st_mtime_ns for p in parts.iterdir()}
    assert len(kept) == 2 and not list(out.iterdir())
    assert in_parts(paths, tmp_path, dedup=True) == (want, warned)
    assert built == ["empty.txt", "c.txt"]
    assert {name: (parts / name).stat().st_mtime_ns for name in kept} == kept


def test_a_changed_input_rebuilds_its_part_alone_and_a_dropped_one_loses_it(
    tmp_path: Path, built: list[str]
) -> None:
    paths = write_inputs(tmp_path / "in")
    in_parts(paths, tmp_path, dedup=True, lid=GERMAN_LID)
    before = set(os.listdir(tmp_path / "parts"))
    built.clear()
    Path(paths[2]).write_text(f"{DE[1]}\n{DE[3]}\n")  # empty.txt: now a sentence of a.txt and one of c.txt
    want = single_pass(paths, tmp_path / "single", dedup=True, lid=GERMAN_LID)
    assert in_parts(paths, tmp_path, dedup=True, lid=GERMAN_LID) == want
    assert built == ["empty.txt"]
    after = set(os.listdir(tmp_path / "parts"))
    assert len(after - before) == 1 and len(before - after) == 1 and len(after) == len(paths)

    built.clear()
    del paths[1]
    want = single_pass(paths, tmp_path / "single2", dedup=True, lid=GERMAN_LID)
    assert in_parts(paths, tmp_path, dedup=True, lid=GERMAN_LID) == want
    assert built == ["empty.txt", "c.txt"]  # their positions moved: parts are named by position
    assert len(os.listdir(tmp_path / "parts")) == len(paths)


def test_other_settings_rebuild_every_part(tmp_path: Path, built: list[str]) -> None:
    paths = write_inputs(tmp_path / "in")
    in_parts(paths, tmp_path, dedup=True)
    built.clear()
    want = single_pass(paths, tmp_path / "single", dedup=True, max_chars=30)
    assert in_parts(paths, tmp_path, dedup=True, max_chars=30) == want
    assert len(built) == len(paths)


@pytest.mark.integration  # worker processes
def test_parts_built_in_two_processes_give_the_same_bytes(tmp_path: Path, pools: list[int]) -> None:
    paths = write_inputs(tmp_path / "in")
    want = single_pass(paths, tmp_path / "single", dedup=True, lid=GERMAN_LID)
    assert in_parts(paths, tmp_path, dedup=True, lid=GERMAN_LID, workers=2) == want
    assert pools == [2]


@pytest.mark.integration  # worker processes
def test_an_error_in_a_worker_is_the_one_line_error_of_its_file(tmp_path: Path) -> None:
    paths = write_inputs(tmp_path / "in")
    Path(paths[3]).write_bytes(b"ein Satz\nzwei\0\n")
    with pytest.raises(BitextmineError, match=f"^{paths[3]}:2: binary data"):
        in_parts(paths, tmp_path, dedup=True, workers=2)
    assert not list((tmp_path / "corpus").iterdir())
    assert len(list((tmp_path / "parts").iterdir())) == 3  # the good files' parts stay for the rerun


def test_stdin_keeps_the_single_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, built) -> None:
    monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(buffer=io.BytesIO(b"a\nb\na\n")))
    got, _ = in_parts(["-"], tmp_path, dedup=True)
    assert built == [] and not (tmp_path / "parts").exists()
    assert got["shard-00000.tsv"] == b"0\t1\ta\n0\t2\tb\n"


@pytest.mark.parametrize("damage", ["counts line lost", "a letter of a sentence changed"])
def test_a_damaged_part_is_a_one_line_error(tmp_path: Path, damage: str) -> None:
    paths = write_inputs(tmp_path / "in")
    in_parts(paths, tmp_path, dedup=True)
    part = sorted((tmp_path / "parts").iterdir())[1]
    lines = part.read_bytes().split(b"\n")
    if damage == "counts line lost":
        lines = [*lines[:-2], b""]
    else:  # the second line is the first row: HASH, LINE, TEXT
        lines[1] = lines[1][:-1] + bytes([lines[1][-1] ^ 1])
    part.write_bytes(b"\n".join(lines))
    with pytest.raises(CorpusError, match=f"^{part}: damaged corpus part"):
        in_parts(paths, tmp_path, dedup=True)
    assert not list((tmp_path / "corpus").iterdir())


def test_prepare_corpus_builds_in_parts_and_reuses_the_corpus(tmp_path: Path, built: list[str]) -> None:
    paths = write_inputs(tmp_path / "in")
    workspace = Workspace(tmp_path / "w")
    options = EncodeOptions(shard_size=2, dedup=True)
    manifest, rebuilt = prepare_corpus(paths, "de", workspace, options, print)
    assert rebuilt and len(built) == len(paths)
    lid = options.lid_filter("de")  # the default: reject
    assert lid == GERMAN_REJECT
    expected = single_pass(paths, tmp_path / "single", dedup=True, lid=lid)[0]
    assert files(workspace.corpus_dir("de")) == expected
    assert prepare_corpus(paths, "de", workspace, options, print) == (manifest, False)


@pytest.mark.integration  # the CLI end to end, worker processes
def test_encode_corpus_workers_reads_the_files_in_processes(
    tmp_path: Path, tiny_model_dir, pools: list[int]
) -> None:
    paths = write_inputs(tmp_path / "in")
    work = tmp_path / "w"
    args = ["encode", *paths, "-l", "de", "-m", str(tiny_model_dir("bert")), "-w", str(work), "--dedup"]
    result = CliRunner().invoke(app, [*args, "--shard-size", "2", "--corpus-workers", "2"])
    assert result.exit_code == 0, result.output
    assert pools == [2]
    expected = single_pass(paths, tmp_path / "single", dedup=True, lid=GERMAN_REJECT)[0]  # the default
    assert files(work / "corpora" / "de") == expected
