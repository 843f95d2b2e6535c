"""Stream text corpora, clean lines, deduplicate, and write fixed-size text shards plus a manifest.

Everything here works in constant memory whatever the input size: files are read line by line with a
bounded ``readline``, compressed input is decompressed as a stream, and deduplication keeps 64-bit
hashes only (about 16 bytes per unique sentence).

A text shard ``shard-NNNNN.tsv`` holds one row per line, ``SOURCE<TAB>LINE<TAB>TEXT``: the index of the
input file, the 1-based line number in the original (decompressed) input, and the cleaned sentence.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from bitextmine.files import atomic_open, read_json, write_json
from bitextmine.text.dedup import Deduplicator
from bitextmine.text.reader import (
    STDIN,
    CorpusCounts,
    CorpusError,
    Row,
    Warn,
    display_name,
    iter_rows,
    warn_user,
)

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = 1


# ---------------------------------------------------------------------------------------------------
# Opening files


# ---------------------------------------------------------------------------------------------------
# Cleaning and reading lines


# ---------------------------------------------------------------------------------------------------
# Deduplication


def iter_corpus(
    paths: Sequence[str],
    counts: CorpusCounts,
    *,
    dedup: bool = False,
    max_chars: int = 10_000,
    warn: Warn = warn_user,
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
    warn: Warn = warn_user,
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
    data = read_json(path, remedy="delete it to rebuild")
    try:
        return CorpusManifest.from_json(data)
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
