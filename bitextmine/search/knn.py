"""Nearest neighbours by inner product (cosine for unit vectors): exact search and exact re-ranking."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import faiss
import numpy as np

# Queries whose candidates are re-ranked at once: re-ranking gathers every candidate's vector, 16k queries x
# 64 candidates (PQ's fetch) x 384-d float32 is 1.5 GiB, whatever the block of queries searched at once.
RERANK_QUERIES = 16_384

QueryBlocks = Callable[[], Iterable[tuple[int, np.ndarray]]]  # (first query row, vectors), in row order


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


def exact_knn(queries: np.ndarray, base: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(similarities, ids), each [len(queries), min(k, len(base))], best first."""
    k = min(k, len(base))
    if k == 0:  # FAISS refuses k = 0
        return np.zeros((len(queries), 0), np.float32), np.zeros((len(queries), 0), np.int64)
    index = faiss.IndexFlatIP(base.shape[1])
    index.add(np.ascontiguousarray(base, dtype=np.float32))
    sims, ids = index.search(np.ascontiguousarray(queries, dtype=np.float32), k)
    return sims, ids


def rerank(
    queries: np.ndarray,
    ids: np.ndarray,
    take: Callable[[np.ndarray], np.ndarray],
    k: int,
    chunk_rows: int = RERANK_QUERIES,
) -> tuple[np.ndarray, np.ndarray]:
    """The k candidates of each query with the highest exact cosine (vectors from `take`), best first.

    Returns (cosines float32, NaN where no candidate; ids int64, -1 there); ties keep the search order.
    The candidates' vectors are gathered `chunk_rows` queries at a time.
    """
    parts = [
        _rerank(queries[first : first + chunk_rows], ids[first : first + chunk_rows], take, k)
        for first in range(0, max(len(ids), 1), chunk_rows)  # one empty part for no queries
    ]
    return np.concatenate([cos for cos, _ in parts]), np.concatenate([found for _, found in parts])


def _rerank(
    queries: np.ndarray, ids: np.ndarray, take: Callable[[np.ndarray], np.ndarray], k: int
) -> tuple[np.ndarray, np.ndarray]:
    valid = ids >= 0
    cos = np.full(ids.shape, -np.inf, dtype=np.float32)
    # summed in float64 and rounded, as search/gemm.py re-ranks: one cosine whichever index found the row
    rows = take(ids[valid]).astype(np.float64)
    cos[valid] = np.einsum("nd,nd->n", queries[np.nonzero(valid)[0]].astype(np.float64), rows)
    order = np.argsort(-cos, axis=1, kind="stable")[:, :k]
    cos, ids = np.take_along_axis(cos, order, 1), np.take_along_axis(ids, order, 1)
    cos[ids < 0] = np.nan
    return cos, ids


SearchFn = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]  # (queries, k) -> (sims, ids)


TakeFn = Callable[[np.ndarray], np.ndarray]  # row ids -> float32 vectors


@dataclass
class SearchShard:
    """Rows `offset`.. of the searched set behind one search function (a FAISS index, exact search)."""

    search: SearchFn  # ids it returns are local to the shard
    offset: int = 0


def find_neighbours(
    query_blocks: QueryBlocks,
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
