"""A threshold learned inside the corpus being mined, from calibration pairs planted among its sentences
(docs/design.md, "Thresholds at scale").

Margin scores shift with a corpus's size and density, so a threshold learned on a small split keeps its
precision on a large corpus but loses recall (or, where translations are rare, the reverse). Here the
calibration's translation pairs are planted in the corpus: each planted sentence is searched against the
other side's corpus and planted sentences, and its neighbourhood mean taken there, so its scores see
the corpus's density. Corpus sentences keep the means of their own search: planting changes nothing that
is mined, and no planted sentence can be in the output. Each planted sentence's best-scoring neighbour
is its candidate (pooled as `select_candidates` pools the corpus's), the candidates touching a planted
sentence are taken one-to-one by decreasing score, and a planted pair is found at its score when it is
among them. A pair one of whose sentences the corpus already holds (a neighbour on its own side at
DUPLICATE_COSINE or more) is not planted: the copy would compete with it.

The found pairs give the recall at a threshold, R(t). The corpus's decoys (mining/null_estimate.py) give
the false pairs among its candidates reaching t, so TP(t) = kept(t) - false(t) estimates the
translations kept there, and TP(t) / R(t) the translations the corpus holds. To choose a threshold,
the largest of these stands for the corpus's translations, N, and the threshold is the planted score
with the best estimated F1, 2 TP(t) / (kept(t) + N) (on the scale set, the thresholds it gives stay
within 1 F1 of the best on the same score: examples/benchmarks/results/bench_scale_real.md). What is
reported at a threshold is its estimated precision, TP / kept, and its recall R(t): the recall of
translations like the calibration pairs, the corpus's where they are of its kind (N itself errs high
there: TP overcounts among many weak candidates) and too high where the corpus's translations are
harder to find.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from bitextmine.mining.margin import margin_scores
from bitextmine.search.knn import Neighbours, exact_knn

# Same-side cosine from which a planted sentence counts as one the corpus already holds (a copy, or the
# same sentence encoded in another batch).
DUPLICATE_COSINE = 0.99
# Fewer found planted pairs than this make R(t) too coarse to divide by.
MIN_FOUND = 10

Search = Callable[[np.ndarray, int], Neighbours]  # the k nearest rows of one corpus side to each query


class Counts(Protocol):
    """The corpus's candidates reaching a threshold and the translations estimated among them: on the
    margin (null_estimate.DecoyCounts) or on the regional precision (regional_precision.PrecisionCounts)."""

    def kept(self, threshold: float) -> int: ...

    def true(self, threshold: float) -> float: ...

    def precision(self, threshold: float) -> float | None: ...


@dataclass(frozen=True)
class CalibrationPairs:
    """Translation pairs to plant: row i of `tgt` translates row i of `src` (unit vectors)."""

    src: np.ndarray  # float32 [n, dim]
    tgt: np.ndarray  # float32 [n, dim]

    def __len__(self) -> int:
        return len(self.src)

    def subset(self, rows: np.ndarray) -> CalibrationPairs:
        return CalibrationPairs(self.src[rows], self.tgt[rows])


@dataclass(frozen=True)
class CorpusMeans:
    """The corpus's neighbourhood means: each source row's to its target neighbours (`fwd`), each target
    row's to its source neighbours (`bwd`)."""

    fwd: np.ndarray
    bwd: np.ndarray


@dataclass(frozen=True)
class Planted:
    """The planted pairs' scores where found one-to-one (-inf where not), which calibration pairs they
    are, and how many pairs were left out as copies of corpus sentences."""

    found: np.ndarray  # float64 [planted pairs]
    duplicates: int
    rows: np.ndarray  # int64 [planted pairs]: their rows in the calibration pairs

    def recall(self, threshold: float) -> float:
        return float(np.mean(self.found >= threshold)) if len(self.found) else 0.0


def plant(
    pairs: CalibrationPairs,
    search_src: Search,
    search_tgt: Search,
    means: CorpusMeans,
    *,
    k: int,
    margin: str,
    strategy: str,
) -> Planted:
    """Plant `pairs` in the corpus that `search_src` and `search_tgt` search (its source and target
    sides, whose neighbourhood means are `means`) and find them as mining would (module docstring)."""
    copies = _copies(pairs.src, search_src) | _copies(pairs.tgt, search_tgt)
    rows = np.flatnonzero(~copies)
    pairs = pairs.subset(rows)
    if not len(pairs):
        return Planted(np.zeros(0), int(copies.sum()), rows)
    fwd = _neighbours(pairs.src, search_tgt, pairs.tgt, len(means.bwd), k)
    bwd = _neighbours(pairs.tgt, search_src, pairs.src, len(means.fwd), k)
    fwd_scores = _scores(fwd, fwd.mean, np.concatenate([means.bwd, bwd.mean]), margin, forward=True)
    bwd_scores = _scores(bwd, bwd.mean, np.concatenate([means.fwd, fwd.mean]), margin, forward=False)
    pool = _pool(fwd, fwd_scores, bwd, bwd_scores, (len(means.fwd), len(means.bwd)), strategy)
    return Planted(_found(pool, len(means.fwd), len(means.bwd), len(pairs)), int(copies.sum()), rows)


def _copies(planted: np.ndarray, search_own_side: Search) -> np.ndarray:
    """Which planted sentences the corpus already holds on their own side."""
    if not len(planted):
        return np.zeros(0, bool)
    nearest = search_own_side(planted, 1)
    return (nearest.ids[:, 0] >= 0) & (np.nan_to_num(nearest.sims[:, 0], nan=-1.0) >= DUPLICATE_COSINE)


