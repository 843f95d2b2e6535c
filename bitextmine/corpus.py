"""Stream text corpora, clean lines, deduplicate, and write fixed-size text shards plus a manifest.

Everything here works in constant memory whatever the input size: files are read line by line with a
bounded ``readline``, compressed input is decompressed as a stream, and deduplication keeps 64-bit
hashes only (about 16 bytes per unique sentence).

A text shard ``shard-NNNNN.tsv`` holds one row per line, ``SOURCE<TAB>LINE<TAB>TEXT``: the index of the
input file, the 1-based line number in the original (decompressed) input, and the cleaned sentence.
"""

from __future__ import annotations

import codecs
import gzip
import hashlib
import io
import itertools
import os
import re
import stat
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, BinaryIO, cast

import numpy as np
import zstandard

from bitextmine.errors import BitextmineError
from bitextmine.fsutil import atomic_open, read_json, write_json

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = 1
STDIN = "-"

_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_DISCARD_CHUNK = 1 << 20  # bytes read at a time while skipping the over-long part of a line
_DECOMPRESS_ERRORS = (EOFError, OSError, zlib.error, zstandard.ZstdError)


class CorpusError(BitextmineError):
    """Bad corpus input; the message names the file and, when it applies, ``path:LINE:``."""


def _no_warn(message: str) -> None:
    """Default warning sink: stays silent (the CLI passes its own)."""


Warn = Callable[[str], None]


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


# ---------------------------------------------------------------------------------------------------
# Opening files


def display_name(path: str) -> str:
    return "<stdin>" if path == STDIN else str(path)


