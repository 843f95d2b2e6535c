"""Hard negatives mined by bitextmine itself (`train --hard-negatives N`).

The pool is the next `pool` pairs of the training stream, from the position of the batch being trained
(the stream is a pure function of sources and seed, so the pool is too). Both sides are encoded with the
current model (eval mode, no gradients) and searched exactly both ways (search/gemm.py); each pool pair's
candidates are the English sentences of the pool nearest to its source, ranked by the ratio margin
(mining/margin.py, k = 4 as `mine` scores), and its negatives are the N best that the false-negative
guard keeps. The guard drops a candidate that is
  - the gold target itself;
  - a duplicate of it: the same text once cleaned, case-folded and without punctuation, or a cosine to
    the gold target's vector of at least DUPLICATE_COSINE;
  - scored at least as high as the gold pair's own margin score (a likely translation too).
A pair keeps fewer than N where the guard leaves fewer. In a batch, the negatives of its pairs become extra
English columns of the contrastive loss for every row; the same guard, against each row's own pair,
decides which rows see which column. Mining runs again every `refresh` steps, and as soon as a batch
reaches past the pool's last pair.
"""

from __future__ import annotations

import itertools
import time
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bitextmine.mining.margin import margin_scores
from bitextmine.mining.settings import MarginSettings
from bitextmine.search.gemm import GemmPlan, exact_neighbours
from bitextmine.search.knn import Neighbours
from bitextmine.train.data import Pair, PairBatch, sentence_key
from bitextmine.unit_vectors import unit_rows

MARGIN = MarginSettings()  # the ratio margin over k = 4 neighbours, as `mine` scores pairs
# A candidate this close to the gold target is the same sentence (punctuation, a typo, a number):
# a translation of the source, not a negative.
DUPLICATE_COSINE = 0.95
EXTRA_CANDIDATES = 8  # searched beyond N, for the guard to drop without leaving a pair short
GATHER_ROWS = 4096  # pool rows whose candidates' vectors are gathered at once (the guard's cosines)


@dataclass(frozen=True)
class HardNegativeSettings:
    n: int  # negatives per pair
    refresh: int  # steps between minings
    pool: int  # pairs mined at once

    def as_dict(self) -> dict[str, int]:
        return {"n": self.n, "refresh": self.refresh, "pool": self.pool}


def pool_size(pool: int, epoch: Iterable[Pair]) -> int:
    """`pool`, or the distinct pairs of `epoch` (one pass over the training data) where they are fewer: a
    larger pool would hold the same pairs many times over, and encode them all before the first step."""
    seen: set[tuple[str, str]] = set()
    for pair in epoch:
        seen.add((pair.src, pair.tgt))
        if len(seen) == pool:
            break
    return len(seen)


def duplicate_key(text: str) -> bytes:
    """What the guard takes as the same sentence: the text cleaned and case-folded (`sentence_key`),
    without punctuation."""
    return sentence_key("".join(c for c in text if not unicodedata.category(c).startswith("P")))


