"""Text shards and their manifest: the files the corpus pass (bitextmine/corpus/) writes in
``WORK/corpora/L/`` and every later step reads.

A text shard ``shard-NNNNN.tsv`` holds one row per line, ``SOURCE<TAB>LINE<TAB>TEXT``: the index of the
input file, the 1-based line number in the original (decompressed) input, and the cleaned sentence; then
``<TAB>META`` when the corpus was read with a meta column.
"""

from __future__ import annotations

import hashlib
import itertools
import mmap
import os
import re
import stat
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from bitextmine.files import atomic_open, json_record, read_json, write_json
from bitextmine.text.lid import LidFilter
from bitextmine.text.reader import STDIN, Columns, CorpusCounts, CorpusError, Row

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = 1
_SHARD_FILE = re.compile(r"shard-\d+\.tsv")  # names come from the manifest and become file names


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
    columns: Columns | None = None  # None: the whole line is the sentence
    lid: LidFilter | None = None

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
            "columns": None if self.columns is None else asdict(self.columns),
            "lid": None if self.lid is None else asdict(self.lid),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CorpusManifest:
        return cls(
            lang=str(d["lang"]),
            sources=[json_record(SourceInfo, s) for s in d["sources"]],
            shard_size=int(d["shard_size"]),
            dedup=bool(d["dedup"]),
            max_chars=int(d["max_chars"]),
            shards=_text_shards(d["shards"], d.get("rows")),
            counts=json_record(CorpusCounts, d["counts"]),
            complete=bool(d["complete"]),
            # absent from manifests written before columns and language identification existed
            columns=json_record(Columns, d["columns"]) if d.get("columns") else None,
            lid=json_record(LidFilter, d["lid"]) if d.get("lid") else None,
        )

    def same_inputs(self, other: CorpusManifest) -> bool:
        """True if `other` was built from the same unchanged files with the same settings (never stdin)."""
        if any(s.path == STDIN for s in [*self.sources, *other.sources]):
            return False
        return self._settings() == other._settings()

    def _settings(self) -> tuple:
        return (self.sources, self.shard_size, self.dedup, self.max_chars, self.columns, self.lid)


def shard_name(index: int) -> str:
    return f"shard-{index:05d}.tsv"


def _text_shards(entries: list[Any], total: Any) -> list[TextShard]:
    """The shard entries of a manifest read back: shard names (they become file names), each starting
    where the one before ended, `total` rows in all (when recorded)."""
    shards = [json_record(TextShard, entry) for entry in entries]
    first = 0
    for shard in shards:
        if not _SHARD_FILE.fullmatch(shard.name):
            raise ValueError(f"{shard.name!r} is not the name of a text shard")
        if shard.first_row != first:
            raise ValueError(f"{shard.name} starts at row {shard.first_row}, not {first}")
        if shard.rows < 0:
            raise ValueError(f"{shard.name} has {shard.rows} rows")
        first += shard.rows
    if total is not None and total != first:
        raise ValueError(f"its shards hold {first} rows, not {total}")
    return shards


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
            data = "".join(_shard_line(r) for r in batch).encode()
            digest.update(data)
            fh.write(data)
            count += len(batch)
    return TextShard(path.name, first_row, count, digest.hexdigest())


def _shard_line(row: Row) -> str:
    meta = "" if row.meta is None else f"\t{row.meta}"
    return f"{row.source}\t{row.line}\t{row.text}{meta}\n"


def read_shard_rows(path: Path, sha256: str | None = None) -> list[Row]:
    """The rows of one text shard, meta included (None when the corpus has no meta column); a shard
    that is not the bytes its manifest records (`sha256`, when given) is a one-line error."""
    data = _checked_bytes(Path(path), sha256).decode()
    return [_parse_row(line, path, n) for n, line in enumerate(data.split("\n")[:-1], start=1)]


def _checked_bytes(path: Path, sha256: str | None) -> bytes:
    raw = path.read_bytes()
    if sha256 is not None and hashlib.sha256(raw).hexdigest() != sha256:
        manifest = path.parent / MANIFEST_NAME
        raise CorpusError(
            f"{path}: damaged text shard (not the bytes `encode` wrote: its checksum differs from "
            f"{manifest}'s); delete {manifest} and rerun `bitextmine encode` with the same files: it "
            "writes the text shards again and keeps the embeddings"
        )
    return raw


