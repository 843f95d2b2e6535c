"""Every file the tool writes: atomically (a temporary name in the same directory, then a rename), and,
for the paths a user gives (`--json`, `-o`), the rule of `output_target`."""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
import re
import secrets
import stat
import types
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from glob import escape
from pathlib import Path
from typing import IO, Any, Protocol, TypeVar, Union, get_args, get_origin, get_type_hints

from bitextmine.errors import BitextmineError, os_error_message
from bitextmine.faults import crash_point


class WorkspaceFiles(Protocol):
    """What the output-path rule needs of a workspace (workspace/layout.py's `Workspace`)."""

    root: Path

    def own_paths(self) -> Iterable[Path]: ...

    def input_files(self) -> Iterable[Path]: ...


# Temporaries are created exclusively: O_EXCL fails on anything already at the name, a planted symlink
# included (O_NOFOLLOW too, for systems where O_EXCL alone would follow one).
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_NAME_TRIES = 8
_log = logging.getLogger(__name__)


class WriteError(BitextmineError):
    """A file could not be written (disk full, no permission, ...); nothing partial was left behind."""

    def __init__(self, path: Path, exc: OSError, action: str = "cannot write") -> None:
        super().__init__(os_error_message(exc, path, action))


def save_array(fh: IO[bytes], array: Any) -> None:
    """`np.save(fh, array)` with every byte written through `fh.write`, whose failure (a full disk,
    `ulimit -f`) is an OSError with its errno. numpy writes a real file through a buffer of its own
    (`tofile`): its failure names no errno (`19200 requested and 10176 written`), and one at its last
    flush can pass unnoticed, leaving a cut file."""
    import numpy as np  # here: `import bitextmine` loads no numpy

    np.lib.format.write_array(_WriteOnly(fh), np.asanyarray(array), allow_pickle=False)


@dataclasses.dataclass(frozen=True)
class _WriteOnly:
    """A file that numpy does not recognise as one: it writes to it through `write`."""

    fh: IO[bytes]

    def write(self, data: bytes) -> int:
        return self.fh.write(data)


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


@dataclasses.dataclass(frozen=True)
class OutputTarget:
    """An output path checked by `output_target`: replaced atomically, or, `through`, opened and written
    as a stream, so that a FIFO, a device or a symlink stays what it is."""

    path: Path
    through: bool = False

    @contextmanager
    def open(self, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO[Any]]:
        if not self.through:
            with atomic_open(self.path, mode, encoding) as fh:
                yield fh
            return
        try:
            with open(
                self.path, mode, encoding=None if "b" in mode else encoding, opener=_open_existing
            ) as fh:
                yield fh
        except OSError as exc:
            if exc.filename is not None and os.fsdecode(exc.filename) != str(self.path):
                raise
            raise WriteError(self.path, exc) from exc


STDOUT_FILE = Path("/dev/stdout")  # what `-o -` names


def is_stream(path: Path) -> bool:
    """Whether `path` is a FIFO or character device, or stdout itself (the file descriptor 1 is, also
    when the shell redirected it to a regular file): written as a stream, nothing kept beside it."""
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
            return True
        return os.path.samestat(os.stat(path), os.fstat(1))
    except OSError:  # absent, or no descriptor 1
        return False


def _open_existing(path: str, flags: int) -> int:
    """Open for writing without creating anything: the target of a link must be there already."""
    return os.open(path, (flags & ~os.O_CREAT) | getattr(os, "O_CLOEXEC", 0))


def output_target(
    path: Path,
    *,
    inputs: Iterable[str | os.PathLike[str] | None] = (),
    workspace: WorkspaceFiles | None = None,
    own: Iterable[Path] = (),
) -> OutputTarget:
    """The one rule for a path a user names for output (`--json`, `-o`), checked before any work.

    A regular file or an absent path is replaced atomically; a symlink, FIFO or character device
    (`/dev/stdout`, `/dev/null`) is written through as a stream. Refused in one line: a folder, socket,
    block device or dangling link; the same file (by identity, through links) as one of `inputs` (what
    the command reads, and its other outputs; None for one not given) or of the files `workspace` was
    built from; inside `workspace`, a link, or anything in the folders and files it keeps for its own
    (corpora, embeddings, indexes, mined pairs, ...) other than `own`; a path whose folder is missing,
    unless it lies in `workspace`: folders elsewhere are not created unasked.
    """
    path = Path(path)
    through = _written_through(path)
    _refuse_inputs(path, inputs, "which this command reads or writes")
    if workspace is not None:
        _refuse_inputs(path, workspace.input_files(), f"which the workspace {workspace.root} was built from")
        _refuse_workspace_file(path, through, workspace, own)
    _refuse_missing_folder(path, workspace)
    return OutputTarget(path, through)


