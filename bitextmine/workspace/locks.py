"""Advisory locks that keep two runs from writing the same part of a workspace.

A step holds an exclusive lock on what it writes (`encode de` on language de's text and embeddings,
`index de` on de's index, `mine de en` on that pair's output) and a shared lock on what it reads, so
`make -j` can run independent steps side by side while a second `encode de` is refused at once with
the holder's pid and command. The locks are `flock`s on files under WORK/locks: the kernel drops
them when the holder exits, killed or not, so a crash never leaves a stale lock behind. `train` holds
one the same way on its OUT folder, `calibrate` one beside its threshold store: every lock file of the
tool is opened here (`file_lock`), never through a symlink.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from bitextmine.errors import BitextmineError
from bitextmine.files import WriteError, refuse_linked_folders
from bitextmine.workspace.layout import Workspace

# a lock file is opened where it is: a symlink planted at its name is refused, never followed
_OPEN_LOCK = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


@contextmanager
def workspace_locks(workspace: Workspace, *, write: list[str], read: list[str] = ()) -> Iterator[None]:
    """Hold exclusive locks named `write` and shared locks named `read` (e.g. "lang-de") in WORK/locks,
    once no folder of the workspace is a symlink (what a step writes would land outside it)."""
    refuse_linked_folders(workspace.root)
    lock_dir = workspace.locks_dir()
    lock_dir.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        for name in sorted(set(write)):
            stack.enter_context(file_lock(lock_dir / f"{name}.lock", exclusive=True))
        for name in sorted(set(read) - set(write)):
            stack.enter_context(file_lock(lock_dir / f"{name}.lock", exclusive=False))
        yield


@contextmanager
def file_lock(
    path: Path, *, exclusive: bool, what: str = "this part of the workspace", wait: bool = False
) -> Iterator[None]:
    """Hold an flock on `path` (created if missing), or fail at once: `PATH: in use by pid N, since
    TIME: COMMAND; cannot write WHAT until that run ends` (an exclusive holder notes its pid there).
    With `wait`, wait for the holder instead (for locks held for milliseconds)."""
    fd = _open_lock(path)
    try:
        try:
            mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
            fcntl.flock(fd, mode if wait else mode | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BitextmineError(_busy_message(path, exclusive, what)) from None
        if exclusive:
            _record_holder(fd, path)
        yield
    finally:
        os.close(fd)


def _open_lock(path: Path) -> int:
    """The lock file's descriptor; a symlink, FIFO or device at its name is a one-line error."""
    try:
        fd = os.open(path, _OPEN_LOCK, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _not_a_lock_file(path) from None
        raise WriteError(path, exc, "cannot open this lock file") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _not_a_lock_file(path)
    return fd


def _not_a_lock_file(path: Path) -> BitextmineError:
    return BitextmineError(
        f"{path}: not a regular file (a symlink, FIFO or device); a lock is never taken through one: "
        "remove it"
    )


def _record_holder(fd: int, path: Path) -> None:
    command = " ".join(["bitextmine", *sys.argv[1:]])[:300]
    note = f"pid {os.getpid()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}: {command}\n"
    note = note.encode(errors="surrogateescape")  # arguments that are not UTF-8 keep their own bytes
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, note, 0)
    except OSError as exc:  # a full disk: the error names no file
        raise WriteError(path, exc, "cannot record this run as the lock's holder") from exc


def _busy_message(path: Path, exclusive: bool, what: str) -> str:
    holder = _live_writer(path) or ("a run that reads it" if exclusive else "another run")
    action = "write" if exclusive else "read"
    return f"{path}: in use by {holder}; cannot {action} {what} until that run ends"


def _live_writer(path: Path) -> str | None:
    """The note left by the exclusive holder, if that process is still alive (readers leave none)."""
    note = path.read_text(encoding="utf-8", errors="replace").strip()
    if not note.startswith("pid "):
        return None
    try:
        os.kill(int(note.split()[1].rstrip(",")), 0)
    except PermissionError:  # alive, owned by another user
        return note
    except (ValueError, ProcessLookupError):
        return None
    return note
