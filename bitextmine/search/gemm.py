"""Exact k-nearest neighbours by blocked matrix products, at the hardware's matrix-product rate.

Each block of queries is multiplied with each block of the base in reduced precision (bf16 on CPUs that run
it natively, fp16 on CUDA; fp32 elsewhere), and the `fetch` = k + `extra` best products per query are kept
(`_Best`: by `block_top` on CUDA, by `_Best.scan`'s gathers on CPUs). On a CPU, `mutual_neighbours` searches
two sets both ways from one product matrix. The candidates near the k-th are re-ranked with exact float32
cosines (ties: the smaller base row first), and every query is then *certified*: the products are within a
proven bound `eps` of the float32 cosines (`error_bound`, from how far rounding moved each vector), so when
a query's k-th exact cosine exceeds the best product it discarded by more than `eps`, no discarded row can
belong to its top k. The queries that fail the test (neighbourhoods crowded within `eps`, duplicated rows)
are searched again with four times the candidates until they pass, or until every row is a candidate. The
result is the float32 brute-force answer, whatever the precision of the products.

Memory: a query block of `query_rows` and a base block of `base_rows` make a `query_rows x base_rows`
product matrix (2 bytes an entry in bf16/fp16, 4 in fp32) on the device, plus the base in the compute
precision when it fits `resident_bytes` (else it is converted block by block for each query block) and
then its float32 rows too when they fit `exact_resident_bytes` (else re-ranking gathers them), what
`_Best.scan` gathers (at most 1/`GATHER_SHARE` of a block's products, with their int64 columns: 0.6 of
the product matrix in bf16), the float32 rows of `rerank_rows` candidates while they are re-ranked (for
each set at once where `mutual_neighbours` certifies both in two threads), and each query's `fetch` + 1
best (12 bytes each: for every row of both sets in `mutual_neighbours`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from bitextmine.devices import pick_device
from bitextmine.search.knn import Neighbours, QueryBlocks

GROUP = 64  # columns a group in `block_top` (CUDA)
CPU_GROUP = 16  # columns a group in `_Best.scan` (CPU): fewer to gather where a group's maximum passes
# Candidates kept beyond k: enough that most real queries pass the certificate (a query that fails is
# searched again over the whole base, a product with every row), few enough that keeping and re-ranking
# them costs less than the few searched again (examples/benchmarks/results/constants.md, exact search).
EXTRA = {"cpu": 28, "cuda": 28}
# `_Best.scan` gathers the groups that can enter while they take at most this share of the products' count
GATHER_SHARE = 8
FP32_UNIT = 2.0**-24
UNIT_ROUNDOFF = {torch.float32: FP32_UNIT, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}
CPU_BLOCK = (8_192, 16_384)  # query rows x base rows: a 256 MB bf16 product matrix
# 16 GB fp16 product matrix, its top-k by two levels of group maxima: the fastest of the block shapes and
# groupings timed on an H200 (examples/benchmarks/results/gpu_check.md, search-plans)
CUDA_BLOCK = (16_384, 524_288)
CUDA_TOP_LEVELS = 2
RESIDENT_BYTES = {"cpu": 4 * 2**30}  # base kept whole in the compute precision
# ... and in float32 beside it, for re-ranking, where rounding moved its rows: else every query's dozens of
# candidates are gathered from the memory-mapped shards, a copy and a conversion a row
EXACT_RESIDENT_BYTES = {"cpu": 2 * 2**30}
# On CUDA, shares of the card's memory, an H100's (80 GB) sizes: the product matrix at most 22% (17 GB;
# a smaller card gets blocks of fewer base rows), the base kept whole up to 30% (24 GB)
CUDA_PRODUCT_SHARE = 0.22
CUDA_RESIDENT_SHARE = 0.30
# Candidates re-ranked at once. CPU: 12 MB of float32 rows at 384 dimensions, under glibc's mmap threshold,
# so the memory is reused where larger chunks take fresh pages each time. CUDA: 1.5 GiB, so that a chunk's
# dozen kernels and sync are paid for few chunks (examples/benchmarks/results/constants.md, exact search).
RERANK_CANDIDATES = {"cpu": 2**13, "cuda": 2**20}


class VectorSource(Protocol):
    """Rows of float32 unit vectors: `ShardedVectors` (a workspace language) or `ArrayVectors`."""

    def __len__(self) -> int: ...

    def blocks(self, block_rows: int) -> Iterator[tuple[int, np.ndarray]]: ...

    def take(self, rows: np.ndarray) -> np.ndarray: ...


@dataclass
class ArrayVectors:
    """An in-memory float32 array as a `VectorSource`."""

    array: np.ndarray

    def __len__(self) -> int:
        return len(self.array)

    def blocks(self, block_rows: int) -> Iterator[tuple[int, np.ndarray]]:
        for start in range(0, len(self.array), block_rows):
            yield start, self.array[start : start + block_rows]

    def take(self, rows: np.ndarray) -> np.ndarray:
        return np.take(self.array, rows, axis=0)  # faster than self.array[rows] (results/constants.md)


@dataclass(frozen=True)
class GemmPlan:
    """Where and how the products are computed, and the block sizes that bound their memory."""

    device: torch.device
    dtype: torch.dtype
    query_rows: int
    base_rows: int
    extra: int = EXTRA["cpu"]
    resident_bytes: int = 0
    exact_resident_bytes: int = 0
    group: int = GROUP  # columns a group in `block_top` (CUDA) or `_Best.scan` (CPU)
    levels: int = 1  # rounds of group maxima in `block_top`
    grouped_top: bool = False  # each block's best by `block_top` (CUDA), else by `_Best.scan` (CPU)
    rerank_rows: int = RERANK_CANDIDATES["cpu"]  # candidates re-ranked at once

    @classmethod
    def for_device(cls, device: str = "cpu", precision: str = "auto") -> GemmPlan:
        """On `device` (auto, cpu, cuda, cuda:N): bf16 on CPUs with native bf16 arithmetic, fp16 on CUDA
        (the float16 shards convert exactly), else fp32; `precision` (fp32, bf16, fp16) overrides."""
        dev = pick_device(device)
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        if dtype is None:
            dtype = _default_dtype(dev)
        if dev.type == "cuda":
            card = torch.cuda.get_device_properties(dev).total_memory
            return cls(
                dev,
                dtype,
                *cuda_block(card, dtype),
                EXTRA["cuda"],
                int(CUDA_RESIDENT_SHARE * card),
                levels=CUDA_TOP_LEVELS,
                grouped_top=True,
                rerank_rows=RERANK_CANDIDATES["cuda"],
            )
        return cls(
            dev,
            dtype,
            *CPU_BLOCK,
            EXTRA["cpu"],
            RESIDENT_BYTES.get(dev.type, 0),
            EXACT_RESIDENT_BYTES.get(dev.type, 0),
            group=CPU_GROUP,
        )

    def describe(self) -> str:
        return f"{str(self.dtype).removeprefix('torch.')} products on {self.device}"


def cuda_block(card_bytes: int, dtype: torch.dtype) -> tuple[int, int]:
    """CUDA_BLOCK, its base rows (then its query rows) halved until the product matrix takes at most
    CUDA_PRODUCT_SHARE of a card of `card_bytes`: 24 GB cards get 16,384 x 131,072 fp16 blocks."""
    query_rows, base_rows = CUDA_BLOCK
    entry = torch.finfo(dtype).bits // 8
    while query_rows * base_rows * entry > CUDA_PRODUCT_SHARE * card_bytes and query_rows > 1024:
        if base_rows > 8192:
            base_rows //= 2
        else:
            query_rows //= 2
    return query_rows, base_rows


def _default_dtype(device: torch.device) -> torch.dtype:
    if device.type == "cuda":
        return torch.float16
    from bitextmine.encoder.precision import bf16_is_native

    return torch.bfloat16 if bf16_is_native(device) else torch.float32


def error_bound(
    dtype: torch.dtype,
    dim: int,
    q_norm: torch.Tensor,
    q_error: torch.Tensor,
    base_norm: float,
    base_error: float,
    below_one: torch.Tensor | bool = False,
) -> torch.Tensor:
    """A bound on |product - float32 cosine| for queries of norm `q_norm` that rounding to `dtype` moved
    by `q_error` (L2), against base rows of norm at most `base_norm` moved by at most `base_error`: the
    inputs' rounding (Cauchy-Schwarz on what rounding moved), the float32 sums, the product's rounding to
    `dtype`, and the re-ranked cosine's own rounding to float32. The product's rounding moves a float32
    sum s by at most u |s| (u: the unit roundoff), and by at most u / 2 where |s| < 1 (half the spacing
    of `dtype`'s numbers in [1/2, 1), less below): `below_one` (per query) bounds it so, for the
    queries whose products all lie in (-1, 1) (`_BaseProducts.bound` says which)."""
    sums = dim * FP32_UNIT / (1 - dim * FP32_UNIT)
    inputs = q_error * base_norm + q_norm * base_error + q_error * base_error
    rounded_norms = (q_norm + q_error) * (base_norm + base_error)
    unit = UNIT_ROUNDOFF[dtype]
    below_one = torch.as_tensor(below_one, device=rounded_norms.device)
    rounding = torch.where(below_one, unit / 2, unit * rounded_norms)
    product = rounding + sums * rounded_norms
    return inputs + product + (sums + FP32_UNIT) * q_norm * base_norm + 1e-7


def gemm_neighbours(
    query_blocks: QueryBlocks,
    n_queries: int,
    base: VectorSource,
    k: int,
    plan: GemmPlan,
    progress: Callable[[int], None] | None = None,
) -> Neighbours:
    """The exact k nearest base rows (float32 cosines, ties by row) of every query that `query_blocks`
    yields as (first row, float32 vectors); NaN / -1 where the base has fewer than k rows."""
    found = Neighbours(np.full((n_queries, k), np.nan, np.float32), np.full((n_queries, k), -1, np.int64))
    if len(base) == 0 or k == 0:
        return found
    products = _BaseProducts(base, plan)
    for start, queries in query_blocks():
        for first in range(0, len(queries), plan.query_rows):
            block = queries[first : first + plan.query_rows]
            rows = slice(start + first, start + first + len(block))
            found.sims[rows], found.ids[rows] = _exact_top_k(block, products, base, k, plan)
            if progress:
                progress(len(block))
    return found


def exact_neighbours(
    queries: np.ndarray, base: np.ndarray, k: int, plan: GemmPlan | None = None
) -> Neighbours:
    """The min(k, len(base)) nearest `base` rows of every query, exact (in-memory sets: BUCC splits)."""
    neighbours = gemm_neighbours(
        lambda: [(0, queries)], len(queries), ArrayVectors(base), k, plan or GemmPlan.for_device("cpu")
    )
    width = min(k, len(base))
    return Neighbours(neighbours.sims[:, :width], neighbours.ids[:, :width])


def _exact_top_k(
    queries: np.ndarray, products: _BaseProducts, base: VectorSource, k: int, plan: GemmPlan
) -> tuple[np.ndarray, np.ndarray]:
    fetch = min(k + plan.extra, len(base))
    q = torch.from_numpy(np.ascontiguousarray(queries, dtype=np.float32)).to(plan.device)
    return _certified(q, *products.top(q, fetch), products, k)


def _certified(
    q: torch.Tensor,
    cut: torch.Tensor,
    approx: torch.Tensor,
    ids: torch.Tensor,
    products: _BaseProducts,
    k: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The exact top k of queries `q` from the rows `ids` of their best products `approx` (all above
    `cut`, the best product left out): re-ranked, certified, and searched again with four times the
    candidates where the certificate fails."""
    fetch, rows = ids.shape[1], len(products.base)
    width = min(k, rows)
    eps = products.bound(q, approx, width)  # after a pass over the base: its norms are known
    cos, ids = products.rerank(q, approx, ids, width, eps)
    doubtful = _uncertified(cos, cut, eps)
    while len(doubtful) and fetch < rows:  # four times the candidates, until all rows are
        fetch = min(4 * fetch, rows)
        cut, approx, more = products.top(q[doubtful], fetch)
        cos[doubtful], ids[doubtful] = products.rerank(q[doubtful], approx, more, width, eps[doubtful])
        doubtful = doubtful[_uncertified(cos[doubtful], cut, eps[doubtful])]
    return _pad(cos.cpu().numpy(), ids.cpu().numpy(), k)


def mutual_neighbours(
    x: np.ndarray | VectorSource,
    y: np.ndarray | VectorSource,
    k: int,
    plan: GemmPlan | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[Neighbours, Neighbours]:
    """The exact k nearest y rows of every x row and x rows of every y row (as `gemm_neighbours`, padded
    to k) from one product per pair of blocks: the product of x's row i and y's row j is a candidate for
    both, so it is computed once (two one-way searches compute every product twice). Either set may be
    an array or a `VectorSource` (a workspace language), kept whole in the compute precision where it
    fits `resident_bytes`, else converted block by block. On a CPU; with CUDA's grouped top-k, two
    one-way searches: there the column side costs more than the shared product saves (docs/design.md).
    `progress` counts the rows of both sets, as the products pass x's blocks."""
    plan = plan or GemmPlan.for_device("cpu")
    x, y = _source(x), _source(y)
    if plan.grouped_top or min(len(x), len(y), k) == 0:
        return _one_way(x, y, k, plan, progress), _one_way(y, x, k, plan, progress)
    to_y, to_x = _BaseProducts(y, plan), _BaseProducts(x, plan)
    fetch_y, fetch_x = min(k + plan.extra, len(y)), min(k + plan.extra, len(x))
    rows, columns = _mutual_best(to_x, to_y, fetch_y + 1, fetch_x + 1, plan, progress)
    if torch.get_num_threads() == 1:
        return _certify_all(x, rows, to_y, k, plan), _certify_all(y, columns, to_x, k, plan)
    # Certifying is mostly single-threaded work (gathers, small sorts): the two sides run side by side.
    with ThreadPoolExecutor(1) as pool:
        forward = pool.submit(_certify_all, x, rows, to_y, k, plan)
        backward = _certify_all(y, columns, to_x, k, plan)
        return forward.result(), backward


def _source(vectors: np.ndarray | VectorSource) -> VectorSource:
    return ArrayVectors(vectors) if isinstance(vectors, np.ndarray) else vectors


def _one_way(
    queries: VectorSource,
    base: VectorSource,
    k: int,
    plan: GemmPlan,
    progress: Callable[[int], None] | None,
) -> Neighbours:
    return gemm_neighbours(lambda: queries.blocks(plan.query_rows), len(queries), base, k, plan, progress)


def _mutual_best(
    to_x: _BaseProducts,
    to_y: _BaseProducts,
    keep_y: int,
    keep_x: int,
    plan: GemmPlan,
    progress: Callable[[int], None] | None,
) -> tuple[_Best, _Best]:
    """The best `keep_y` products of each x row with y's rows and `keep_x` of each y row with x's, by
    blocks of `plan.query_rows` x rows and `plan.base_rows` y rows (one product matrix at a time)."""
    rows = _Best(len(to_x.base), keep_y, plan.device)
    columns = _Best(len(to_y.base), keep_x, plan.device)
    counted = _Counter(len(to_x.base) + len(to_y.base), len(to_x.base), progress)
    with _full_precision_sums():
        for a, xs in to_x.blocks(plan.query_rows):
            for b, ys in to_y.blocks(plan.base_rows):
                # x's first block is every y row's first: ranked whole, fastest in memory order
                products = to_y._products(xs, ys, by_block_row=a == 0)
                rows.add(a, products, b, plan)
                columns.add(b, products.T, a, plan)
            counted.reached(a + len(xs))
    return rows, columns


class _Counter:
    """Reports `total` units of work as a pass over `steps` rows advances (one bar for both sides)."""

    def __init__(self, total: int, steps: int, progress: Callable[[int], None] | None) -> None:
        self.total, self.steps, self.progress, self.reported = total, steps, progress, 0

    def reached(self, step: int) -> None:
        due = self.total * step // self.steps
        if self.progress and due > self.reported:
            self.progress(due - self.reported)
        self.reported = max(self.reported, due)


def _certify_all(
    queries: VectorSource, best: _Best, products: _BaseProducts, k: int, plan: GemmPlan
) -> Neighbours:
    """`_certified` over `best`'s owners (the queries), `plan.query_rows` at a time."""
    fetch = min(k + plan.extra, len(products.base))
    found = Neighbours(np.empty((len(queries), k), np.float32), np.empty((len(queries), k), np.int64))
    for a, block in queries.blocks(plan.query_rows):
        rows = slice(a, a + len(block))
        q = torch.from_numpy(np.ascontiguousarray(block, dtype=np.float32)).to(plan.device)
        found.sims[rows], found.ids[rows] = _certified(q, *best.candidates(fetch, rows), products, k)
    return found


def _uncertified(cos: torch.Tensor, cut: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
    """Rows whose k-th cosine does not clear the best discarded product by the error bound."""
    return torch.nonzero(~(cos[:, -1].double() > cut + eps)).flatten()


def _pad(cos: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    missing = k - cos.shape[1]
    if missing:
        cos = np.pad(cos, ((0, 0), (0, missing)), constant_values=np.nan)
        ids = np.pad(ids, ((0, 0), (0, missing)), constant_values=-1)
    return cos, ids


class _BaseProducts:
    """The base in the compute precision on the device (kept whole when it fits `resident_bytes`, else
    converted block by block for each query block), its best products with queries, and exact cosines."""

    def __init__(self, base: VectorSource, plan: GemmPlan) -> None:
        self.base = base
        self.plan = plan
        self.max_norm = 0.0  # of the float32 rows
        self.max_error = 0.0  # L2 distance a row moved when rounded to the compute precision
        self._buffer: torch.Tensor | None = None  # products of a query block and a base block
        entries = len(base) * _dim(base)
        self.resident: torch.Tensor | None = None
        self.exact: torch.Tensor | None = None  # the float32 rows where held whole: the resident, if exact
        if entries * torch.finfo(plan.dtype).bits // 8 <= plan.resident_bytes:
            keep_exact = entries * 4 <= plan.exact_resident_bytes  # else each float32 block is dropped
            converted, exact = [], []
            for _, rows, rounded in self._converted(plan.base_rows):
                converted.append(rounded)
                if keep_exact:
                    exact.append(rows)
            self.resident = torch.cat(converted)
            if self.max_error == 0.0:
                self.exact = self.resident
            elif keep_exact:
                self.exact = torch.cat(exact)

    def _converted(self, rows: int) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
        """(first row, float32 rows, the rows in the compute precision) block by block."""
        for start, block in self.base.blocks(rows):
            tensor = torch.from_numpy(np.ascontiguousarray(block, dtype=np.float32)).to(self.plan.device)
            converted = tensor.to(self.plan.dtype)
            self.max_norm = max(self.max_norm, float(torch.linalg.vector_norm(tensor, dim=1).max()))
            moved = torch.linalg.vector_norm(converted.float() - tensor, dim=1).max()
            self.max_error = max(self.max_error, float(moved))
            yield start, tensor, converted

    def blocks(self, rows: int) -> Iterable[tuple[int, torch.Tensor]]:
        """(first row, rows in the compute precision) for consecutive blocks of at most `rows` rows."""
        if self.resident is not None:
            return ((a, self.resident[a : a + rows]) for a in range(0, len(self.resident), rows))
        return ((a, converted) for a, _, converted in self._converted(rows))

    def top(self, q32: torch.Tensor, fetch: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per query: the best discarded product (-inf if none), and the `fetch` best products (float32)
        and their rows, best first."""
        q = q32.to(self.plan.dtype)
        best = _Best(len(q), fetch + 1, q.device)
        with _full_precision_sums():
            for start, block in self.blocks(self.plan.base_rows):
                best.add(0, self._products(q, block), start, self.plan)
        return best.candidates(fetch)

    def _products(self, q: torch.Tensor, block: torch.Tensor, by_block_row: bool = False) -> torch.Tensor:
        """q @ block.T into a buffer kept for the next block: a new product matrix for every block costs
        the kernel's page faults on each (on 2 CPU cores, about a third of the search's time).
        `by_block_row`: laid out block row by block row (the transpose of block @ q.T)."""
        count = len(q) * len(block)
        if self._buffer is None or self._buffer.numel() < count:
            self._buffer = torch.empty(count, dtype=q.dtype, device=q.device)
        if by_block_row:
            out = self._buffer[:count].view(len(block), len(q))
            return torch.matmul(block, q.T, out=out).T
        return torch.matmul(q, block.T, out=self._buffer[:count].view(len(q), len(block)))

    def rerank(
        self, q32: torch.Tensor, approx: torch.Tensor, ids: torch.Tensor, k: int, eps: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The k candidates (`ids`, their products `approx` best first) of each query with the highest
        float32 cosine, best first, ties broken by the smaller row; `eps` bounds |product - cosine| per
        query (`bound`). `plan.rerank_rows` candidates at a time."""
        chunk = max(1, self.plan.rerank_rows // ids.shape[1])
        parts = [
            self._rerank(q32[a : a + chunk], approx[a : a + chunk], ids[a : a + chunk], k, eps[a : a + chunk])
            for a in range(0, len(ids), chunk)
        ]
        return torch.cat([cos for cos, _ in parts]), torch.cat([top for _, top in parts])

    def _rerank(
        self, q32: torch.Tensor, approx: torch.Tensor, ids: torch.Tensor, k: int, eps: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Candidates whose product is within 2 `eps` of the k-th product (any other has a cosine below k
        candidates' cosines) get a float32 product; those within the float32 sums' error of the k-th of
        these, the cosine summed in float64 and rounded: the same float32 cosine on every device and
        kernel (float32 sums in another order differ in the last bit, which would reorder tied margin
        scores across devices)."""
        near = approx.double() >= (approx[:, k - 1].double() - 2 * eps)[:, None]
        at, column = torch.nonzero(near, as_tuple=True)
        rows = self._exact_rows(ids[at, column])
        queries = torch.index_select(q32, 0, at)  # not q32[at]: results/constants.md, exact search
        sums = torch.full(ids.shape, -torch.inf, dtype=torch.float32, device=ids.device)
        sums[at, column] = torch.linalg.vecdot(queries, rows)
        kth = torch.topk(sums, k, dim=1).values[:, -1].double()
        exact = sums[at, column].double() >= (kth - 2 * self._sum_error(q32))[at]
        at, column, rows, queries = at[exact], column[exact], rows[exact], queries[exact]
        cos = torch.full(ids.shape, -torch.inf, dtype=torch.float32, device=ids.device)
        cos[at, column] = (queries.double() * rows.double()).sum(dim=1).float()
        ids, by_row = torch.sort(ids, dim=1)
        cos = torch.gather(cos, 1, by_row)
        order = torch.sort(-cos, dim=1, stable=True).indices[:, :k]
        return torch.gather(cos, 1, order), torch.gather(ids, 1, order)

    def _sum_error(self, q32: torch.Tensor) -> torch.Tensor:
        """A bound on |float32 product - cosine| (any order of the float32 sums), plus a float32 unit, so
        that a candidate outside twice the bound cannot even round to the k-th cosine."""
        dim = q32.shape[1]
        sums = dim * FP32_UNIT / (1 - dim * FP32_UNIT)
        norm = torch.linalg.vector_norm(q32.double(), dim=1)
        return (sums + 2 * FP32_UNIT) * norm * self.max_norm + 1e-7

    def _exact_rows(self, ids: torch.Tensor) -> torch.Tensor:
        """float32 [len(ids), dim] base rows: from memory where they are held whole."""
        if self.exact is not None:
            return torch.index_select(self.exact, 0, ids).float()  # not self.exact[ids]: results/constants.md
        return torch.from_numpy(self.base.take(ids.cpu().numpy())).to(ids.device)

    def bound(self, q32: torch.Tensor, approx: torch.Tensor, k: int) -> torch.Tensor:
        """Each query's error bound (`error_bound`) against every base row, from its best products
        `approx` (best first): the tighter rounding term where its best product is below 1 and its k-th
        above -1/2. Rounding is monotone, so every sum below a product under 1 is under 1 too, and the k
        best above -1/2: a product at -1 or below, whose sum may round farther, lies too far beneath
        them to be re-ranked or to fail the certificate (`_certified`) on its account."""
        q64 = q32.double()
        moved = torch.linalg.vector_norm(q32.to(self.plan.dtype).double() - q64, dim=1)
        norm = torch.linalg.vector_norm(q64, dim=1)
        below_one = (approx[:, 0] < 1) & (approx[:, k - 1] > -0.5)
        return error_bound(
            self.plan.dtype, q32.shape[1], norm, moved, self.max_norm, self.max_error, below_one
        )


class _Best:
    """The `keep` best products of each of `rows` owners (queries, or base rows in `mutual_neighbours`) so
    far and the rows they came from, best first; -inf and -1 until that many are seen."""

    def __init__(self, rows: int, keep: int, device: torch.device) -> None:
        self.values = torch.full((rows, keep), -torch.inf, dtype=torch.float32, device=device)
        self.ids = torch.full((rows, keep), -1, dtype=torch.int64, device=device)

    @property
    def keep(self) -> int:
        return self.values.shape[1]

    def candidates(
        self, fetch: int, owners: slice = slice(None)
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`owners`' best product left out when `fetch` are kept (float64), and the `fetch` best
        products and their rows."""
        return self.values[owners, fetch].double(), self.values[owners, :fetch], self.ids[owners, :fetch]

    def add(self, first: int, products: torch.Tensor, offset: int, plan: GemmPlan) -> None:
        """Merge a block of products (row i: owner `first` + i's products with rows `offset`..): its
        best by `block_top` where `plan.grouped_top` (CUDA: several times faster than torch.topk,
        gpu_check.md's stage_ms), else by `scan` (gathers tuned on CPUs)."""
        if plan.grouped_top:
            values, ids = block_top(products, self.keep, plan.group, plan.levels)
            self.merge(slice(first, first + len(products)), values, ids + offset)
        else:
            self.scan(first, products, offset, plan.group)

    def merge(self, owners: slice | torch.Tensor, values: torch.Tensor, ids: torch.Tensor) -> None:
        """Merge candidates (`values`, `ids`: a row per owner in `owners`) into those owners' best."""
        values = torch.cat([self.values[owners], values.float()], dim=1)
        ids = torch.cat([self.ids[owners], ids], dim=1)
        values, order = torch.topk(values, self.keep, dim=1)
        self.values[owners], self.ids[owners] = values, torch.gather(ids, 1, order)

    def scan(self, first: int, products: torch.Tensor, offset: int, group: int) -> None:
        """Merge a block of products: row i holds owner `first` + i's products with rows `offset`.. .

        Once every owner of the block has `keep` values, only products above its `keep`-th can enter.
        The block's columns are split into groups of `group` (every (width / group)-th column, as in
        `block_top`); one max pass gives each group's maximum, and only the groups whose maximum beats
        their owner's `keep`-th are gathered, only their products above it merged. Past the first
        blocks, few are."""
        owners = slice(first, first + len(products))
        width = products.shape[1]
        floor = self.values[owners, -1]
        if width % group or width <= self.keep or bool(torch.isinf(floor).any()):
            self._merge_top(owners, products, offset)
            return
        maxima = _group_maxima(products, group)
        # by owner, then column; a transposed block's maxima are transposed, and torch.nonzero over them
        # is slower than making the mask contiguous first
        passing = (maxima > floor[:, None]).contiguous()
        row, column = torch.nonzero(passing, as_tuple=True)
        if len(row) * group > products.numel() // GATHER_SHARE:
            self._merge_top(owners, products, offset)  # early blocks: gathering would cost more
            return
        columns = column[:, None] + (width // group) * torch.arange(group, device=products.device)
        values = products[row[:, None], columns]
        hit, place = torch.nonzero(values > floor[row, None], as_tuple=True)
        row, values, columns = row[hit], values[hit, place], columns[hit, place]
        if not len(row):
            return
        counts = torch.bincount(row, minlength=len(products))
        if int(counts.max()) * int(torch.count_nonzero(counts)) > products.numel() // GATHER_SHARE:
            self._merge_top(owners, products, offset)  # one crowded owner: its row would pad all
        else:
            self._merge_entries(owners, counts, values, columns + offset)

    def _merge_top(self, owners: slice, products: torch.Tensor, offset: int) -> None:
        values, ids = torch.topk(products.contiguous(), min(self.keep, products.shape[1]), dim=1)
        self.merge(owners, values, ids + offset)

    def _merge_entries(
        self, owners: slice, counts: torch.Tensor, values: torch.Tensor, ids: torch.Tensor
    ) -> None:
        """Merge single candidates listed by owner (`counts[i]` of them for owner `owners.start` + i, in
        order): each owner's laid side by side in one row, padded with -inf."""
        present = torch.nonzero(counts).flatten()
        counts = counts[present]
        slot = torch.repeat_interleave(torch.arange(len(present), device=values.device), counts)
        starts = torch.cumsum(counts, 0) - counts
        place = torch.arange(len(values), device=values.device) - starts[slot]
        shape = (len(present), int(counts.max()))
        padded = torch.full(shape, -torch.inf, dtype=torch.float32, device=values.device)
        padded_ids = torch.full(shape, -1, dtype=torch.int64, device=values.device)
        padded[slot, place], padded_ids[slot, place] = values.float(), ids
        self.merge(present + owners.start, padded, padded_ids)


def _group_maxima(products: torch.Tensor, group: int) -> torch.Tensor:
    """[rows, width / group]: the maximum of each row's columns s, s + width / group, ... (`group` of
    them); for a transposed matrix (`mutual_neighbours`' column side), reduced in its memory order, far
    faster on a CPU than across it (examples/benchmarks/results/constants.md, exact search)."""
    rows, width = products.shape
    if products.is_contiguous() or not products.T.is_contiguous():
        return products.view(rows, group, width // group).amax(dim=1)
    return products.T.view(group, width // group, rows).amax(dim=0).T


def block_top(
    products: torch.Tensor, keep: int, group: int = GROUP, levels: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """torch.topk(products, keep, dim=1) (up to the order of equal values), in cheap steps where a row is
    long: split a row's columns into groups of `group`, and the `keep` groups with the highest maximum
    hold its `keep` best values (any group outside them has `keep` groups above it, each with a larger
    value), so one max pass and a top-k over the group maxima leave `keep * group` columns to rank.
    A group takes every (width / group)-th column, so that its maximum is an elementwise maximum of
    contiguous slices (`_group_maxima`, also for a transposed matrix), several times faster than groups
    of consecutive columns on a GPU (gpu_check.md's stage_ms). With `levels` > 1 the top-k over the
    group maxima is itself taken by groups."""
    width = products.shape[1]
    if width % group or width <= keep * group:
        return torch.topk(products, min(keep, width), dim=1)
    stride = width // group
    maxima = _group_maxima(products, group)
    if levels > 1:
        _, best_groups = block_top(maxima, keep, group, levels - 1)
    else:
        _, best_groups = torch.topk(maxima, keep, dim=1)
    offsets = stride * torch.arange(group, device=products.device)
    columns = (best_groups[:, :, None] + offsets).flatten(1)
    values, picked = torch.topk(torch.gather(products, 1, columns), keep, dim=1)
    return values, torch.gather(columns, 1, picked)


@contextlib.contextmanager
def _full_precision_sums() -> Iterator[None]:
    """cuBLAS may sum fp16/bf16 products in reduced precision unless told not to; `error_bound`
    assumes float32 sums."""
    matmul = torch.backends.cuda.matmul
    saved = matmul.allow_fp16_reduced_precision_reduction, matmul.allow_bf16_reduced_precision_reduction
    matmul.allow_fp16_reduced_precision_reduction = False
    matmul.allow_bf16_reduced_precision_reduction = False
    try:
        yield
    finally:
        matmul.allow_fp16_reduced_precision_reduction, matmul.allow_bf16_reduced_precision_reduction = saved


def _dim(base: VectorSource) -> int:
    return int(base.take(np.zeros(1, np.int64)).shape[1]) if len(base) else 0