def _refuse_inputs(path: Path, inputs: Iterable[str | os.PathLike[str] | None], why: str) -> None:
    for given in inputs:
        if given is not None and _same_file(path, Path(given)):
            raise BitextmineError(f"{path}: the same file as {given}, {why}; give another path")


_NOT_WRITABLE = {stat.S_IFDIR: "a folder", stat.S_IFSOCK: "a socket", stat.S_IFBLK: "a block device"}


def _written_through(path: Path) -> bool:
    """Whether `path` is written through (a link, FIFO, character device) rather than replaced."""
    try:
        linked = path.is_symlink()
        mode = path.stat().st_mode
    except FileNotFoundError:
        if path.is_symlink():
            raise BitextmineError(
                f"{path}: a link to a missing file; nothing is created through one"
            ) from None
        return False
    except OSError as exc:
        raise WriteError(path, exc) from exc
    if stat.S_ISREG(mode):
        return linked
    if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
        return True
    kind = _NOT_WRITABLE.get(stat.S_IFMT(mode), "not a regular file")
    raise BitextmineError(f"{path}: is {kind}; give a file (or a FIFO or character device) to write to")


def _same_file(output: Path, given: Path) -> bool:
    """Whether writing `output` would overwrite the regular file `given` (through links, by identity),
    or, where `output` is absent, whether both name one path."""
    try:
        out_stat = output.stat()
    except OSError:
        return os.path.realpath(output) == os.path.realpath(given)
    try:
        given_stat = given.stat()
    except OSError:
        return False
    same = (out_stat.st_dev, out_stat.st_ino) == (given_stat.st_dev, given_stat.st_ino)
    return same and stat.S_ISREG(out_stat.st_mode)


def _refuse_workspace_file(path: Path, through: bool, workspace: WorkspaceFiles, own: Iterable[Path]) -> None:
    if through and _lexically_inside(path, workspace.root):  # a link planted there is never followed
        raise BitextmineError(
            f"{path}: a link or device inside the workspace; its files are never written through one"
        )
    real = Path(os.path.realpath(path))
    if real in {Path(os.path.realpath(p)) for p in own}:
        return
    for kept in workspace.own_paths():
        if real.is_relative_to(os.path.realpath(kept)):
            raise BitextmineError(
                f"{path}: in {kept}, which the workspace keeps for its own files; give another path"
            )


def _refuse_missing_folder(path: Path, workspace: WorkspaceFiles | None) -> None:
    folder = path.parent
    if folder.is_dir():
        return
    if folder.exists():
        raise BitextmineError(f"{path}: {folder} is not a folder")
    inside = workspace is not None and (
        _lexically_inside(path, workspace.root)
        or Path(os.path.realpath(path)).is_relative_to(os.path.realpath(workspace.root))
    )
    if not inside:
        raise BitextmineError(
            f"{path}: no folder {folder}; create it first (folders outside the workspace are not created)"
        )


def _lexically_inside(path: Path, root: Path) -> bool:
    return Path(os.path.abspath(path)).is_relative_to(os.path.abspath(root))


def refuse_linked_folders(root: Path) -> None:
    """Refuse, in one line, a symlink to a folder anywhere inside the folder `root` (itself may be one):
    what is written there would land outside it."""
    for folder, subfolders, _ in os.walk(root):
        for name in subfolders:
            link = os.path.join(folder, name)
            if os.path.islink(link):
                raise BitextmineError(
                    f"{link}: a symlink inside {root} to the folder {os.path.realpath(link)}; nothing is "
                    "written through one: replace it with a real folder"
                )


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
