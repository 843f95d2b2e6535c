"""The one line reader: plain, gzip, zstd or xz input (by magic bytes), one NUL and UTF-8 policy.

Every file bitextmine reads line by line goes through here: corpora (`iter_rows`: cleaned, cut to a
length, in bounded memory whatever the line length) and everything else (`read_lines`: the lines as
they are, tabs included: BUCC files, Tatoeba and FLORES, training pairs, mined files). The policy is the
same for both: a NUL byte is an error naming the file and line (binary data is not text); invalid
UTF-8 is replaced by U+FFFD and reported once a file is read, with its first line and count; corrupt
or truncated compressed data is an error naming the file and the last whole line.
"""

from __future__ import annotations

import codecs
import gzip
import io
import lzma
import os
import re
import stat
import sys
import zlib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, fields
from typing import Any, BinaryIO, NamedTuple, cast

import zstandard

from bitextmine.errors import BitextmineError, Warn, warn_user
from bitextmine.text.cleaning import CLEAN_TABLE, clean_line

STDIN = "-"
_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_XZ_MAGIC = b"\xfd7zXZ\x00"
_DISCARD_CHUNK = 1 << 20  # bytes read at a time while skipping the over-long part of a line
MAX_LINE_BYTES = 1 << 26  # a line of a file read whole lines at a time (`read_lines`): 64 MiB
_DECOMPRESS_ERRORS = (EOFError, OSError, zlib.error, lzma.LZMAError, zstandard.ZstdError)


class CorpusError(BitextmineError):
    """Bad text input; the message names the file and, when it applies, ``path:LINE:``."""


@dataclass(slots=True)
class Row:
    source: int
    line: int
    text: str
    meta: str | None = None  # the --meta-column field of a TSV input, carried through untouched


@dataclass(frozen=True)
class Columns:
    """The TAB-separated columns (1-based) of an input line that hold the sentence and, if set, metadata."""

    text: int
    meta: int | None = None

    def __post_init__(self) -> None:
        if self.text < 1 or (self.meta is not None and self.meta < 1):
            raise BitextmineError(f"column numbers start at 1, not {min(self.text, self.meta or 1)}")
        if self.meta == self.text:
            raise BitextmineError(f"the meta column and the text column are both column {self.text}")

    @property
    def needed(self) -> int:
        return max(self.text, self.meta or 0)


@dataclass
class CorpusCounts:
    lines: int = 0
    empty: int = 0
    duplicates: int = 0
    invalid_utf8: int = 0
    too_long: int = 0
    kept: int = 0
    missing_columns: int = 0  # lines with fewer TAB-separated columns than asked for
    wrong_language: int = 0  # lines that language identification finds in another language

    def add(self, other: CorpusCounts) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def display_name(path: str) -> str:
    return "<stdin>" if path == STDIN else str(path)


def open_binary(path: str) -> BinaryIO:
    """Open a corpus for binary reading, decompressing gzip, zstd or xz (detected by magic bytes).

    Corrupt or truncated compressed data raises a CorpusError naming the file and the last whole line.
    """
    fh, kind = _open(path)
    if kind == "plain":
        return fh
    return cast(BinaryIO, io.BufferedReader(_CheckedStream(fh, display_name(path), kind)))


def check_readable(path: str) -> None:
    """The one-line error `open_binary` would give for a missing file or a folder, before any expensive
    work, without opening it (a pipe opened and closed here would lose what its writer sent)."""
    if path == STDIN:
        return
    try:
        is_dir = stat.S_ISDIR(os.stat(path).st_mode)
    except OSError as exc:
        raise _open_error(path, exc) from None
    if is_dir:
        raise _open_error(path, IsADirectoryError())


def _open(path: str) -> tuple[BinaryIO, str]:
    """Return the decompressed stream and the compression kind: ``"plain"``, ``"gzip"`` or ``"zstd"``."""
    if path == STDIN:
        return _open_stream(sys.stdin.buffer, close=False)
    try:
        fh = open(path, "rb")  # noqa: SIM115 - owned and closed by the returned stream
    except OSError as exc:
        raise _open_error(path, exc) from None
    try:
        return _open_stream(fh, close=True)
    except BaseException:
        fh.close()
        raise