@dataclass
class Pool:
    """A pool's unit vectors, margin neighbourhood means and duplicate keys: what the guard compares."""

    src: np.ndarray  # float32 [P, dim]
    tgt: np.ndarray  # float32 [P, dim]
    keys: np.ndarray  # duplicate_key of each English sentence
    fwd: np.ndarray  # mean cosine of each source to its k nearest targets
    bwd: np.ndarray  # mean cosine of each target to its k nearest sources
    gold: np.ndarray  # each pair's own margin score

    def excluded(
        self, rows: np.ndarray, cands: np.ndarray, src_cos: np.ndarray, tgt_cos: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(gold, duplicate, above gold) masks of the candidate targets `cands` of the pairs `rows`
        (broadcast together), given cos(source of row, cand) and cos(target of row, cand)."""
        gold = cands == rows
        duplicate = ~gold & ((self.keys[cands] == self.keys[rows]) | (tgt_cos >= DUPLICATE_COSINE))
        scores = margin_scores(src_cos, self.fwd[rows], self.bwd[cands], MARGIN.margin)
        above = ~gold & ~duplicate & (scores >= self.gold[rows])
        return gold, duplicate, above


@dataclass
class MinedNegatives:
    pool: Pool
    ids: np.ndarray  # int64 [P, n]: each pair's negatives (pool rows), best first, -1 past the last
    duplicates: int  # candidates the guard dropped as duplicates of the gold target
    above_gold: int  # candidates it dropped for scoring at least the gold pair

    def summary(self) -> dict[str, int]:
        kept = self.ids >= 0
        return {
            "pairs": len(self.ids),
            "negatives": int(kept.sum()),
            "pairs_short": int((~kept).any(1).sum()),  # pairs left with fewer than n
            "excluded_duplicates": self.duplicates,
            "excluded_above_gold": self.above_gold,
        }

    def for_rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The negatives of the pool pairs `rows` (a batch) that are not among those pairs, sorted, and
        which rows may see each: bool [len(rows), negatives], the guard against each row's own pair."""
        negatives = np.setdiff1d(self.ids[rows], np.append(rows, -1))
        pool = self.pool
        src_cos = pool.src[rows] @ pool.tgt[negatives].T
        tgt_cos = pool.tgt[rows] @ pool.tgt[negatives].T
        masks = pool.excluded(rows[:, None], negatives[None, :], src_cos, tgt_cos)
        return negatives, ~np.logical_or.reduce(masks)


def mine_negatives(
    src: np.ndarray, tgt: np.ndarray, english: Sequence[str], n: int, device: str = "cpu"
) -> MinedNegatives:
    """For each pair i of a pool (vectors `src[i]`, `tgt[i]`; `english[i]` the text of `tgt[i]`), the `n`
    targets of the pool with the highest margin score to `src[i]` that the guard keeps."""
    src, tgt = unit_rows("src", src, normalize=True), unit_rows("tgt", tgt, normalize=True)
    plan = GemmPlan.for_device(device)
    found = exact_neighbours(src, tgt, max(MARGIN.k, n + EXTRA_CANDIDATES), plan)
    fwd = Neighbours(found.sims[:, : MARGIN.k], found.ids[:, : MARGIN.k]).mean
    bwd = exact_neighbours(tgt, src, MARGIN.k, plan).mean
    gold = margin_scores(np.einsum("nd,nd->n", src, tgt), fwd, bwd, MARGIN.margin)
    pool = Pool(src, tgt, np.array([duplicate_key(text) for text in english]), fwd, bwd, gold)
    cands, real = found.ids, found.ids >= 0  # -1: a pool smaller than the search's k
    rows = np.arange(len(src))[:, None]
    masks = [real & m for m in pool.excluded(rows, cands, found.sims, _cosines_to_own(tgt, cands))]
    scores = margin_scores(found.sims, fwd[:, None], bwd[cands], MARGIN.margin)
    order = np.argsort(-np.where(real, scores, -np.inf), axis=1, kind="stable")

    def ranked(values: np.ndarray) -> np.ndarray:
        return np.take_along_axis(values, order, 1)

    kept = ranked(real & ~np.logical_or.reduce(masks))
    before = np.cumsum(kept, axis=1) - kept  # candidates kept ahead of each
    at, column = np.nonzero(kept & (before < n))
    ids = np.full((len(src), n), -1, np.int64)
    ids[at, before[at, column]] = ranked(cands)[at, column]
    # the guard's drops that would otherwise have been negatives: ranked ahead of the row's n-th kept one
    _, duplicate, above = (int((ranked(mask) & (before < n)).sum()) for mask in masks)
    return MinedNegatives(pool, ids, duplicate, above)


def _cosines_to_own(vectors: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """cos(vectors[i], vectors[ids[i, j]]) [rows, k], gathered GATHER_ROWS rows at a time (-1 ids: any)."""
    cos = np.empty(ids.shape, np.float32)
    for first in range(0, len(ids), GATHER_ROWS):
        block = slice(first, first + GATHER_ROWS)
        cos[block] = np.einsum("nd,nkd->nk", vectors[block], vectors[ids[block]])
    return cos


@dataclass
class BatchNegatives:
    """A batch's extra English columns: their token ids, and which rows may see each."""

    ids: list[list[int]]
    allowed: np.ndarray  # bool [batch pairs, negatives]


class HardNegativeMiner:
    """Mines a pool of the pairs the next batches hold (`pairs`: a stream equal to the batches' own) and
    gives each batch its negatives. `encode` gives the current model's vectors of sentences, `tokenize`
    their token ids for the training forward; `report(step, summary)` hears of each mining."""

    def __init__(
        self,
        settings: HardNegativeSettings,
        pairs: Iterator[Pair],
        encode: Callable[[list[str]], np.ndarray],
        tokenize: Callable[[list[str]], list[list[int]]],
        device: str = "cpu",
        report: Callable[[int, dict[str, Any]], None] = lambda step, summary: None,
    ) -> None:
        self.settings = settings
        self._pairs = pairs
        self._encode, self._tokenize, self._device, self._report = encode, tokenize, device, report
        self._window: list[Pair] = []  # pairs start.. of the stream
        self._start = 0
        self._mined: MinedNegatives | None = None
        self._mined_at = -1  # the step mined for

    def for_batch(self, batch: PairBatch, step: int) -> BatchNegatives | None:
        """The negatives of `batch`, trained in step `step` + 1; None if it has none."""
        first = batch.pairs_drawn - len(batch.src_ids)
        if self._due(step, batch.pairs_drawn):
            self._mine(first, step)
        assert self._mined is not None
        negatives, allowed = self._mined.for_rows(np.arange(first, batch.pairs_drawn) - self._start)
        if not len(negatives):
            return None
        return BatchNegatives(self._tokenize([self._window[i].tgt for i in negatives]), allowed)

    def _due(self, step: int, end: int) -> bool:
        scheduled = step % self.settings.refresh == 0 and step != self._mined_at
        return self._mined is None or scheduled or end > self._start + len(self._window)

    def _mine(self, first: int, step: int) -> None:
        started = time.perf_counter()
        self._slide(first)
        sides = self._encode([p.src for p in self._window] + [p.tgt for p in self._window])
        src, tgt = sides[: len(self._window)], sides[len(self._window) :]
        english = [p.tgt for p in self._window]
        self._mined = mine_negatives(src, tgt, english, self.settings.n, self._device)
        self._mined_at = step
        self._report(step, {**self._mined.summary(), "seconds": round(time.perf_counter() - started, 2)})

    def _slide(self, first: int) -> None:
        """Make the window the `pool` pairs from stream position `first` on (never behind the last one)."""
        behind = first - self._start
        kept = self._window[behind:]
        for _ in range(behind - len(self._window)):  # pairs trained on since the window ended
            next(self._pairs)
        self._window = kept + list(itertools.islice(self._pairs, self.settings.pool - len(kept)))
        self._start = first
