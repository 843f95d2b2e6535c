"""k-NN search of a FAISS index, with IVF-Flat inner-product indexes scanned list by list.

FAISS scans an IVF-Flat index one query at a time: each query streams its probed lists from memory and
takes one dot product per vector. For a block of queries it is cheaper to go list by list: read each
probed list once for all the queries of the block that probe it, score them with one matrix product
and keep each query's best k of that list. The probes are FAISS's own (the coarse quantizer's search
at the index's nprobe), and the index's `max_codes` caps a query's scan as FAISS does (lists in probe
order, the last one cut to what is left of the budget), so the candidates and the top k are FAISS's, up
to the float rounding of the scores. Measured against FAISS's search: docs/scale-and-cluster.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import faiss
import numpy as np

if TYPE_CHECKING:
    import torch

MISSING_SIM = np.finfo(np.float32).min  # what FAISS reports for an inner product not found
# A probed list is scored for all the block's queries that probe it with one matrix product, and a
# product of fewer query rows costs more a vector (examples/benchmarks/results/constants.md, on copies).
# So the block grows with nlist / nprobe, between these bounds (the upper one keeps a block's float32
# queries and candidate slots near 600 MB).
QUERIES_A_LIST = 512
MIN_BLOCK_ROWS = 65_536
MAX_BLOCK_ROWS = 262_144


def search(index: faiss.Index, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(sims float32, ids int64), each [len(queries), min(k, ntotal)], best first; ids -1 where none."""
    k = min(k, index.ntotal)
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    if k == 0 or len(queries) == 0:
        return np.zeros((len(queries), k), np.float32), np.zeros((len(queries), k), np.int64)
    if scans_by_list(index):
        return _search_by_list(index, queries, k)
    return index.search(queries, k)


def query_block_rows(nlist: int | None, nprobe: int | None) -> int:
    """Queries to search at once against an index of `nlist` IVF lists probed `nprobe` at a time (None:
    not IVF): QUERIES_A_LIST queries a list on average, within MIN_BLOCK_ROWS..MAX_BLOCK_ROWS."""
    if not nlist or not nprobe:
        return MIN_BLOCK_ROWS
    wanted = -(-QUERIES_A_LIST * nlist // min(nprobe, nlist))
    return int(np.clip(wanted, MIN_BLOCK_ROWS, MAX_BLOCK_ROWS))


def scans_by_list(index: faiss.Index) -> bool:
    """Whether `search` scans `index` list by list: inner-product IVF with raw float32 vectors in memory."""
    return (
        isinstance(index, faiss.IndexIVFFlat)
        and index.metric_type == faiss.METRIC_INNER_PRODUCT
        and isinstance(faiss.downcast_InvertedLists(index.invlists), faiss.ArrayInvertedLists)
    )


def _search_by_list(ivf: faiss.IndexIVFFlat, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    _, probes = ivf.quantizer.search(queries, min(ivf.nprobe, ivf.nlist))
    return scan_lists(ivf, queries, probes, k, ivf.max_codes)


def list_sizes(ivf: faiss.IndexIVF) -> np.ndarray:
    """Rows in each inverted list of `ivf`, int64 [nlist]."""
    return np.array([ivf.invlists.list_size(i) for i in range(ivf.nlist)], dtype=np.int64)


def scanned_rows(sizes: np.ndarray, probes: np.ndarray, max_codes: int = 0) -> np.ndarray:
    """Rows a query scans in each of its `probes` (list numbers, -1 = none) of lists holding `sizes` rows:
    whole lists, or with `max_codes` > 0, lists in probe order until max_codes rows in all (FAISS's
    IndexIVF.max_codes: the list that reaches the budget is cut to its first rows)."""
    rows = np.where(probes >= 0, sizes[probes], 0)
    if max_codes > 0:
        before = np.cumsum(rows, axis=1) - rows
        rows = np.clip(max_codes - before, 0, rows)
    return rows


def scan_lists(
    ivf: faiss.IndexIVFFlat, queries: np.ndarray, probes: np.ndarray, k: int, max_codes: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """The k best (inner product, id) of each float32 query over the rows of its `probes` (list numbers
    [len(queries), nprobe], -1 = none), list by list as `search` does after the probe search; at most
    `max_codes` rows a query when > 0 (`scanned_rows`)."""
    import torch  # imported on the first IVF-Flat scan: FAISS's other searches run without it

    nprobe = probes.shape[1]
    if max_codes > 0:
        limits = scanned_rows(list_sizes(ivf), probes, max_codes)
        probes = np.where(limits > 0, probes, -1)
    # each (query, probe) pair has k slots, in probe order: a query's candidates from all its lists
    sims = np.full((len(queries), nprobe * k), MISSING_SIM, np.float32)
    ids = np.full((len(queries), nprobe * k), -1, np.int64)
    pairs = np.argsort(probes, axis=None, kind="stable")  # flat indexes of probes, grouped by list
    lists = probes.ravel()[pairs]
    for group in np.split(pairs, np.flatnonzero(np.diff(lists)) + 1):
        list_no = int(probes.flat[group[0]])
        size = ivf.invlists.list_size(list_no) if list_no >= 0 else 0
        if size == 0:
            continue
        vectors, row_ids = _list_contents(ivf, list_no, size)
        rows = group // nprobe
        scores = torch.from_numpy(queries[rows]) @ torch.from_numpy(vectors).T
        if max_codes > 0:
            _drop_rows_past_the_budget(scores, limits.flat[group])
        best = torch.topk(scores, min(k, size), dim=1)
        best_sims, best_ids = best.values.numpy(), row_ids[best.indices.numpy()]
        if max_codes > 0:  # a -inf is a row past the query's budget: not found
            best_sims, best_ids = _found_only(best_sims, best_ids)
        slots = (group % nprobe)[:, None] * k + np.arange(best_sims.shape[1])
        sims[rows[:, None], slots] = best_sims
        ids[rows[:, None], slots] = best_ids
    order = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(sims, order, 1), np.take_along_axis(ids, order, 1)


def _drop_rows_past_the_budget(scores: torch.Tensor, limits: np.ndarray) -> None:
    """Scores of a list's rows beyond each query's limit (rows it may scan there) set to -inf, in place."""
    short = np.flatnonzero(limits < scores.shape[1])  # few: only the list where a query's budget ends
    if len(short):
        view = scores.numpy()
        view[short] = np.where(np.arange(scores.shape[1]) < limits[short, None], view[short], -np.inf)


def _found_only(sims: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    found = sims > -np.inf
    return np.where(found, sims, MISSING_SIM), np.where(found, ids, -1)


def _list_contents(ivf: faiss.IndexIVFFlat, list_no: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(vectors float32 [size, d], ids int64 [size]) of one inverted list: views of the index's memory,
    valid while the index lives and is not modified."""
    codes = faiss.rev_swig_ptr(ivf.invlists.get_codes(list_no), size * ivf.code_size)
    row_ids = faiss.rev_swig_ptr(ivf.invlists.get_ids(list_no), size)
    return codes.view(np.float32).reshape(size, ivf.d), row_ids
