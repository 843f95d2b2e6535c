"""The corpus pass in parts: one job per input file writes a part, and a merge in input order turns the
parts into the text shards and manifest that the single pass (`build_corpus`) writes, byte for byte.

A part, ``part-NNNNN-KEY.tsv`` (NNNNN: the input's position, KEY: a digest of the input's path, size and
mtime and of every setting that changes its rows), holds what the corpus pass makes of that file alone:
its rows cleaned, deduplicated within the file and identified, each with its dedup hash. Its first line
is the JSON of what it was built from; then one line a row, ``HASH<TAB>LINE<TAB>TEXT[<TAB>META]``
(HASH ``-`` without dedup), and with dedup one line ``HASH`` for each row language identification
dropped (a later copy of such a sentence is a duplicate, not a row in another language); its last line
is the JSON of its counts, its warnings and the sha256 of the lines between, which the merge checks.
Parts are written atomically, so a part that exists is complete: a rerun after a crash builds only the
missing ones, and an input that changed gets another KEY.

The merge replays the dedup across files on the hashes (the first occurrence wins) and streams the
rows into shards: memory holds the hashes of the unique sentences, as in the single pass, nothing more.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from bitextmine.corpus.build import build_corpus, plan_corpus, write_corpus
from bitextmine.corpus.settings import CorpusSettings
from bitextmine.corpus.sift import Sifted, sift
from bitextmine.errors import Warn, warn_user
from bitextmine.files import atomic_open, json_record, json_text, remove_temporaries
from bitextmine.launch.config import LauncherConfig
from bitextmine.launch.jobs import Job, run_jobs
from bitextmine.progress import Advance
from bitextmine.text.dedup import Deduplicator
from bitextmine.text.reader import STDIN, CorpusCounts, CorpusError, Row, iter_rows
from bitextmine.workspace.corpus import CorpusManifest, SourceInfo, TextShard, clear_corpus

PART_FORMAT = 1
_WRITE_ROWS = 1024  # rows encoded and written at a time


@dataclass(frozen=True)
class Part:
    """The part of the input at `position`, as it is now (`source`), read with `settings`."""

    position: int
    source: SourceInfo
    settings: CorpusSettings

    def key(self) -> dict[str, Any]:
        """What the part is built from, as its first line records it."""
        settings = self.settings.row_settings()
        return {"format": PART_FORMAT, "source": asdict(self.source), "settings": settings}

    @property
    def name(self) -> str:
        digest = hashlib.sha256(json.dumps(self.key(), sort_keys=True).encode()).hexdigest()[:16]
        return f"part-{self.position:05d}-{digest}.tsv"


def build_corpus_from_parts(
    paths: Sequence[str],
    lang: str,
    out_dir: Path,
    parts_dir: Path,
    settings: CorpusSettings,
    *,
    warn: Warn = warn_user,
    on_shard: Callable[[TextShard], None] | None = None,
    launcher: LauncherConfig | None = None,
    workers: int = 1,
) -> CorpusManifest:
    """`build_corpus`, resumable per input file: build the missing parts in `parts_dir` (one job a file,
    run by `launcher`, which needs no GPU for them, or by `workers` local processes), remove the parts of
    inputs no longer listed, then merge. With stdin among `paths` (it cannot be read twice), the single pass.

    Any error leaves `out_dir` without shards or manifest; the parts already built stay, for the rerun.
    """
    if STDIN in paths:
        return build_corpus(paths, lang, out_dir, settings, warn=warn, on_shard=on_shard)
    plan = plan_corpus(paths, lang, settings)
    clear_corpus(out_dir)
    parts = [Part(position, source, settings) for position, source in enumerate(plan.sources)]
    parts_dir = Path(parts_dir)
    _remove_other_parts(parts_dir, {part.name for part in parts})
    jobs = [
        Job(f"corpus {lang} {path}", build_part, (path, part, parts_dir), outputs=(parts_dir / part.name,))
        for path, part in zip(paths, parts, strict=True)
    ]
    run_jobs(jobs, launcher and replace(launcher, gpus_per_job=0), "corpus", workers=workers)
    counts = CorpusCounts()
    rows = merge_parts(parts, parts_dir, counts, settings.dedup, warn)
    return write_corpus(plan, paths, rows, counts, out_dir, on_shard)


def build_part(path: str, part: Part, parts_dir: Path, progress: Advance | None = None) -> None:
    """Job: read, clean, dedup within the file and identify `path` into its part in `parts_dir`."""
    settings = part.settings
    counts, warnings = CorpusCounts(), []
    rows = iter_rows(
        path, 0, counts, max_chars=settings.max_chars, columns=settings.columns, warn=warnings.append
    )
    records = (
        s for s in sift(rows, counts, settings.dedup, settings.lid) if s.in_language or s.hash is not None
    )
    digest = hashlib.sha256()
    with atomic_open(Path(parts_dir) / part.name, "wb") as fh:
        fh.write(_json_line(part.key()))
        while batch := list(itertools.islice(records, _WRITE_ROWS)):
            data = "".join(map(_record, batch)).encode()
            digest.update(data)
            fh.write(data)
        trailer = {"counts": counts.as_dict(), "warnings": warnings, "sha256": digest.hexdigest()}
        fh.write(_json_line(trailer))
    if progress:
        progress(1)


def _record(sifted: Sifted) -> str:
    value = "-" if sifted.hash is None else f"{sifted.hash:016x}"
    if not sifted.in_language:
        return f"{value}\n"
    row = sifted.row
    meta = "" if row.meta is None else f"\t{row.meta}"
    return f"{value}\t{row.line}\t{row.text}{meta}\n"


def _json_line(data: Any) -> bytes:
    return (json_text(data) + "\n").encode()


def merge_parts(
    parts: Sequence[Part], parts_dir: Path, counts: CorpusCounts, dedup: bool, warn: Warn = warn_user
) -> Iterator[Row]:
    """The rows of the parts in order (source: the part's position), deduplicated across them if asked,
    as the single pass yields them; `counts` and the warnings of each part are its own."""
    seen = Deduplicator() if dedup else None
    for part in parts:
        yield from _part_rows(Path(parts_dir) / part.name, part, seen, counts, warn)


def _part_rows(
    path: Path, part: Part, seen: Deduplicator | None, counts: CorpusCounts, warn: Warn
) -> Iterator[Row]:
    damaged = f"{path}: damaged corpus part (not what `encode` wrote); delete it and rerun"
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        try:
            if json.loads(fh.readline()) != part.key():
                raise CorpusError(
                    f"{path}: not the part of {part.source.path} it should be; delete it and rerun"
                )
            for raw in fh:  # binary lines end at LF only: a meta field may hold a CR
                fields = raw.decode()[:-1].split("\t")
                if fields[0].startswith("{"):
                    trailer = json.loads(fields[0])
                    break
                digest.update(raw)
                if seen is not None and seen.seen_hash(int(fields[0], 16)):
                    counts.duplicates += 1  # of a sentence in an earlier part: drop it from that count
                    if len(fields) == 1:
                        counts.wrong_language -= 1
                    else:
                        counts.kept -= 1
                elif len(fields) > 1:
                    yield Row(
                        part.position, int(fields[1]), fields[2], fields[3] if len(fields) == 4 else None
                    )
            else:
                raise CorpusError(damaged)
            if trailer["sha256"] != digest.hexdigest():
                raise CorpusError(damaged)
            counts.add(json_record(CorpusCounts, trailer["counts"]))
            warnings = [str(message) for message in trailer["warnings"]]
        except (ValueError, KeyError, TypeError, IndexError):
            raise CorpusError(damaged) from None
    for message in warnings:
        warn(message)


def _remove_other_parts(parts_dir: Path, keep: set[str]) -> None:
    """Remove the parts of inputs no longer listed (or changed, or read with other settings) and the
    temporaries of killed runs."""
    if not parts_dir.is_dir():
        return
    remove_temporaries(parts_dir, "part-*")
    for stale in parts_dir.glob("part-*.tsv"):
        if stale.name not in keep:
            stale.unlink(missing_ok=True)
