"""Atomic file output: write to a temporary name in the same directory, then rename."""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
import re
import secrets
import types
from collections.abc import Iterator
from contextlib import contextmanager
from glob import escape
from pathlib import Path
from typing import IO, Any, TypeVar, Union, get_args, get_origin, get_type_hints

from bitextmine.errors import BitextmineError, os_error_message
from bitextmine.faults import crash_point

# Temporaries are created exclusively: O_EXCL fails on anything already at the name, a planted symlink
# included (O_NOFOLLOW too, for systems where O_EXCL alone would follow one).
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_NAME_TRIES = 8
_log = logging.getLogger(__name__)


class WriteError(BitextmineError):
    """A file could not be written (disk full, no permission, ...); nothing partial was left behind."""

    def __init__(self, path: Path, exc: OSError, action: str = "cannot write") -> None:
        super().__init__(os_error_message(exc, path, action))


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a new, empty temporary file next to `path`; on success fsync it, rename it over `path` and
    fsync the folder, so that the rename itself survives a power cut.

    The temporary (``.NAME.tmp-PID-RANDOM``) has an unguessable name and is created exclusively, so a
    file or symlink planted in a shared folder is never written through. A crash leaves either the old
    file or nothing at `path`, never a partial file; leftover temporaries of the same name are removed
    by the next successful write of it, the others by `remove_temporaries`. An OSError naming no file
    or the temporary (a failed write, a full disk) becomes a `WriteError` naming `path`, after the
    temporary is removed.
    """
    with _temporary(path) as (tmp, _):
        yield tmp


@contextmanager
def atomic_open(path: Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO[Any]]:
    """Open a temporary file for writing that replaces `path` atomically when the block succeeds."""
    with _temporary(path) as (tmp, fd):
        if "b" in mode:
            encoding = None
        # the file object writes to the descriptor that created the file: the name is not opened again
        with open(tmp, mode, encoding=encoding, opener=lambda _path, _flags: os.dup(fd)) as fh:
            yield fh


@contextmanager
def _temporary(path: Path) -> Iterator[tuple[Path, int]]:
    """(temporary path, its descriptor) for `atomic_path` and `atomic_open`."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WriteError(path, exc, "cannot create its folder") from exc
    try:
        tmp, fd = _create_temporary(path)
    except OSError as exc:
        raise WriteError(path, exc) from exc
    try:
        yield tmp, fd
        os.fsync(fd)
        crash_point("before-rename")
        os.replace(tmp, path)
        _fsync_folder(path.parent)
        crash_point("after-rename")
        _log.debug("wrote %s", path)
    except OSError as exc:
        if exc.filename is not None and os.fsdecode(exc.filename) != str(tmp):
            raise
        raise WriteError(path, exc) from exc
    finally:
        os.close(fd)
        tmp.unlink(missing_ok=True)
    remove_temporaries(path.parent, escape(path.name))


def _create_temporary(path: Path) -> tuple[Path, int]:
    for _ in range(_NAME_TRIES):
        tmp = path.with_name(_temporary_name(path.name))
        try:
            return tmp, os.open(tmp, _CREATE, 0o666)
        except FileExistsError:
            continue  # taken (or planted): draw another name
    raise FileExistsError(errno.EEXIST, f"{_NAME_TRIES} temporary names next to it were taken", str(path))


def _temporary_name(name: str) -> str:
    return f".{name}.tmp-{os.getpid()}-{secrets.token_hex(6)}"


def _fsync_folder(folder: Path) -> None:
    """Make a rename in `folder` durable: fsync the folder itself (POSIX; a no-op where folders cannot
    be opened, as on Windows, or where the file system refuses to fsync one)."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def remove_temporaries(folder: Path, names: str = "*") -> None:
    """Delete the leftover temporaries of files matching the glob `names` in `folder`.

    Only for a writer that owns the folder at a moment when it has no write of its own under way (for
    a step: under its workspace lock, before or after its jobs), so that what is left belongs to runs
    that were killed.
    """
    for stale in Path(folder).glob(f".{names}.tmp-*"):
        stale.unlink(missing_ok=True)


def write_json(path: Path, data: Any) -> None:
    """Write `data` as indented JSON, atomically."""
    with atomic_open(path) as fh:
        fh.write(json_text(data, indent=2) + "\n")


def json_text(data: Any, encoding: str = "utf-8", **options: Any) -> str:
    """`json.dumps(data, **options)` that `encoding` can encode: characters it cannot (the surrogates that
    stand for the bytes of a path that is not UTF-8, anything beyond ASCII for an ASCII terminal) are
    written as JSON escapes, which read back as the same string."""
    text = json.dumps(data, ensure_ascii=False, **options)
    return _NON_ASCII.sub(lambda m: _escaped(m.group(), encoding), text)


_NON_ASCII = re.compile(r"[^\x00-\x7f]")


def _escaped(char: str, encoding: str) -> str:
    try:
        char.encode(encoding)
        return char
    except UnicodeEncodeError:
        return json.dumps(char)[1:-1]


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


Record = TypeVar("Record")


def json_record(cls: type[Record], data: Any) -> Record:
    """The dataclass `cls` made from a JSON object read back from disk, each field checked against its
    annotation (str, int, float, bool, None, list, dict, and unions of them), so that a hand-edited or
    damaged value is a TypeError here rather than a traceback far away. A missing field is a TypeError
    too (unless it has a default)."""
    if not isinstance(data, dict):
        raise TypeError(f"expected an object, not {type(data).__name__}")
    hints = get_type_hints(cls)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in data and not _conforms(data[f.name], hints[f.name]):
            expected = getattr(hints[f.name], "__name__", hints[f.name])  # str, not <class 'str'>
            raise TypeError(f"{f.name!r} is {json.dumps(data[f.name])[:40]}, not {expected}")
    return cls(**data)


def _conforms(value: Any, hint: Any) -> bool:
    """Whether a JSON value fits a type annotation; nested dataclasses and other types are left to their
    own readers."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return any(_conforms(value, option) for option in get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool or hint is str:
        return isinstance(value, hint)
    if hint is int or hint is float:  # JSON has one number type; True is not a number
        return isinstance(value, (int, hint)) and not isinstance(value, bool)
    container = origin or hint
    if container is list:
        return isinstance(value, list) and all(_conforms(v, (get_args(hint) or [Any])[0]) for v in value)
    if container is dict:
        key, item = get_args(hint) or (Any, Any)
        return isinstance(value, dict) and all(
            _conforms(k, key) and _conforms(v, item) for k, v in value.items()
        )
    return True