def open_binary(path: str) -> BinaryIO:
    """Open a corpus for binary reading, decompressing gzip or zstd (detected by magic bytes).

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
    magic = fh.peek(4)[:4]
    if magic.startswith(_GZIP_MAGIC):
        # GzipFile never closes a fileobj it was given; hand it over through myfileobj when we own it.
        gz = gzip.GzipFile(fileobj=fh, mode="rb")
        if close:
            gz.myfileobj = fh
        return cast(BinaryIO, gz), "gzip"
    if magic == _ZSTD_MAGIC:
        return cast(BinaryIO, io.BufferedReader(_ZstdRaw(fh, close=close), buffer_size=1 << 18)), "zstd"
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


# ---------------------------------------------------------------------------------------------------
# Cleaning and reading lines


def _clean_table() -> dict[int, str | None]:
    table: dict[int, str | None] = {c: " " for c in range(0x20)}  # C0 controls incl. TAB CR VT FF 1C-1E
    table[0x7F] = " "
    # C1 controls in real text are cp1252 bytes mis-decoded as Latin-1 (e.g. WMT German files):
    # restore the cp1252 character; the five bytes cp1252 leaves undefined (and U+0085) become spaces.
    for c in range(0x80, 0xA0):
        char = bytes([c]).decode("cp1252", errors="replace")
        table[c] = " " if char == "\ufffd" or c == 0x85 else char
    table.update({0x2028: " ", 0x2029: " "})
    table.update({0x200B: None, 0xFEFF: None, 0x00AD: None})
    return table


_CLEAN_TABLE = str.maketrans(_clean_table())


# Characters of the table that str.split() does not already treat as whitespace: a line without any of
# them (nearly every line) skips str.translate, which is slow on non-ASCII text.
_NEEDS_TRANSLATE = re.compile(
    "[" + "".join(re.escape(chr(c)) for c in sorted(_CLEAN_TABLE) if not chr(c).isspace()) + "]"
)


def clean_line(text: str) -> str:
    """Normalize one line: control characters to spaces, invisible characters removed, spaces collapsed."""
    if _NEEDS_TRANSLATE.search(text):
        text = text.translate(_CLEAN_TABLE)
    # str.split() with no argument splits on every Unicode space (NBSP, U+2000-U+200A, ...).
    return " ".join(text.split())


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
            warn(
                f"{name}:{self.first_invalid}: invalid UTF-8 replaced by U+FFFD "
                f"({self.invalid} lines in this file)"
            )
        if self.long:
            warn(
                f"{name}:{self.first_long}: line longer than {max_chars} characters, cut "
                f"({self.long} lines in this file)"
            )
        if not self.kept:
            detail = f" (all {lines} lines are blank)" if lines else ""
            warn(f"{name}: empty file, no sentences{detail}")


def iter_rows(
    path: str, source: int, counts: CorpusCounts, *, max_chars: int = 10_000, warn: Warn = _no_warn
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
                if b"\0" in raw:
                    raise _nul_error(name, lineno)
                try:
                    text = clean_line(raw.decode())
                except UnicodeDecodeError:
                    text = clean_line(raw.decode(errors="replace"))
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
            kept = _SPACE_RUN.sub(" ", (kept + piece).translate(_CLEAN_TABLE))
        if done:
            return clean_line(kept), invalid, nul
        chunk = readline(_DISCARD_CHUNK)


def _nul_error(name: str, lineno: int) -> CorpusError:
    return CorpusError(f"{name}:{lineno}: binary data (NUL byte); not a text corpus")


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


# ---------------------------------------------------------------------------------------------------
# Deduplication


class Deduplicator:
    """Exact set membership of sentences through 64-bit BLAKE2b hashes in an open-addressing table.

    Only hashes are stored (never the strings): a numpy uint64 table with linear probing that doubles
    when half full, so 16 to 32 bytes per unique sentence. 0 marks an empty slot; a hash equal to 0 is
    stored as 1. Two different sentences are taken as equal only on a 64-bit hash collision.
    """

    EMPTY = 0

    def __init__(self, capacity: int = 1 << 16) -> None:
        size = 1 << max(4, (max(capacity, 1) - 1).bit_length())
        self._set_table(np.zeros(size, dtype=np.uint64))
        self._count = 0

    def _set_table(self, table: np.ndarray) -> None:
        self._table = table
        self._slots = memoryview(table)  # indexing a memoryview gives Python ints, much faster than numpy
        self._mask = len(table) - 1

    @staticmethod
    def hash(text: str) -> int:
        return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")

    def seen(self, text: str) -> bool:
        """True if `text` was seen before; otherwise record it and return False."""
        return self.seen_hash(self.hash(text))

    def seen_hash(self, value: int) -> bool:
        """Like `seen`, for a precomputed 64-bit hash."""
        value = value or 1
        slots, mask = self._slots, self._mask
        i = value & mask
        while (current := slots[i]) != self.EMPTY:
            if current == value:
                return True
            i = (i + 1) & mask
        if (self._count + 1) * 2 > len(slots):
            self._grow()
            _insert_unique(self._table, np.array([value], dtype=np.uint64))
        else:
            slots[i] = value
        self._count += 1
        return False

    def _grow(self) -> None:
        old = self._table[self._table != self.EMPTY]
        table = np.zeros(len(self._table) * 2, dtype=np.uint64)
        _insert_unique(table, old)
        self._set_table(table)

    def __len__(self) -> int:
        return self._count

    @property
    def capacity(self) -> int:
        return len(self._table)

    @property
    def nbytes(self) -> int:
        return int(self._table.nbytes)


def _insert_unique(table: np.ndarray, values: np.ndarray) -> None:
    """Insert distinct non-zero values absent from `table`, with linear probing, vectorized."""
    mask = np.uint64(len(table) - 1)
    pos = values & mask
    while values.size:
        free = np.flatnonzero(table[pos] == 0)
        # Several values may aim at the same free slot: the first one takes it, the others probe on.
        _, first = np.unique(pos[free], return_index=True)
        winners = free[first]
        table[pos[winners]] = values[winners]
        rest = np.ones(values.size, dtype=bool)
        rest[winners] = False
        values = values[rest]
        pos = (pos[rest] + np.uint64(1)) & mask


def iter_corpus(
    paths: Sequence[str],
    counts: CorpusCounts,
    *,
    dedup: bool = False,
    max_chars: int = 10_000,
    warn: Warn = _no_warn,
) -> Iterator[Row]:
    """Chain the rows of all `paths` (source = position in `paths`), deduplicated across files if asked."""
    seen = Deduplicator() if dedup else None
    for source, path in enumerate(paths):
        for row in iter_rows(path, source, counts, max_chars=max_chars, warn=warn):
            if seen is not None and seen.seen(row.text):
                counts.duplicates += 1
                counts.kept -= 1  # iter_rows counted it; kept counts emitted rows only
                continue
            yield row


# ---------------------------------------------------------------------------------------------------
# Shards and manifest


@dataclass
class SourceInfo:
    path: str
    size: int | None
    mtime_ns: int | None

    @classmethod
    def of(cls, path: str) -> SourceInfo:
        if path == STDIN:
            return cls(STDIN, None, None)
        absolute = os.path.abspath(path)
        try:
            st = os.stat(absolute)
        except FileNotFoundError:
            raise CorpusError(f"{path}: no such file") from None
        except OSError as e:
            raise CorpusError(f"{path}: cannot access: {e.strerror or e}") from None
        if stat.S_ISDIR(st.st_mode):
            raise CorpusError(f"{path}: is a directory, not a corpus file")
        return cls(absolute, st.st_size, st.st_mtime_ns)


@dataclass
class TextShard:
    name: str
    first_row: int
    rows: int
    sha256: str


@dataclass
class CorpusManifest:
    lang: str
    sources: list[SourceInfo]
    shard_size: int
    dedup: bool
    max_chars: int
    shards: list[TextShard] = field(default_factory=list)
    counts: CorpusCounts = field(default_factory=CorpusCounts)
    complete: bool = False

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.shards)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": MANIFEST_FORMAT,
            "lang": self.lang,
            "sources": [asdict(s) for s in self.sources],
            "shard_size": self.shard_size,
            "dedup": self.dedup,
            "max_chars": self.max_chars,
            "rows": self.rows,
            "shards": [asdict(s) for s in self.shards],
            "counts": self.counts.as_dict(),
            "complete": self.complete,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CorpusManifest:
        return cls(
            lang=str(d["lang"]),
            sources=[SourceInfo(**s) for s in d["sources"]],
            shard_size=int(d["shard_size"]),
            dedup=bool(d["dedup"]),
            max_chars=int(d["max_chars"]),
            shards=[TextShard(**s) for s in d["shards"]],
            counts=CorpusCounts(**d["counts"]),
            complete=bool(d["complete"]),
        )

    def same_inputs(self, other: CorpusManifest) -> bool:
        """True if `other` was built from the same unchanged files with the same settings (never stdin)."""
        if any(s.path == STDIN for s in [*self.sources, *other.sources]):
            return False
        return (self.sources, self.shard_size, self.dedup, self.max_chars) == (
            other.sources,
            other.shard_size,
            other.dedup,
            other.max_chars,
        )


def shard_name(index: int) -> str:
    return f"shard-{index:05d}.tsv"


def write_text_shards(
    rows: Iterable[Row], out_dir: Path, shard_size: int, on_shard: Callable[[TextShard], None] | None = None
) -> list[TextShard]:
    """Write `rows` as shards of exactly `shard_size` rows (the last may be shorter), each atomically."""
    if shard_size < 1:
        raise ValueError("shard_size must be at least 1")
    out_dir = Path(out_dir)
    it = iter(rows)
    shards: list[TextShard] = []
    first_row = 0
    for index in itertools.count():
        head = next(it, None)
        if head is None:
            break
        chunk = itertools.chain([head], itertools.islice(it, shard_size - 1))
        shard = _write_shard(out_dir / shard_name(index), chunk, first_row)
        shards.append(shard)
        first_row += shard.rows
        if on_shard is not None:
            on_shard(shard)
    return shards


def _write_shard(path: Path, rows: Iterable[Row], first_row: int) -> TextShard:
    digest = hashlib.sha256()
    count = 0
    with atomic_open(path, "wb") as fh:
        it = iter(rows)
        while batch := list(itertools.islice(it, 1024)):
            data = "".join(f"{r.source}\t{r.line}\t{r.text}\n" for r in batch).encode()
            digest.update(data)
            fh.write(data)
            count += len(batch)
    return TextShard(path.name, first_row, count, digest.hexdigest())


def read_text_shard(path: Path) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Return the texts, sources (int32) and original line numbers (int64) of one text shard."""
    texts: list[str] = []
    sources: list[int] = []
    lines: list[int] = []
    data = Path(path).read_bytes().decode()
    for n, line in enumerate(data.split("\n")[:-1], start=1):
        try:
            source, lineno, text = line.split("\t", 2)
            sources.append(int(source))
            lines.append(int(lineno))
        except ValueError:
            raise CorpusError(f"{path}:{n}: malformed text shard line") from None
        texts.append(text)
    return texts, np.array(sources, dtype=np.int32), np.array(lines, dtype=np.int64)