def _open_error(path: str, exc: OSError) -> CorpusError:
    if isinstance(exc, FileNotFoundError):
        return CorpusError(f"{path}: no such file")
    if isinstance(exc, IsADirectoryError):
        return CorpusError(f"{path}: is a directory, not a corpus file")
    if isinstance(exc, PermissionError):
        return CorpusError(f"{path}: permission denied")
    return CorpusError(f"{path}: cannot open: {exc.strerror or exc}")


def _open_stream(fh: Any, *, close: bool) -> tuple[BinaryIO, str]:
    if not hasattr(fh, "peek"):
        fh = io.BufferedReader(fh)
    magic = fh.peek(6)[:6]
    if magic.startswith(_GZIP_MAGIC):
        # GzipFile never closes a fileobj it was given; hand it over through myfileobj when we own it.
        gz = gzip.GzipFile(fileobj=fh, mode="rb")
        if close:
            gz.myfileobj = fh
        return cast(BinaryIO, gz), "gzip"
    if magic.startswith(_ZSTD_MAGIC):
        return cast(BinaryIO, io.BufferedReader(_ZstdRaw(fh, close=close), buffer_size=1 << 18)), "zstd"
    if magic == _XZ_MAGIC or (len(magic) >= 4 and _XZ_MAGIC.startswith(magic)):  # the latter: truncated
        xz = lzma.LZMAFile(fh)  # noqa: SIM115 - returned open, closed by the caller
        xz._closefp = close  # as for gzip: LZMAFile closes a file object it was given only when told to
        return cast(BinaryIO, xz), "xz"
    return fh, "plain"


# Not zstandard's stream_reader alone: it ends a truncated frame with a clean EOF (zstandard 0.25).
class _ZstdFrameTracker:
    """Follows the zstd frame layout (RFC 8878) without decompressing, to tell where frames end.

    ``zstandard``'s stream reader returns a clean EOF on a truncated frame; this tracker lets the reader
    notice that the input stopped in the middle of a frame.
    """

    def __init__(self) -> None:
        self._buf = b""
        self._want = 4  # bytes of the next header to collect
        self._step = self._magic
        self._skip = 0  # block content, checksum or skippable-frame bytes to pass over
        self._checksum = False

    @property
    def at_frame_boundary(self) -> bool:
        return self._step == self._magic and not self._buf and not self._skip

    def feed(self, data: bytes) -> None:
        pos, n = 0, len(data)
        while pos < n:
            if self._skip:
                take = min(self._skip, n - pos)
                self._skip -= take
                pos += take
                continue
            take = min(self._want - len(self._buf), n - pos)
            self._buf += data[pos : pos + take]
            pos += take
            if len(self._buf) == self._want:
                header, self._buf = self._buf, b""
                self._step(header)

    def _expect(self, size: int, step: Callable[[bytes], None]) -> None:
        self._want, self._step = size, step
        if size == 0:
            step(b"")

    def _magic(self, header: bytes) -> None:
        value = int.from_bytes(header, "little")
        if header == _ZSTD_MAGIC:
            self._expect(1, self._descriptor)
        elif value & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame
            self._expect(4, self._skippable_size)
        else:
            raise zstandard.ZstdError("unknown frame magic")

    def _skippable_size(self, header: bytes) -> None:
        self._skip = int.from_bytes(header, "little")
        self._expect(4, self._magic)

    def _descriptor(self, header: bytes) -> None:
        d = header[0]
        single_segment = bool(d & 0x20)
        self._checksum = bool(d & 0x04)
        fcs = (1 if single_segment else 0, 2, 4, 8)[d >> 6]
        did = (0, 1, 2, 4)[d & 0x03]
        self._expect((0 if single_segment else 1) + did + fcs, self._frame_header_rest)

    def _frame_header_rest(self, header: bytes) -> None:
        self._expect(3, self._block_header)

    def _block_header(self, header: bytes) -> None:
        value = int.from_bytes(header, "little")
        last, block_type, size = value & 1, (value >> 1) & 3, value >> 3
        self._skip = 1 if block_type == 1 else size  # an RLE block stores one byte
        if not last:
            self._expect(3, self._block_header)
        else:
            self._skip += 4 if self._checksum else 0
            self._expect(4, self._magic)


