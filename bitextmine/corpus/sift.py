"""Sifting the rows of a corpus: dedup on the sentence, then the language filter (`--lid`)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

from bitextmine.corpus.settings import CorpusSettings
from bitextmine.errors import Warn, warn_user
from bitextmine.text.dedup import Deduplicator
from bitextmine.text.lid import LidFilter
from bitextmine.text.reader import CorpusCounts, Row, iter_rows

LID_BATCH = 1024  # rows identified at a time


def iter_corpus(
    paths: Sequence[str],
    counts: CorpusCounts,
    settings: CorpusSettings,
    warn: Warn = warn_user,
) -> Iterator[Row]:
    """Chain the rows of all `paths` (source = position in `paths`), deduplicated across files if asked
    (on the sentence alone: the first occurrence and its meta stay), then kept only in the language of
    `settings.lid`.

    Dedup comes first so that each distinct sentence is identified once; as a sentence's language does not
    depend on where it occurs, the rows kept are the same in either order.
    """
    rows = itertools.chain.from_iterable(
        iter_rows(path, source, counts, max_chars=settings.max_chars, columns=settings.columns, warn=warn)
        for source, path in enumerate(paths)
    )
    return (s.row for s in sift(rows, counts, settings.dedup, settings.lid) if s.in_language)


class Sifted(NamedTuple):
    row: Row
    hash: int | None  # the sentence's dedup hash (None without dedup)
    in_language: bool  # False: language identification found it in another language


def sift(rows: Iterable[Row], counts: CorpusCounts, dedup: bool, lid: LidFilter | None) -> Iterator[Sifted]:
    """The rows that repeat no earlier sentence (with `dedup`), each with whether it is in `lid`'s language.

    `counts` (which counted every row as kept) gets the duplicates and the rows in another language, and
    keeps only the rows in neither.
    """
    unique = _unique_rows(rows, counts, dedup)
    if lid is None:
        yield from (Sifted(row, value, True) for row, value in unique)
        return
    while batch := list(itertools.islice(unique, LID_BATCH)):
        keep = lid.keeps([row.text for row, _ in batch])
        dropped = len(batch) - int(keep.sum())
        counts.wrong_language += dropped
        counts.kept -= dropped
        yield from (Sifted(row, value, bool(k)) for (row, value), k in zip(batch, keep, strict=True))


def _unique_rows(rows: Iterable[Row], counts: CorpusCounts, dedup: bool) -> Iterator[tuple[Row, int | None]]:
    if not dedup:
        yield from ((row, None) for row in rows)
        return
    seen = Deduplicator()
    for row in rows:
        value = Deduplicator.hash(row.text)
        if seen.seen_hash(value):
            counts.duplicates += 1
            counts.kept -= 1  # iter_rows counted it; kept counts emitted rows only
            continue
        yield row, value