def _remove_stale(out_dir: Path) -> None:
    (out_dir / MANIFEST_NAME).unlink(missing_ok=True)
    for pattern in ("shard-*.tsv", ".shard-*.tsv.tmp-*"):
        for stale in out_dir.glob(pattern):
            stale.unlink(missing_ok=True)


def build_corpus(
    paths: Sequence[str],
    lang: str,
    out_dir: Path,
    *,
    shard_size: int,
    dedup: bool,
    max_chars: int = 10_000,
    warn: Warn = _no_warn,
    on_shard: Callable[[TextShard], None] | None = None,
) -> CorpusManifest:
    """Read, clean (and dedup) `paths` into text shards in `out_dir`, then write its manifest.

    Any error (bad input, a failed write, an interrupt) leaves `out_dir` without shards or manifest.
    """
    if not paths:
        raise CorpusError("no input files")
    out_dir = Path(out_dir)
    sources = [SourceInfo.of(p) for p in paths]
    out_dir.mkdir(parents=True, exist_ok=True)
    _remove_stale(out_dir)
    counts = CorpusCounts()
    rows = iter_corpus(paths, counts, dedup=dedup, max_chars=max_chars, warn=warn)
    try:
        shards = write_text_shards(rows, out_dir, shard_size, on_shard)
        if not shards:
            names = ", ".join(display_name(p) for p in paths)
            raise CorpusError(f"no sentences in {names}: every line is empty")
        manifest = CorpusManifest(lang, sources, shard_size, dedup, max_chars, shards, counts, complete=True)
        write_json(out_dir / MANIFEST_NAME, manifest.to_json())
    except BaseException:
        _remove_stale(out_dir)  # bad input or a failed write leaves no shards of a half-read corpus
        raise
    return manifest


def load_manifest(out_dir: Path) -> CorpusManifest | None:
    """The manifest in `out_dir`, or None if there is none."""
    path = Path(out_dir) / MANIFEST_NAME
    if not path.exists():
        return None
    try:
        return CorpusManifest.from_json(read_json(path))
    except (ValueError, KeyError, TypeError) as e:
        raise CorpusError(f"{path}: corrupt corpus manifest ({e}); delete it to rebuild") from None


def lookup_rows(corpus_dir: Path, manifest: CorpusManifest, rows: np.ndarray) -> list[Row]:
    """The cleaned sentence and origin of each global row number, reading only the shards involved."""
    rows = np.asarray(rows, dtype=np.int64)
    starts = np.array([s.first_row for s in manifest.shards], dtype=np.int64)
    shard_of = np.searchsorted(starts, rows, side="right") - 1
    found: list[Row | None] = [None] * len(rows)
    for index in np.unique(shard_of):
        shard = manifest.shards[index]
        texts, sources, lines = read_text_shard(corpus_dir / shard.name)
        for position in np.flatnonzero(shard_of == index):
            offset = int(rows[position]) - shard.first_row
            found[position] = Row(int(sources[offset]), int(lines[offset]), texts[offset])
    return cast(list[Row], found)
