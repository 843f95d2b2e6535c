"""Workspace locks: a second writer is refused at once with the holder named; readers share; a killed
holder leaves no stale lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from bitextmine.errors import BitextmineError
from bitextmine.workspace.layout import Workspace
from bitextmine.workspace.locks import workspace_locks
from tests.helpers import run

pytestmark = pytest.mark.integration  # the CLI end to end (docs: make test-fast leaves these out)


def test_second_writer_and_readers_are_refused_while_a_writer_holds_the_lock(workspace):
    work, _ = workspace
    with workspace_locks(Workspace(work), write=["lang-de"]):
        code, output = run("encode", os.devnull, "-l", "de", "-m", "unused", "-w", str(work))
        message = " ".join(output.split())
        assert code == 1 and "lang-de.lock: in use by pid" in message and str(os.getpid()) in message
        assert "Traceback" not in output
        code, output = run("index", "de", "-w", str(work))
        assert code == 1 and "cannot read this part of the workspace" in " ".join(output.split())
        code, output = run("index", "en", "-w", str(work), "--queries-from", "self")
        assert code == 0, output  # another language is not locked


def test_readers_share_and_a_reader_blocks_a_writer(tmp_path):
    with (
        workspace_locks(Workspace(tmp_path), write=[], read=["index-de"]),
        workspace_locks(Workspace(tmp_path), write=[], read=["index-de"]),
        pytest.raises(BitextmineError, match="in use by a run that reads it; cannot write"),
        workspace_locks(Workspace(tmp_path), write=["index-de"]),
    ):
        pass
    with workspace_locks(Workspace(tmp_path), write=["index-de"]):
        pass


def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path\n"
            "from bitextmine.workspace.layout import Workspace\n"
            "from bitextmine.workspace.locks import workspace_locks\n"
            "with workspace_locks(Workspace(Path(sys.argv[1])), write=['mine-de-en']):\n"
            "    print('held', flush=True); time.sleep(60)",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    with (
        pytest.raises(BitextmineError, match=rf"pid {holder.pid}, since .*: bitextmine"),
        workspace_locks(Workspace(tmp_path), write=["mine-de-en"]),
    ):
        pass
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    with workspace_locks(Workspace(tmp_path), write=["mine-de-en"]):
        pass
