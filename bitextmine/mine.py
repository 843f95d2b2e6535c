"""Margin-based mining: k nearest neighbours both ways, margin scores, one-to-one candidate selection.

The core works on two collections of unit vectors reached through a `search` function (an index or
exact search) and a `take` function (exact stored vectors by row), so the same code mines a workspace
with FAISS indexes and a small in-memory BUCC split with exact search. Candidate cosines are always
recomputed from the stored vectors, never taken from a compressed index.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from bitextmine.margin import check_margin, margin_scores
from bitextmine.neighbors import exact_knn, rerank

STRATEGIES = ("max", "intersect", "fwd", "bwd")

SearchFn = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]  # (queries, k) -> (sims, ids)
TakeFn = Callable[[np.ndarray], np.ndarray]  # row ids -> float32 vectors


@dataclass
class Neighbours:
    """The k nearest neighbours of every query: exact cosines (NaN where none was found) and ids (-1)."""

    sims: np.ndarray  # float32 [n, k]
    ids: np.ndarray  # int64 [n, k]

    @property
    def mean(self) -> np.ndarray:
        """Mean cosine to the neighbours found (the margin's neighbourhood term)."""
        found = self.ids >= 0
        total = np.where(found, self.sims, 0.0).sum(1, dtype=np.float64)
        return total / np.maximum(found.sum(1), 1)


@dataclass
class Candidates:
    """One-to-one candidate pairs sorted by decreasing score."""

    src: np.ndarray  # int64 row ids
    tgt: np.ndarray  # int64 row ids
    score: np.ndarray  # float64
    cosine: np.ndarray  # float64

    def __len__(self) -> int:
        return len(self.src)

    def above(self, threshold: float) -> Candidates:
        keep = self.score >= threshold
        return Candidates(self.src[keep], self.tgt[keep], self.score[keep], self.cosine[keep])


@dataclass
class SearchShard:
    """Rows `offset`.. of the searched set behind one search function (a FAISS index, exact search)."""

    search: SearchFn  # ids it returns are local to the shard
    offset: int = 0


def find_neighbours(
    query_blocks: Callable[[], Iterable[tuple[int, np.ndarray]]],
    n_queries: int,
    shards: Sequence[SearchShard],
    take: TakeFn,
    k: int,
    progress: Callable[[int], None] | None = None,
    fetch: int | None = None,
) -> Neighbours:
    """kNN of every query: `fetch` (>= k) hits per shard re-ranked by exact cosines from `take`, merged
    over the shards. Shards are the outer loop, so each is searched once for all query blocks."""
    found = Neighbours(np.full((n_queries, k), np.nan, np.float32), np.full((n_queries, k), -1, np.int64))
    for number, shard in enumerate(shards):
        for start, block in query_blocks():
            _, ids = shard.search(block, max(k, fetch or k))
            cos, ids = rerank(block, np.where(ids >= 0, ids + shard.offset, -1), take, k)
            rows = slice(start, start + len(block))
            found.sims[rows], found.ids[rows] = merge_top_k(
                (found.sims[rows], found.ids[rows]), (cos, ids), k
            )
            if progress and number == len(shards) - 1:
                progress(len(block))
    return found


def merge_top_k(
    first: tuple[np.ndarray, np.ndarray], second: tuple[np.ndarray, np.ndarray], k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The k best (cosine, id) of two exact-cosine neighbour lists per row (NaN / -1 = none), best
    first; on ties the first list's hit comes first."""
    cos = np.concatenate([first[0], second[0]], axis=1)
    ids = np.concatenate([first[1], second[1]], axis=1)
    order = np.argsort(-np.nan_to_num(cos, nan=-np.inf), axis=1, kind="stable")[:, :k]
    cos, ids = np.take_along_axis(cos, order, 1), np.take_along_axis(ids, order, 1)
    width = ids.shape[1]
    if width < k:
        pad = ((0, 0), (0, k - width))
        cos, ids = np.pad(cos, pad, constant_values=np.nan), np.pad(ids, pad, constant_values=-1)
    return cos, ids


def select_candidates(fwd: Neighbours, bwd: Neighbours, margin: str, strategy: str) -> Candidates:
    """Best candidate of each sentence in the chosen direction(s), then a greedy one-to-one pass.

    `fwd` holds the target neighbours of each source sentence, `bwd` the source neighbours of each
    target sentence. `max` pools both directions' best candidates; `intersect` keeps mutual bests.
    Pairs are taken by decreasing score and a pair is dropped when its source or target was used.
    """
    check_margin(margin)
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown candidate strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    fwd_mean, bwd_mean = fwd.mean, bwd.mean
    f_src, f_tgt, f_score, f_cos = _best(fwd, fwd_mean, bwd_mean, margin, forward=True)
    b_src, b_tgt, b_score, b_cos = _best(bwd, fwd_mean, bwd_mean, margin, forward=False)
    if strategy == "fwd":
        pools = [(f_src, f_tgt, f_score, f_cos)]
    elif strategy == "bwd":
        pools = [(b_src, b_tgt, b_score, b_cos)]
    elif strategy == "max":
        pools = [(f_src, f_tgt, f_score, f_cos), (b_src, b_tgt, b_score, b_cos)]
    else:
        best_src_of_tgt = np.full(len(bwd.ids), -1, dtype=np.int64)
        best_src_of_tgt[b_tgt] = b_src
        mutual = best_src_of_tgt[f_tgt] == f_src
        pools = [(f_src[mutual], f_tgt[mutual], f_score[mutual], f_cos[mutual])]
    src, tgt, score, cos = (np.concatenate(parts) for parts in zip(*pools, strict=True))
    return _one_to_one(src, tgt, score, cos)


def _best(
    hits: Neighbours, fwd_mean: np.ndarray, bwd_mean: np.ndarray, margin: str, *, forward: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(src, tgt, score, cosine) of the best-scoring neighbour of every query that has one."""
    queries = np.arange(len(hits.ids))
    found = hits.ids >= 0
    other = np.where(found, hits.ids, 0)
    if forward:
        scores = margin_scores(hits.sims.astype(np.float64), fwd_mean[:, None], bwd_mean[other], margin)
    else:
        scores = margin_scores(hits.sims.astype(np.float64), fwd_mean[other], bwd_mean[:, None], margin)
    scores = np.where(found, scores, -np.inf)
    column = scores.argmax(1)
    has = found.any(1)
    queries, column = queries[has], column[has]
    best = other[queries, column]
    score = scores[queries, column]
    cos = hits.sims[queries, column].astype(np.float64)
    return (queries, best, score, cos) if forward else (best, queries, score, cos)


def _one_to_one(src: np.ndarray, tgt: np.ndarray, score: np.ndarray, cos: np.ndarray) -> Candidates:
    order = np.argsort(-score, kind="stable")
    used_src: set[int] = set()
    used_tgt: set[int] = set()
    keep = []
    for i in order.tolist():
        s, t = int(src[i]), int(tgt[i])
        if s in used_src or t in used_tgt:
            continue
        used_src.add(s)
        used_tgt.add(t)
        keep.append(i)
    picked = np.asarray(keep, dtype=np.int64)
    return Candidates(src[picked], tgt[picked], score[picked], cos[picked])


def mine_arrays(
    src: np.ndarray, tgt: np.ndarray, *, k: int = 4, margin: str = "ratio", strategy: str = "max"
) -> Candidates:
    """Exact mining of two in-memory sets of unit vectors (BUCC splits, tests)."""

    def neighbours(queries: np.ndarray, base: np.ndarray) -> Neighbours:
        shard = SearchShard(lambda q, n: exact_knn(q, base, n))
        return find_neighbours(
            lambda: [(0, queries)], len(queries), [shard], lambda i: base[i], min(k, len(base))
        )

    return select_candidates(neighbours(src, tgt), neighbours(tgt, src), margin, strategy)
