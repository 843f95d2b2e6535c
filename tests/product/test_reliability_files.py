"""Atomic writes in shared and crashing worlds: unguessable temporary names created exclusively (a planted
symlink is never written through), the folder fsynced after the rename, and the temporaries of killed
runs removed by the next run of the step that owns their folder."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from bitextmine import files
from bitextmine.faults import FAULT_ENV
from bitextmine.files import atomic_path, write_json
from tests.helpers import run


def test_temporary_names_are_unguessable_and_new_for_every_write(tmp_path):
    names = []
    for _ in range(3):
        with atomic_path(tmp_path / "out.bin") as tmp:
            names.append(tmp.name)
    assert len(set(names)) == 3
    assert all(name.startswith(f".out.bin.tmp-{os.getpid()}-") for name in names)


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "elsewhere" / "victim.txt"
    victim.parent.mkdir()
    victim.write_text("precious\n")
    return victim


def test_a_symlink_planted_at_the_pid_name_is_not_written_through(tmp_path):
    """Names used to be `.NAME.tmp-PID`: anyone who could write the folder could aim one at a file."""
    victim = _victim(tmp_path)
    target = tmp_path / "work" / "record.json"
    target.parent.mkdir()
    (target.parent / f".record.json.tmp-{os.getpid()}").symlink_to(victim)
    write_json(target, {"ok": True})
    assert victim.read_text() == "precious\n"
    assert json.loads(target.read_text()) == {"ok": True} and not target.is_symlink()


@pytest.mark.parametrize("writer", ["atomic_open", "atomic_path"])
def test_a_symlink_at_the_drawn_name_is_refused_and_another_name_drawn(tmp_path, monkeypatch, writer):
    victim = _victim(tmp_path)
    target = tmp_path / "work" / "out.txt"
    target.parent.mkdir()
    planted = ".out.txt.tmp-guessed"
    (target.parent / planted).symlink_to(victim)
    drawn = iter([planted, ".out.txt.tmp-fresh"])
    monkeypatch.setattr(files, "_temporary_name", lambda name: next(drawn))
    if writer == "atomic_open":
        with files.atomic_open(target) as fh:
            fh.write("new\n")
    else:
        with atomic_path(target) as tmp:
            assert tmp.name == ".out.txt.tmp-fresh"
            with open(tmp, "w") as fh:  # what torch.save and faiss.write_index do with the path
                fh.write("new\n")
    assert victim.read_text() == "precious\n"
    assert target.read_text() == "new\n" and not target.is_symlink()


def test_the_folder_is_fsynced_after_the_rename(tmp_path, monkeypatch):
    events: list[tuple[str, object]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        info = os.fstat(fd)
        events.append(("fsync-dir" if stat.S_ISDIR(info.st_mode) else "fsync-file", info.st_ino))
        real_fsync(fd)

    def replace(src, dst) -> None:
        real_replace(src, dst)
        events.append(("replace", Path(dst).name))

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    folder = tmp_path / "deep" / "folder"
    write_json(folder / "a.json", [1])
    assert events == [
        ("fsync-file", (folder / "a.json").stat().st_ino),
        ("replace", "a.json"),
        ("fsync-dir", folder.stat().st_ino),
    ]


@pytest.fixture
def indexed(indexed_workspace):
    return indexed_workspace[0]


@pytest.mark.integration  # the CLI encodes twice: seconds
def test_temporaries_of_a_killed_encode_are_removed_by_the_next_encode(workspace, tmp_path, tiny_model_dir):
    """A shard that no longer exists is never written again, so its temporary would stay forever."""
    work, _ = workspace
    emb = work / "emb" / "de"
    leftovers = [emb / ".shard-00099.npy.tmp-4242", emb / ".shard-00000.json.tmp-4242-0a1b2c3d4e5f"]
    for path in leftovers:
        path.write_bytes(b"half a shard")
    (work / "emb" / "en" / ".shard-00099.npy.tmp-4242").write_bytes(b"another language's")
    code, output = run(
        "encode", str(tmp_path / "de.txt"), "-l", "de", "-m", str(tiny_model_dir("bert")),
        "-w", str(work), "--shard-size", "7",
    )  # fmt: skip
    assert code == 0, output
    assert not any(path.exists() for path in leftovers)
    assert (work / "emb" / "en" / ".shard-00099.npy.tmp-4242").exists()  # en's step was not run


@pytest.mark.integration
def test_a_killed_sharded_index_build_leaves_no_temporary_after_the_next_index(indexed):
    work = indexed
    env = {**os.environ, FAULT_ENV: "before-rename@2"}  # the template is saved, the first shard is not
    ivf = ["--factory", "IVF1,Flat"]  # a FAISS index: exact ones write no file
    command = [
        sys.executable,
        "-m",
        "bitextmine",
        "index",
        "de",
        "--max-memory",
        "0.000002",
        *ivf,
        "-w",
        str(work),
    ]
    killed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr
    index_dir = work / "index"
    left = sorted(p.name for p in index_dir.glob(".de.*.tmp-*"))
    assert len(left) == 1 and ".000.faiss.tmp-" in left[0]
    (index_dir / ".en.faiss.tmp-1-abc").write_bytes(b"en's")  # another language's: not de's to remove
    code, output = run(
        "index", "de", "-w", str(work), *ivf
    )  # another plan: that shard is never written again
    assert code == 0, output
    assert sorted(p.name for p in index_dir.iterdir() if p.name.startswith(".")) == [".en.faiss.tmp-1-abc"]
    assert sorted(p.name for p in index_dir.iterdir() if not p.name.startswith(".")) == [
        "de.faiss", "de.json", "en.json",
    ]  # fmt: skip
    shutil.rmtree(work)