def _parse_row(line: str, path: Path, number: int) -> Row:
    fields = line.split("\t")  # cleaning leaves no TAB in a sentence, and a meta field is one column
    try:
        if len(fields) not in (3, 4):
            raise ValueError
        return Row(int(fields[0]), int(fields[1]), fields[2], fields[3] if len(fields) == 4 else None)
    except ValueError:
        raise CorpusError(f"{path}:{number}: malformed text shard line") from None


def read_text_shard(path: Path, sha256: str | None = None) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Return the texts, sources (int32) and original line numbers (int64) of one text shard."""
    rows = read_shard_rows(path, sha256)
    return (
        [row.text for row in rows],
        np.array([row.source for row in rows], dtype=np.int32),
        np.array([row.line for row in rows], dtype=np.int64),
    )


def clear_corpus(out_dir: Path) -> None:
    """Make `out_dir` and remove its manifest and text shards, before they are built again."""
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    remove_corpus(out_dir)


def remove_corpus(out_dir: Path) -> None:
    """Remove the manifest, the text shards and the shards left half-written in `out_dir`."""
    (Path(out_dir) / MANIFEST_NAME).unlink(missing_ok=True)
    for pattern in ("shard-*.tsv", ".shard-*.tsv.tmp-*"):
        for stale in Path(out_dir).glob(pattern):
            stale.unlink(missing_ok=True)


def write_manifest(out_dir: Path, manifest: CorpusManifest) -> None:
    write_json(Path(out_dir) / MANIFEST_NAME, manifest.to_json())


def load_manifest(out_dir: Path) -> CorpusManifest | None:
    """The manifest in `out_dir`, or None if there is none."""
    path = Path(out_dir) / MANIFEST_NAME
    if not path.exists():
        return None
    data = read_json(path, remedy="delete it to rebuild")
    try:
        return CorpusManifest.from_json(data)
    except (ValueError, KeyError, TypeError) as e:
        raise CorpusError(f"{path}: corrupt corpus manifest ({e}); delete it to rebuild") from None


class RowReader:
    """The rows of a corpus by global row number, for many lookups (`mine` writing its pairs chunk by
    chunk, each chunk touching every shard): a text shard is read and checked (sha256) once, the first
    time it is needed, keeping the offsets of its lines (4 bytes a row); later lookups read only the
    lines asked for, through a memory map."""

    def __init__(self, corpus_dir: Path, manifest: CorpusManifest) -> None:
        self.corpus_dir, self.manifest = Path(corpus_dir), manifest
        self._starts = np.array([s.first_row for s in manifest.shards], dtype=np.int64)
        self._offsets: dict[int, np.ndarray] = {}

    def rows(self, rows: np.ndarray) -> list[Row]:
        rows = np.asarray(rows, dtype=np.int64)
        shard_of = np.searchsorted(self._starts, rows, side="right") - 1
        found: list[Row | None] = [None] * len(rows)
        for index in np.unique(shard_of):
            shard = self.manifest.shards[index]
            path = self.corpus_dir / shard.name
            offsets = self._line_offsets(int(index), path)
            with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
                for position in np.flatnonzero(shard_of == index):
                    local = int(rows[position]) - shard.first_row
                    line = data[int(offsets[local]) : int(offsets[local + 1]) - 1].decode()
                    found[position] = _parse_row(line, path, local + 1)
        return cast(list[Row], found)

    def _line_offsets(self, index: int, path: Path) -> np.ndarray:
        """Where each line of shard `index` starts, and where the last ends (checked once)."""
        if index not in self._offsets:
            shard = self.manifest.shards[index]
            raw = np.frombuffer(_checked_bytes(path, shard.sha256), dtype=np.uint8)
            ends = np.flatnonzero(raw == ord("\n")) + 1
            if len(ends) != shard.rows or (len(raw) and ends[-1] != len(raw)):
                raise CorpusError(f"{path}: {len(ends)} lines, its manifest says {shard.rows}")
            dtype = np.uint32 if len(raw) < 2**32 else np.int64
            self._offsets[index] = np.concatenate([[0], ends]).astype(dtype)
        return self._offsets[index]