def _neighbours(
    queries: np.ndarray, search_corpus: Search, planted: np.ndarray, rows: int, k: int
) -> Neighbours:
    """The k nearest of the other side's corpus rows (ids as they are) and planted rows (ids `rows` + j)
    to each planted query, best first."""
    corpus = search_corpus(queries, k)
    sims, ids = exact_knn(queries, planted, k)
    sims = np.concatenate([np.nan_to_num(corpus.sims, nan=-np.inf), sims], axis=1)
    ids = np.concatenate([corpus.ids, np.where(ids >= 0, ids + rows, -1)], axis=1)
    sims[ids < 0] = -np.inf
    order = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    best_sims, best_ids = np.take_along_axis(sims, order, 1), np.take_along_axis(ids, order, 1)
    missing = ~np.isfinite(best_sims)
    return Neighbours(
        np.where(missing, np.nan, best_sims).astype(np.float32), np.where(missing, -1, best_ids)
    )


def _scores(
    hits: Neighbours, own_mean: np.ndarray, other_means: np.ndarray, margin: str, *, forward: bool
) -> np.ndarray:
    """The margin score of every neighbour of the planted queries; -inf where none was found."""
    found = hits.ids >= 0
    other = other_means[np.where(found, hits.ids, 0)]
    cos = hits.sims.astype(np.float64)
    own = own_mean[:, None]
    scores = margin_scores(cos, own, other, margin) if forward else margin_scores(cos, other, own, margin)
    return np.where(found, scores, -np.inf)


def _pool(
    fwd: Neighbours,
    fwd_scores: np.ndarray,
    bwd: Neighbours,
    bwd_scores: np.ndarray,
    sizes: tuple[int, int],
    strategy: str,
) -> np.ndarray:
    """The planted queries' best candidates as rows (score, source id, target id), pooled by `strategy`;
    planted sources are ids sizes[0] + j, planted targets sizes[1] + j."""
    src_rows, tgt_rows = np.arange(len(fwd.ids)) + sizes[0], np.arange(len(bwd.ids)) + sizes[1]
    forward = _bests(fwd, fwd_scores, src_rows, query_is_src=True)
    backward = _bests(bwd, bwd_scores, tgt_rows, query_is_src=False)
    if strategy == "intersect":
        mutual = {(s, t) for _, s, t in backward.tolist()}
        return forward[[(s, t) in mutual for _, s, t in forward.tolist()]]
    parts = {"fwd": [forward], "bwd": [backward], "max": [forward, backward]}[strategy]
    return np.concatenate(parts)


def _bests(hits: Neighbours, scores: np.ndarray, queries: np.ndarray, *, query_is_src: bool) -> np.ndarray:
    has = (hits.ids >= 0).any(1)
    column = scores.argmax(1)
    best = hits.ids[np.arange(len(column)), column]
    score = scores[np.arange(len(column)), column]
    src, tgt = (queries, best) if query_is_src else (best, queries)
    return np.stack([score, src, tgt], axis=1)[has]


def _found(pool: np.ndarray, n_src: int, n_tgt: int, planted: int) -> np.ndarray:
    """Each planted pair's score where the one-to-one pass over `pool` (by decreasing score, ties in pool
    order) takes it; -inf where it does not."""
    found = np.full(planted, -np.inf)
    used: set[tuple[str, int]] = set()
    for row in np.argsort(-pool[:, 0], kind="stable"):
        score, src, tgt = pool[row, 0], int(pool[row, 1]), int(pool[row, 2])
        if ("s", src) in used or ("t", tgt) in used:
            continue
        used |= {("s", src), ("t", tgt)}
        if src - n_src == tgt - n_tgt and src >= n_src:
            found[src - n_src] = score
    return found


@dataclass(frozen=True)
class CorpusEstimate:
    """What a threshold learned inside the corpus is estimated to keep there."""

    threshold: float
    precision: float  # estimated share of translations among the candidates kept
    recall: float  # share of the planted pairs found at the threshold
    translations: int  # the corpus's translations: those kept, TP, over the recall


def best_f1(planted: Planted, counts: Counts) -> tuple[float, float] | None:
    """The planted score with the best estimated F1 on the corpus, and that F1 (module docstring); None
    where fewer than MIN_FOUND planted pairs are found."""
    translations = _translations(planted, counts)
    if translations is None:
        return None
    scores = np.unique(planted.found[np.isfinite(planted.found)])
    return max(((float(t), _f1(counts, float(t), translations)) for t in scores), key=lambda c: (c[1], c[0]))


def estimate_at(planted: Planted, counts: Counts, threshold: float) -> CorpusEstimate | None:
    """The estimate at a given threshold; None where fewer than MIN_FOUND planted pairs are found."""
    if np.isfinite(planted.found).sum() < MIN_FOUND:
        return None
    true, recall = counts.true(threshold), planted.recall(threshold)
    translations = round(true / recall) if recall else 0
    return CorpusEstimate(threshold, counts.precision(threshold) or 0.0, recall, translations)


def _translations(planted: Planted, counts: Counts) -> int | None:
    """The corpus's translations: the largest TP(t) / R(t) over the planted scores reached by at least
    MIN_FOUND planted pairs; None where fewer are found."""
    found = np.sort(planted.found[np.isfinite(planted.found)])[::-1]
    if len(found) < MIN_FOUND:
        return None
    return int(max(counts.true(t) / planted.recall(t) for t in found[MIN_FOUND - 1 :]))


def _f1(counts: Counts, threshold: float, translations: int) -> float:
    """2 TP / (kept + N): the F1 of keeping the candidates that reach `threshold`."""
    total = counts.kept(threshold) + translations
    return 2 * counts.true(threshold) / total if total else 0.0
