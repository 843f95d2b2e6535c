"""Atomic file output: write to a temporary name in the same directory, then rename."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from bitextmine.errors import BitextmineError, os_error_message
from bitextmine.faults import crash_point


class WriteError(BitextmineError):
    """A file could not be written (disk full, no permission, ...); nothing partial was left behind."""

    def __init__(self, path: Path, exc: OSError, action: str = "cannot write") -> None:
        super().__init__(os_error_message(exc, path, action))


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path next to `path`; on success fsync it and rename it over `path`.

    A crash leaves either the old file or nothing at `path`, never a partial file; the leftover
    temporary (``.NAME.tmp-PID``) is removed by the next successful write of the same name.
    An OSError naming no file or the temporary (a failed write, a full disk) becomes a `WriteError`
    naming `path`, after the temporary is removed.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WriteError(path, exc, "cannot create its folder") from exc
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        crash_point("before-rename")
        os.replace(tmp, path)
        crash_point("after-rename")
    except OSError as exc:
        if exc.filename is not None and os.fsdecode(exc.filename) != str(tmp):
            raise
        raise WriteError(path, exc) from exc
    finally:
        tmp.unlink(missing_ok=True)
    for stale in path.parent.glob(f".{path.name}.tmp-*"):
        stale.unlink(missing_ok=True)


@contextmanager
def atomic_open(path: Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO[Any]]:
    """Open a temporary file for writing that replaces `path` atomically when the block succeeds."""
    with atomic_path(path) as tmp:
        if "b" in mode:
            encoding = None
        with open(tmp, mode, encoding=encoding) as fh:
            yield fh


def write_json(path: Path, data: Any) -> None:
    """Write `data` as indented JSON, atomically."""
    with atomic_open(path) as fh:
        json.dump(data, fh, indent=2, ensure_ascii=False)
        fh.write("\n")


def read_json(path: Path, remedy: str = "") -> Any:
    """The JSON in `path`; a file that is not JSON (truncated, hand-edited) is a one-line error naming
    it, ending with `remedy` (what to do about it) when given."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except json.JSONDecodeError as exc:
        problem = f"{path}:{exc.lineno}: invalid JSON ({exc.msg})"
    except UnicodeDecodeError:
        problem = f"{path}: invalid JSON (not UTF-8)"
    raise BitextmineError(f"{problem}; {remedy}" if remedy else problem)
