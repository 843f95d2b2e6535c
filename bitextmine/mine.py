"""Margin-based mining: k nearest neighbours both ways, margin scores, one-to-one candidate selection.

The core works on two collections of unit vectors reached through a `search` function (an index or
exact search) and a `take` function (exact stored vectors by row), so the same code mines a workspace
with FAISS indexes and a small in-memory BUCC split with exact search. Candidate cosines are always
recomputed from the stored vectors, never taken from a compressed index.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bitextmine.neighbors import Neighbours, exact_knn, rerank
from bitextmine.selection import Candidates, select_candidates

SearchFn = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]  # (queries, k) -> (sims, ids)
TakeFn = Callable[[np.ndarray], np.ndarray]  # row ids -> float32 vectors


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


def mine_arrays(
    src: np.ndarray, tgt: np.ndarray, *, k: int = 4, margin: str = "ratio", strategy: str = "max"
) -> Candidates:
    """Exact mining of two in-memory sets of unit vectors (BUCC splits, tests)."""

    def neighbours(queries: np.ndarray, base: np.ndarray) -> Neighbours:
        shard = SearchShard(lambda q, n: exact_knn(q, base, n))
        return find_neighbours(
            lambda: [(0, queries)], len(queries), [shard], lambda i: base[i], min(k, len(base))
        )

    fwd, bwd = neighbours(src, tgt), neighbours(tgt, src)
    with tempfile.TemporaryDirectory(prefix="bitextmine-selection-") as scratch:
        selected = select_candidates(
            lambda: [(0, fwd)], lambda: [(0, bwd)], (len(src), len(tgt)), margin, strategy, Path(scratch)
        )
        return Candidates.from_records(selected)
