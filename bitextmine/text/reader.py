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
import sys
import warnings
import zlib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, fields
from typing import Any, BinaryIO, cast

import zstandard

from bitextmine.errors import BitextmineError, BitextmineWarning
from bitextmine.text.cleaning import CLEAN_TABLE, clean_line

STDIN = "-"
_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_XZ_MAGIC = b"\xfd7zXZ\x00"
_DISCARD_CHUNK = 1 << 20  # bytes read at a time while skipping the over-long part of a line
_DECOMPRESS_ERRORS = (EOFError, OSError, zlib.error, lzma.LZMAError, zstandard.ZstdError)


class CorpusError(BitextmineError):
    """Bad text input; the message names the file and, when it applies, ``path:LINE:``."""


Warn = Callable[[str], None]


def warn_user(message: str) -> None:
    """The default warning sink: a BitextmineWarning (the CLI prints it on one line)."""
    warnings.warn(message, BitextmineWarning, stacklevel=3)


@dataclass(slots=True)
class Row:
    source: int
    line: int
    text: str


@dataclass
class CorpusCounts:
    lines: int = 0
    empty: int = 0
    duplicates: int = 0
    invalid_utf8: int = 0
    too_long: int = 0
    kept: int = 0

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


def _open(path: str) -> tuple[BinaryIO, str]:
    """Return the decompressed stream and the compression kind: ``"plain"``, ``"gzip"`` or ``"zstd"``."""
    if path == STDIN:
        return _open_stream(sys.stdin.buffer, close=False)
    try:
        fh = open(path, "rb")  # noqa: SIM115 - owned and closed by the returned stream
    except FileNotFoundError:
        raise CorpusError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise CorpusError(f"{path}: is a directory, not a corpus file") from None
    except PermissionError:
        raise CorpusError(f"{path}: permission denied") from None
    except OSError as e:
        raise CorpusError(f"{path}: cannot open: {e.strerror or e}") from None
    try:
        return _open_stream(fh, close=True)
    except BaseException:
        fh.close()
        raise


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
    kept: int = 0

    def warn_all(self, name: str, lines: int, max_chars: int, warn: Warn) -> None:
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
    path: str, source: int, counts: CorpusCounts, *, max_chars: int = 10_000, warn: Warn = warn_user
) -> Iterator[Row]:
    """Yield the cleaned, non-empty lines of one corpus file with their original line numbers.

    A line is cleaned, then cut to `max_chars` characters. Memory stays bounded whatever the line length:
    at most ``4 * max_chars + 8`` bytes are read at once, and a longer line is handled in bounded pieces.
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
                long = None
                if len(raw) == limit and not raw.endswith(b"\n"):
                    long = _read_long_line(readline, raw, max_chars)
            except _DECOMPRESS_ERRORS as e:
                raise _read_error(name, kind, lineno, e) from e
            if not raw:
                break
            lineno += 1
            counts.lines += 1
            if long is None:
                decoded, invalid = _decode(raw, name, lineno)
                text = clean_line(decoded)
                if invalid:
                    _note_invalid(lineno, counts, issues)
            else:
                text, invalid, nul = long
                if nul:
                    raise _nul_error(name, lineno)
                if invalid:
                    _note_invalid(lineno, counts, issues)
            if not text:
                counts.empty += 1
                continue
            if len(text) > max_chars:
                text = _cut(text, max_chars, lineno, counts, issues)
            counts.kept += 1
            issues.kept += 1
            yield Row(source, lineno, text)
    finally:
        if path != STDIN:
            fh.close()
    issues.warn_all(name, lineno, max_chars, warn)


_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")
_SPACE_RUN = re.compile(r"\s+")


def _read_long_line(readline: Callable[[int], bytes], head: bytes, max_chars: int) -> tuple[str, bool, bool]:
    """Clean a line longer than the byte limit; `head` is its start, the rest is read here in chunks.

    Chunks are decoded and their whitespace collapsed only until more than `max_chars` characters are kept;
    after that they are only scanned for the line end and NUL bytes. Return the cleaned text (longer than
    `max_chars` if the line is), whether invalid UTF-8 was replaced, and whether a NUL byte was seen.
    """
    decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")
    kept, invalid, nul = "", False, False
    chunk = head
    while True:
        nul = nul or b"\0" in chunk
        done = not chunk or chunk.endswith(b"\n")
        if len(kept.strip()) <= max_chars:
            # surrogateescape shows where bytes were invalid; each one becomes a U+FFFD.
            piece = decoder.decode(chunk, final=done)
            if _ESCAPED_BYTE.search(piece):
                invalid = True
                piece = _ESCAPED_BYTE.sub("\ufffd", piece)
            kept = _SPACE_RUN.sub(" ", (kept + piece).translate(CLEAN_TABLE))
        if done:
            return clean_line(kept), invalid, nul
        chunk = readline(_DISCARD_CHUNK)


def read_lines(path: str | os.PathLike[str], warn: Warn = warn_user) -> Iterator[tuple[int, str]]:
    """(1-based line number, text) of every line of a file or stdin ("-"), without its LF or CRLF and
    otherwise as it is (tabs kept, nothing cleaned), under the module's NUL and UTF-8 policy."""
    name = display_name(str(path))
    fh, kind = _open(str(path))
    invalid, first_invalid, lineno = 0, 0, 0
    try:
        while True:
            try:
                raw = fh.readline()
            except _DECOMPRESS_ERRORS as e:
                raise _read_error(name, kind, lineno, e) from e
            if not raw:
                break
            lineno += 1
            text, replaced = _decode(raw, name, lineno)
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


def _decode(raw: bytes, name: str, lineno: int) -> tuple[str, bool]:
    """The line's text and whether invalid UTF-8 in it was replaced; a NUL byte is an error."""
    if b"\0" in raw:
        raise _nul_error(name, lineno)
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