class _Tee:
    """File-like source for the zstd reader that shows every byte read to a frame tracker."""

    def __init__(self, fh: Any, tracker: _ZstdFrameTracker, close: bool) -> None:
        self._fh, self._tracker, self._close = fh, tracker, close

    def read(self, size: int = -1) -> bytes:
        data = self._fh.read(size)
        self._tracker.feed(data)
        return data

    def close(self) -> None:
        if self._close:
            self._fh.close()


class _ZstdRaw(io.RawIOBase):
    """Raw stream over all concatenated zstd frames; raises EOFError when the input ends mid-frame."""

    def __init__(self, fh: Any, *, close: bool) -> None:
        super().__init__()
        self._tracker = _ZstdFrameTracker()
        self._source = _Tee(fh, self._tracker, close)
        self._reader = zstandard.ZstdDecompressor().stream_reader(
            self._source, read_across_frames=True, closefd=close
        )

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = self._reader.readinto(buffer)
        if n == 0 and len(buffer) and not self._tracker.at_frame_boundary:
            raise EOFError("zstd input ended in the middle of a frame")
        return n

    def close(self) -> None:
        if not self.closed:
            self._reader.close()  # closes the source too when we own it (closefd)
        super().close()


class _CheckedStream(io.RawIOBase):
    """A decompressed stream whose decompression errors become CorpusErrors naming the file and line."""

    def __init__(self, fh: BinaryIO, name: str, kind: str) -> None:
        super().__init__()
        self._fh, self._name, self._kind = fh, name, kind
        self._lines = 0  # complete lines delivered so far

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            n = self._fh.readinto(buffer)
        except _DECOMPRESS_ERRORS as e:
            raise _read_error(self._name, self._kind, self._lines, e) from e
        self._lines += memoryview(buffer)[:n].tobytes().count(b"\n")
        return n

    def close(self) -> None:
        if not self.closed:
            self._fh.close()
        super().close()


@dataclass
class _FileIssues:
    """Per-file tallies behind the warnings given once at the end of a file."""

    first_long: int = 0
    long: int = 0
    first_invalid: int = 0
    invalid: int = 0
    first_missing: int = 0
    missing: int = 0
    kept: int = 0

    def warn_all(self, name: str, lines: int, max_chars: int, columns: Columns | None, warn: Warn) -> None:
        if self.missing and columns is not None:
            if not self.kept:
                raise CorpusError(
                    f"{name}: no line has the {columns.needed} TAB-separated columns asked for "
                    f"(line {self.first_missing} has fewer)"
                )
            warn(
                f"{name}:{self.first_missing}: fewer than {columns.needed} TAB-separated columns, skipped "
                f"({self.missing} lines in this file)"
            )
        if self.invalid:
            warn(_invalid_message(name, self.first_invalid, self.invalid))
        if self.long:
            warn(
                f"{name}:{self.first_long}: line longer than {max_chars} characters, cut "
                f"({self.long} lines in this file)"
            )
        if not self.kept:
            detail = f" (all {lines} lines are blank)" if lines else ""
            warn(f"{name}: empty file, no sentences{detail}")


