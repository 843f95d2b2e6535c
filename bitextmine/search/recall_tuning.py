"""How well a built index finds the exact neighbours, and its search parameters tuned on that: recall@k
against exact search on a sample of queries (the other language's, as mining searches, else the index's
own rows), the fewest probes reaching the target recall, the hits fetched for exact re-ranking, and how
unequal its inverted lists are."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import faiss
import numpy as np

from bitextmine.search.cost import ExactCost
from bitextmine.search.factory import ivf_lists
from bitextmine.search.ivf_scan import list_sizes, search
from bitextmine.search.knn import rerank
from bitextmine.search.sharded import ShardedIndex
from bitextmine.workspace.embeddings import ShardedVectors

RECALL_TOLERANCE = 1e-6
TARGET_RECALL = 0.95
# The recall@4 (other-language queries) that the library's own IVF-Flat must reach, probing more lists,
# else exact search is taken. Unstructured vectors, whose lists group nothing, fall far below it at the
# default probes; on real text it lies between the recall of probes that kept 99% of exact's pairs and
# of fewer that did not, at every size measured, so the real-text default stays as measured
# (examples/benchmarks/results/constants.md, the recall floor).
RECALL_FLOOR = 0.80
# Searches timed for an index's search time, the fastest counting: the first pays one-time costs, and one
# timing on a machine busy with other work can make a search that is several times faster look slower
# than exact search, where an IVF-Flat's time is weighed against it.
TIMING_REPEATS = 3
# PQ codes rank the top 4 poorly; re-ranking 64 candidates exactly recovers them
# (examples/benchmarks/results/constants.md, on copies)
RERANK_FETCH = 64


@dataclass
class RecallProbe:
    """Queries and their exact k-th best cosine over the indexed rows: what recall is measured with."""

    queries: np.ndarray
    source: str  # "self" (rows of the indexed set) or the language the queries come from
    kth_best: np.ndarray
    exact_seconds: float  # exact search of the queries (similarity computation only)


def recall_probe(
    vectors: ShardedVectors, queries: np.ndarray, source: str, k: int, chunk_rows: int = 100_000
) -> RecallProbe:
    """Exact top-k of `queries` over all rows, streamed block by block, kept as their k-th best cosine."""
    k = min(k, len(vectors))
    heap = faiss.ResultHeap(len(queries), k, keep_max=True)
    seconds = 0.0
    for start, block in vectors.blocks(chunk_rows):
        started = time.perf_counter()
        sims, ids = faiss.knn(queries, block, min(k, len(block)), metric=faiss.METRIC_INNER_PRODUCT)
        seconds += time.perf_counter() - started
        heap.add_result(sims, ids + start)
    heap.finalize()
    return RecallProbe(queries, source, heap.D[:, -1].copy(), seconds)


@dataclass(frozen=True)
class Tuning:
    """How a built index is measured and tuned (see `build_index`)."""

    nprobe: int | None = None
    fetch: int | None = None
    queries: tuple[str, np.ndarray] | None = None
    target_recall: float | None = None
    recall_k: int = 4
    recall_queries: int = 1000
    exact_cost: ExactCost | None = None  # exact search as mining runs it (None: FAISS's, timed on the probe)


def sample_probe(
    vectors: ShardedVectors,
    queries: tuple[str, np.ndarray] | None,
    k: int,
    count: int,
    rng: np.random.Generator,
    chunk_rows: int,
) -> RecallProbe | None:
    """A probe of `count` random queries: the other language's (`queries`: its code and vectors), else
    rows of `vectors` itself; None where there are no queries or no rows."""
    if queries is None:
        count = min(count, len(vectors))
        source, x = "self", vectors.take(np.sort(rng.choice(len(vectors), size=count, replace=False)))
    else:
        source, x = queries
        x = x[np.sort(rng.choice(len(x), size=min(count, len(x)), replace=False))]
    if len(x) == 0 or len(vectors) == 0:
        return None
    return recall_probe(vectors, np.ascontiguousarray(x, dtype=np.float32), source, k, chunk_rows)


def choose_nprobe(
    index: faiss.Index,
    factory: str,
    nprobe: int | None,
    probe: RecallProbe | None,
    vectors: ShardedVectors,
    k: int,
    fetch: int,
    target: float,
) -> tuple[int | None, str]:
    """(nprobe, note): the given one, the fewest reaching `target` on other-language queries, or the rule."""
    ivf = _ivf(index)
    if ivf is None:
        return None, ""
    if nprobe is None and probe is not None and probe.source != "self":
        for nprobe in _ladder(ivf.nlist):
            set_nprobe(index, nprobe)
            if measure_recall(index, probe, vectors, k, fetch)[0] >= target:
                return nprobe, ""
        return nprobe, f"recall@{k} stays below {target} even when probing all {ivf.nlist} lists"
    nprobe = nprobe or default_nprobe(factory)
    set_nprobe(index, nprobe)
    return nprobe, ""


def probe_more(
    index: faiss.Index,
    probe: RecallProbe,
    vectors: ShardedVectors,
    k: int,
    fetch: int,
    nprobe: int,
    measured: tuple[float, float],
    exact_seconds: float,
) -> tuple[int, tuple[float, float]]:
    """(nprobe, (recall@k, search seconds)): from `nprobe`, `measured` there (`measure_recall` with
    TIMING_REPEATS), twice the probes while recall@k stays below RECALL_FLOOR, until it reaches it,
    every list is probed, or the search takes `exact_seconds`."""
    nlist = _ivf(index).nlist
    while measured[0] < RECALL_FLOOR and measured[1] < exact_seconds and nprobe < nlist:
        nprobe = min(2 * nprobe, nlist)
        set_nprobe(index, nprobe)
        measured = measure_recall(index, probe, vectors, k, fetch, TIMING_REPEATS)
    return nprobe, measured


def _ladder(nlist: int) -> list[int]:
    """Powers of two from 1 up to nlist, and nlist itself."""
    return sorted({1 << i for i in range(nlist.bit_length()) if 1 << i <= nlist} | {nlist})


def measure_recall(
    index: faiss.Index, probe: RecallProbe, vectors: ShardedVectors, k: int, fetch: int, repeats: int = 1
) -> tuple[float, float]:
    """(recall@k, search seconds): the share of hits, after fetching `fetch` and re-ranking exactly, whose
    exact cosine reaches the exact k-th best, so among tied rows (duplicate sentences) any one will do;
    the fastest of `repeats` timed searches."""
    seconds = math.inf
    for _ in range(repeats):
        started = time.perf_counter()
        _, found = search(index, probe.queries, max(k, fetch))
        seconds = min(seconds, time.perf_counter() - started)
    cos, _ = rerank(probe.queries, found, vectors.take, min(k, len(vectors)))
    hits = np.nan_to_num(cos, nan=-np.inf) >= probe.kth_best[:, None] - RECALL_TOLERANCE
    return float(hits.sum() / cos.size), seconds


# nlist / 8 (at least 64) is the fewest probes that kept recall@4 >= TARGET_RECALL for queries from the
# other language, as in mining, on real and noisy-copy e5 vectors (examples/benchmarks/results/constants.md,
# default probes). Queries drawn from the indexed rows themselves (what build_index reports) need far
# fewer probes, so the recall it reports is an upper bound for mining.
def default_nprobe(factory: str) -> int | None:
    """Lists probed when no other-language queries tune it: nlist / 8, at least 64 (None: not IVF)."""
    nlist = ivf_lists(factory)
    return None if nlist is None else min(nlist, max(64, nlist // 8))


def default_fetch(index: faiss.Index, k: int) -> int:
    """k where the index keeps the vectors (Flat, IVF-Flat), else RERANK_FETCH for exact re-ranking."""
    return k if isinstance(index, faiss.IndexFlat) or is_ivf_flat(index) else max(k, RERANK_FETCH)


def is_ivf_flat(index: faiss.Index) -> bool:
    """Whether the index is IVF-Flat (inside a pre-transform too): its lists keep the full vectors."""
    ivf = faiss.try_extract_index_ivf(index)
    return ivf is not None and isinstance(faiss.downcast_index(ivf), faiss.IndexIVFFlat)


def list_imbalance(index: faiss.Index | ShardedIndex) -> float | None:
    """nlist * sum(size^2) / n^2 over the inverted lists (FAISS's imbalance factor; None: not IVF).

    A query probing lists picked as the rows are spread scans on average this many times n * nprobe / nlist
    rows, so search time grows with it: 1 for equal lists, far more when a few lists hold most rows."""
    if isinstance(index, ShardedIndex):
        sizes = index.list_sizes()
    else:
        ivf = faiss.try_extract_index_ivf(index)
        sizes = None if ivf is None else list_sizes(ivf)
    if sizes is None or sizes.sum() == 0:
        return None
    return round(float(len(sizes) * np.square(sizes, dtype=np.float64).sum() / float(sizes.sum()) ** 2), 3)


def set_nprobe(index: faiss.Index | ShardedIndex, nprobe: int) -> None:
    """Lists to probe per query, also inside an OPQ pre-transform; no-op for non-IVF indexes."""
    _set_search_parameter(index, "nprobe", nprobe)


def set_max_codes(index: faiss.Index | ShardedIndex, max_codes: int) -> None:
    """Rows a query scans at most over its probed lists (FAISS's IndexIVF.max_codes; 0: no cap), in each
    shard of a sharded index; no-op for non-IVF indexes, which scan every row."""
    _set_search_parameter(index, "max_codes", max_codes)


def _set_search_parameter(index: faiss.Index | ShardedIndex, name: str, value: int) -> None:
    target = index if isinstance(index, ShardedIndex) else faiss.try_extract_index_ivf(index)
    if target is not None:
        setattr(target, name, value)


def _ivf(index: faiss.Index | ShardedIndex) -> faiss.IndexIVF | None:
    return faiss.try_extract_index_ivf(index.template if isinstance(index, ShardedIndex) else index)