def iter_rows(
    path: str,
    source: int,
    counts: CorpusCounts,
    *,
    max_chars: int = 10_000,
    columns: Columns | None = None,
    warn: Warn = warn_user,
) -> Iterator[Row]:
    """Yield the cleaned, non-empty lines of one corpus file with their original line numbers.

    A line is cleaned, then cut to `max_chars` characters. Memory stays bounded whatever the line length:
    at most ``4 * max_chars + 8`` bytes are read at once, and a longer line is handled in bounded pieces.
    With `columns`, the sentence is one TAB-separated column of the line and `Row.meta` another, as it is
    (cut to `max_chars`); a line with fewer columns is counted and skipped, with one warning per file, and a
    file none of whose lines has them is an error.
    """
    if max_chars < 1:
        raise ValueError("max_chars must be at least 1")
    name = display_name(path)
    fh, kind = _open(path)
    issues = _FileIssues()
    # 4 bytes per character at most, plus room for CR LF: any line that can be kept whole is read at once.
    limit = max_chars * 4 + 8
    readline = fh.readline
    lineno = 0
    try:
        while True:
            try:
                raw = readline(limit)
                line = _read_line(readline, raw, limit, max_chars, columns) if raw else None
            except _DECOMPRESS_ERRORS as e:
                raise _read_error(name, kind, lineno, e) from e
            if line is None:
                break
            lineno += 1
            counts.lines += 1
            if line.nul:
                raise _nul_error(name, lineno)
            if line.invalid:
                _note_invalid(lineno, counts, issues)
            if line.text is None:
                counts.missing_columns += 1
                issues.missing += 1
                issues.first_missing = issues.first_missing or lineno
                continue
            text = line.text
            if not text:
                counts.empty += 1
                continue
            if len(text) > max_chars:
                text = _cut(text, max_chars, lineno, counts, issues)
            counts.kept += 1
            issues.kept += 1
            yield Row(source, lineno, text, line.meta)
    finally:
        if path != STDIN:
            fh.close()
    issues.warn_all(name, lineno, max_chars, columns, warn)


_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")
_SPACE_RUN = re.compile(r"\s+")


class _Line(NamedTuple):
    text: str | None  # the cleaned sentence; None when the line has fewer columns than asked for
    meta: str | None
    invalid: bool  # invalid UTF-8 was replaced
    nul: bool  # a NUL byte was seen


def _read_line(
    readline: Callable[[int], bytes], raw: bytes, limit: int, max_chars: int, columns: Columns | None
) -> _Line:
    """The line that starts with `raw`: all of it, unless `limit` bytes were read without reaching its end."""
    whole = len(raw) < limit or raw.endswith(b"\n")
    if whole and columns is None:  # the common case, at full speed
        text, invalid = _decode_bytes(raw)
        return _Line(clean_line(text), None, invalid, b"\0" in raw)
    if whole and not raw.strip():  # a blank line is empty, not short of columns
        return _Line("", None, False, False)
    return _read_pieces(readline, raw, columns, max_chars)


def _read_pieces(
    readline: Callable[[int], bytes], head: bytes, columns: Columns | None, max_chars: int
) -> _Line:
    """Read a line in chunks of bounded size (`head` is its start), splitting it into columns if asked.

    Only the sentence and meta columns are decoded, and only until they hold more than `max_chars`
    characters; the rest of the line is only scanned for its end, TABs and NUL bytes.
    """
    text, meta = _Field(max_chars, clean=True), _Field(max_chars, clean=False)
    column, chunk = 1, head
    while True:
        if b"\0" in chunk:  # at once: the rest of a binary "line" may never end (/dev/zero)
            return _Line(None, None, False, True)
        done = not chunk or chunk.endswith(b"\n")
        if columns is None:
            text.feed(chunk)
        else:
            for i, piece in enumerate(chunk.removesuffix(b"\n").removesuffix(b"\r").split(b"\t")):
                column += i > 0
                if column == columns.text:
                    text.feed(piece)
                elif column == columns.meta:
                    meta.feed(piece)
        if done:
            break
        chunk = readline(_DISCARD_CHUNK)
    sentence, meta_value = text.value(), meta.value()  # before `invalid`: the last bytes are decoded here
    invalid = text.invalid or meta.invalid
    if columns is not None and column < columns.needed:
        return _Line(None, None, invalid, False)
    return _Line(sentence, meta_value if columns is not None and columns.meta else None, invalid, False)


class _Field:
    """One field of a line, decoded from byte pieces (invalid UTF-8 becomes U+FFFD) and cleaned if asked,
    until it holds more than `max_chars` characters: later pieces are dropped."""

    def __init__(self, max_chars: int, *, clean: bool) -> None:
        # surrogateescape shows where bytes were invalid; each one becomes a U+FFFD.
        self._decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")
        self._max_chars, self._clean = max_chars, clean
        self._text, self.invalid = "", False

    def feed(self, data: bytes, final: bool = False) -> None:
        if len(self._text.strip()) > self._max_chars:
            return
        piece = self._decoder.decode(data, final=final)
        if _ESCAPED_BYTE.search(piece):
            self.invalid = True
            piece = _ESCAPED_BYTE.sub("\ufffd", piece)
        self._text += piece
        if self._clean:
            self._text = _SPACE_RUN.sub(" ", self._text.translate(CLEAN_TABLE))

    def value(self) -> str:
        """The cleaned text (longer than `max_chars` if the field is), or the raw one cut to `max_chars`."""
        self.feed(b"", final=True)
        return clean_line(self._text) if self._clean else self._text[: self._max_chars]


def read_lines(path: str | os.PathLike[str], warn: Warn = warn_user) -> Iterator[tuple[int, str]]:
    """(1-based line number, text) of every line of a file or stdin ("-"), without its LF or CRLF and
    otherwise as it is (tabs kept, nothing cleaned), under the module's NUL and UTF-8 policy."""
    name = display_name(str(path))
    fh, kind = _open(str(path))
    invalid, first_invalid, lineno = 0, 0, 0
    try:
        while True:
            try:
                raw = _whole_line(fh.readline, name, lineno + 1)
            except _DECOMPRESS_ERRORS as e:
                raise _read_error(name, kind, lineno, e) from e
            if not raw:
                break
            lineno += 1
            text, replaced = _decode_bytes(raw)
            if replaced:
                invalid, first_invalid = invalid + 1, first_invalid or lineno
            yield lineno, text.removesuffix("\n").removesuffix("\r")
    finally:
        if str(path) != STDIN:
            fh.close()
    if invalid:
        warn(_invalid_message(name, first_invalid, invalid))


def read_all_lines(path: str | os.PathLike[str], warn: Warn = warn_user) -> list[str]:
    """Every line of a file that must not be empty (evaluation sets, dictionaries), as `read_lines`."""
    lines = [text for _, text in read_lines(path, warn)]
    if not lines:
        raise CorpusError(f"{path}: empty file")
    return lines


def _whole_line(readline: Callable[[int], bytes], name: str, lineno: int) -> bytes:
    """The next line, read in pieces of bounded size: a NUL byte is an error as soon as it is read, and
    so is a line longer than MAX_LINE_BYTES (what `read_lines` reads is held a whole line at a time)."""
    pieces = [readline(_DISCARD_CHUNK)]
    while True:
        if b"\0" in pieces[-1]:
            raise _nul_error(name, lineno)
        if len(pieces[-1]) < _DISCARD_CHUNK or pieces[-1].endswith(b"\n"):
            return b"".join(pieces)
        if len(pieces) * _DISCARD_CHUNK >= MAX_LINE_BYTES:
            raise CorpusError(
                f"{name}:{lineno}: a line longer than {MAX_LINE_BYTES >> 20} MiB; not a text file"
            )
        pieces.append(readline(_DISCARD_CHUNK))


def _decode_bytes(raw: bytes) -> tuple[str, bool]:
    try:
        return raw.decode(), False
    except UnicodeDecodeError:
        return raw.decode(errors="replace"), True


def _invalid_message(name: str, first: int, count: int) -> str:
    return f"{name}:{first}: invalid UTF-8 replaced by U+FFFD ({count} lines in this file)"


def _nul_error(name: str, lineno: int) -> CorpusError:
    return CorpusError(f"{name}:{lineno}: binary data (NUL byte); not a text file")


def _note_invalid(lineno: int, counts: CorpusCounts, issues: _FileIssues) -> None:
    counts.invalid_utf8 += 1
    issues.invalid += 1
    issues.first_invalid = issues.first_invalid or lineno


def _cut(text: str, max_chars: int, lineno: int, counts: CorpusCounts, issues: _FileIssues) -> str:
    counts.too_long += 1
    issues.long += 1
    issues.first_long = issues.first_long or lineno
    return text[:max_chars].rstrip()


def _read_error(name: str, kind: str, lineno: int, error: BaseException) -> CorpusError:
    if kind == "plain":
        return CorpusError(f"{name}: read error after line {lineno}: {error}")
    return CorpusError(f"{name}: corrupt or truncated {kind} data after line {lineno}")
