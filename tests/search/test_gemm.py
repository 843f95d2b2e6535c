"""Exact search by matrix products (search/gemm.py) against a brute-force float32 reference."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from bitextmine.mining.arrays import mine_arrays
from bitextmine.mining.selection import Candidates, select_candidates
from bitextmine.search.gemm import (
    CUDA_PRODUCT_SHARE,
    UNIT_ROUNDOFF,
    ArrayVectors,
    GemmPlan,
    _Best,
    block_top,
    cuda_block,
    error_bound,
    exact_neighbours,
    gemm_neighbours,
    mutual_neighbours,
)
from bitextmine.search.knn import SearchShard, exact_knn, find_neighbours
from tests.helpers import clustered_unit, random_unit, require_shared


def as_stored(x: np.ndarray) -> np.ndarray:
    """Vectors as the embedding shards hold them: float16 values."""
    return x.astype(np.float16).astype(np.float32)


def reference(queries: np.ndarray, base: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Brute force in float64: the k best cosines, ties broken by the smaller row."""
    cos = queries.astype(np.float64) @ base.astype(np.float64).T
    rows = np.broadcast_to(np.arange(len(base)), cos.shape)
    order = np.lexsort((rows, -cos), axis=1)[:, :k]
    return np.take_along_axis(cos, order, 1), order


def assert_equally_near(queries: np.ndarray, base: np.ndarray, found_ids: np.ndarray, k: int) -> None:
    """The reference's ids, or where two cosines differ by less than float32 rounding (1e-6: real vectors
    have such near-ties), ids whose exact cosines are the reference's, position by position."""
    want_cos, want_ids = reference(queries, base, k)
    rows = np.flatnonzero((found_ids != want_ids).any(axis=1))
    found_cos = np.einsum(
        "nd,nkd->nk", queries[rows].astype(np.float64), base[found_ids[rows]].astype(np.float64)
    )
    np.testing.assert_allclose(found_cos, want_cos[rows], atol=1e-6)
    assert len(rows) <= 0.01 * len(queries)


def same_pairs(mined: Candidates) -> set[tuple[int, int]]:
    return set(zip(mined.src.tolist(), mined.tgt.tolist(), strict=True))


def plan(
    precision: str,
    query_rows: int = 64,
    base_rows: int = 100,
    extra: int = 4,
    group: int = 4,
    grouped_top: bool = False,
) -> GemmPlan:
    """Small blocks, so that every test crosses block boundaries on both sides, small groups, so that
    `_Best.scan` (or with `grouped_top`, CUDA's `block_top`) takes groups in blocks of 100 (a block whose
    width `group` does not divide is ranked whole), and a few queries re-ranked at a time."""
    default = GemmPlan.for_device("cpu", precision)
    return GemmPlan(
        default.device,
        default.dtype,
        query_rows,
        base_rows,
        extra,
        default.resident_bytes,
        default.exact_resident_bytes,
        group=group,
        levels=2 if grouped_top else 1,
        grouped_top=grouped_top,
        rerank_rows=64,
    )


def search(queries: np.ndarray, base: np.ndarray, k: int, gemm: GemmPlan):
    return gemm_neighbours(lambda: [(0, queries)], len(queries), ArrayVectors(base), k, gemm)


def random_and_clustered(rows: int, other_rows: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Two pairs of stored-precision sets of 48 dimensions: random, then in 8 clusters."""
    random = [random_unit(n, 48, seed=seed + i) for i, n in enumerate((rows, other_rows))]
    clustered = [
        clustered_unit(n, 48, clusters=8, seed=seed + 2 + i) for i, n in enumerate((rows, other_rows))
    ]
    return [(as_stored(a), as_stored(b)) for a, b in (random, clustered)]


def assert_reference(found, queries: np.ndarray, base: np.ndarray, k: int) -> None:
    want_cos, want_ids = reference(queries, base, k)
    np.testing.assert_array_equal(found.ids, want_ids)
    np.testing.assert_allclose(found.sims, want_cos, atol=1e-6)


@pytest.mark.integration  # seconds of search over the grid
@pytest.mark.parametrize("grouped_top", [False, True])
@pytest.mark.parametrize("precision", ["bf16", "fp32"])
@pytest.mark.parametrize("k", [1, 4, 9])
def test_random_and_clustered_vectors_give_the_reference_neighbours(precision, k, grouped_top):
    for base, queries in random_and_clustered(700, 300, seed=1):
        found = search(queries, base, k, plan(precision, grouped_top=grouped_top))
        assert_reference(found, queries, base, k)


@pytest.fixture
def torch_threads(request):
    saved = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(saved)


@pytest.mark.integration  # seconds of search over the grid
@pytest.mark.parametrize("torch_threads", [1, 2], indirect=True)  # 2: the sides certified side by side
@pytest.mark.parametrize("precision", ["bf16", "fp32"])
@pytest.mark.parametrize("k", [1, 4, 9])
def test_mutual_neighbours_are_the_reference_both_ways(precision, k, torch_threads):
    for x, y in random_and_clustered(700, 450, seed=21):
        fwd, bwd = mutual_neighbours(x, y, k, plan(precision))
        assert_reference(fwd, x, y, k)
        assert_reference(bwd, y, x, k)


class CountedTakes(ArrayVectors):
    takes = 0

    def take(self, rows: np.ndarray) -> np.ndarray:
        self.takes += 1
        return super().take(rows)


@pytest.mark.parametrize("exact_bytes", [0, None])
def test_resident_sets_rerank_from_their_float32_copy_or_else_from_the_source(exact_bytes):
    for x, y in random_and_clustered(400, 300, seed=33):
        gemm = plan("bf16")
        gemm = gemm if exact_bytes is None else replace(gemm, exact_resident_bytes=exact_bytes)
        xs, ys = CountedTakes(x), CountedTakes(y)
        fwd, bwd = mutual_neighbours(xs, ys, 4, gemm)
        assert_reference(fwd, x, y, 4)
        assert_reference(bwd, y, x, 4)
        reranked_from_source = xs.takes > 1 and ys.takes > 1  # beyond the one row `_dim` reads
        assert reranked_from_source == (exact_bytes == 0)


def test_mutual_neighbours_stream_sets_too_large_to_keep_and_count_both_sides():
    for x, y in random_and_clustered(500, 350, seed=31):
        counted: list[int] = []
        streamed = replace(plan("bf16"), resident_bytes=0)  # every block converted as it is used
        fwd, bwd = mutual_neighbours(ArrayVectors(x), ArrayVectors(y), 4, streamed, counted.append)
        assert_reference(fwd, x, y, 4)
        assert_reference(bwd, y, x, 4)
        assert sum(counted) == len(x) + len(y)


def test_mutual_neighbours_break_ties_by_the_smaller_row_both_ways():
    x, y = as_stored(random_unit(300, 32, seed=25)), as_stored(random_unit(500, 32, seed=26))
    y[[7, 130, 260, 499]] = y[260]  # four identical rows of y in four blocks
    x[[3, 70, 200]] = y[260]  # three rows of x equal to them, in three blocks
    fwd, bwd = mutual_neighbours(x, y, 4, plan("bf16", extra=0))
    np.testing.assert_array_equal(fwd.ids[[3, 70, 200]], [[7, 130, 260, 499]] * 3)
    np.testing.assert_array_equal(bwd.ids[[7, 130, 260, 499], :3], [[3, 70, 200]] * 4)
    np.testing.assert_array_equal(fwd.ids, reference(x, y, 4)[1])
    np.testing.assert_array_equal(bwd.ids, reference(y, x, 4)[1])


def test_mutual_neighbours_of_sets_smaller_than_k_pad():
    x, y = as_stored(random_unit(3, 8, seed=27)), as_stored(random_unit(40, 8, seed=28))
    fwd, bwd = mutual_neighbours(x, y, 5, plan("bf16"))
    np.testing.assert_array_equal(fwd.ids, reference(x, y, 5)[1])
    assert (bwd.ids[:, 3:] == -1).all() and np.isnan(bwd.sims[:, 3:]).all()
    np.testing.assert_array_equal(bwd.ids[:, :3], reference(y, x, 3)[1])


SCAN_CASES = {  # products of 64 rows, their blocks' `_Best.scan` calls: (gathered, ranked whole)
    "gathered": (3, 1),  # random: the first block ranked whole, then only the groups that can enter
    "ranked whole": (0, 4),  # rising block after block: every group can enter
    "one crowded row": (0, 4),  # one row rising: it alone would pad every row
}


def _scan_case(case: str) -> torch.Tensor:
    random = torch.rand(64, 2048, generator=torch.Generator().manual_seed(29))
    if case == "ranked whole":
        return torch.arange(64 * 2048, dtype=torch.float32).view(64, 2048) / 2**17
    if case == "one crowded row":
        random[3] = torch.arange(2048) / 2048 + 1
    return random


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("case", list(SCAN_CASES))
def test_scanning_blocks_keeps_each_rows_best_products(case, transposed, monkeypatch):
    """`_Best.scan`, block by block, against torch.topk of whole rows."""
    calls = []
    for method in ("_merge_entries", "_merge_top"):
        original = getattr(_Best, method)
        monkeypatch.setattr(
            _Best, method, lambda self, *a, o=original, m=method: calls.append(m) or o(self, *a)
        )
    products = _scan_case(case).to(torch.bfloat16)
    best = _Best(64, 9, products.device)
    for start in range(0, 2048, 512):
        block = products[:, start : start + 512]
        best.scan(0, block.T.contiguous().T if transposed else block, start, 8)  # transposed: a column side
    want, _ = torch.topk(products.float(), 9, dim=1)
    assert torch.equal(best.values, want)
    assert torch.equal(torch.gather(products.float(), 1, best.ids), best.values)
    assert (calls.count("_merge_entries"), calls.count("_merge_top")) == SCAN_CASES[case]


@pytest.mark.parametrize("transposed", [False, True])
def test_block_top_by_groups_equals_a_full_top_k(transposed):
    """Rows of a product block, or (transposed: `mutual_neighbours`' column side) rows of its transpose."""
    products = as_stored(clustered_unit(300, 64, seed=16)) @ as_stored(random_unit(4096, 64)).T
    products = torch.from_numpy(products).to(torch.bfloat16)
    if transposed:
        products = products.T.contiguous().T
    want_values, _ = torch.topk(products, 9, dim=1)
    for group, levels in ((64, 1), (16, 2), (8, 3)):  # 2 and 3 levels: group maxima taken by groups
        values, ids = block_top(products, 9, group, levels)
        assert torch.equal(values, want_values), (group, levels)
        assert torch.equal(torch.gather(products, 1, ids), values)


def test_long_base_blocks_take_the_grouped_top_k_and_stay_exact():
    base, queries = as_stored(clustered_unit(9000, 48, seed=17)), as_stored(clustered_unit(200, 48, seed=18))
    found = search(queries, base, 4, plan("bf16", query_rows=128, base_rows=4096))
    np.testing.assert_array_equal(found.ids, reference(queries, base, 4)[1])


def test_a_base_streamed_block_by_block_gives_the_same_neighbours():
    base, queries = as_stored(clustered_unit(3000, 48, seed=19)), as_stored(clustered_unit(300, 48, seed=20))
    streamed = plan("bf16", query_rows=128, base_rows=512)
    streamed = GemmPlan(streamed.device, streamed.dtype, 128, 512, 4, resident_bytes=0)
    found = search(queries, base, 4, streamed)
    np.testing.assert_array_equal(found.ids, reference(queries, base, 4)[1])


def test_ties_go_to_the_smaller_row_in_every_block():
    base = as_stored(random_unit(500, 32, seed=5))
    base[[7, 130, 260, 499]] = base[260]  # four identical rows in four base blocks
    queries = np.concatenate([base[[260]], as_stored(random_unit(50, 32, seed=6))])
    found = search(queries, base, 4, plan("bf16", extra=0))
    np.testing.assert_array_equal(found.ids[0], [7, 130, 260, 499])
    np.testing.assert_array_equal(found.ids, reference(queries, base, 4)[1])


def test_more_duplicates_than_candidates_still_resolve_exactly():
    base = as_stored(random_unit(300, 16, seed=7))
    base[100:200] = base[50]  # 101 tied rows: far more than fetch = k + extra
    queries = base[[50, 150]]
    found = search(queries, base, 4, plan("bf16", extra=2))
    np.testing.assert_array_equal(found.ids, [[50, 100, 101, 102]] * 2)


def test_near_ties_within_float32_rounding_resolve_as_rounded_float64_sums():
    # rows a few float32 steps apart: a float32 product puts three in four of these queries' top 4 in
    # another order or set than the rounded float64 sums, which alone decide (ties: the smaller row)
    rng = np.random.default_rng(12)
    centre = random_unit(1, 64, seed=11)[0]
    base = (centre + rng.integers(-3, 4, size=(400, 64)) * 6e-8).astype(np.float32)
    queries = np.concatenate([base[:50], random_unit(50, 64, seed=13)]).astype(np.float32)
    found = search(queries, base, 4, plan("bf16", extra=3))
    cos32 = (queries.astype(np.float64) @ base.astype(np.float64).T).astype(np.float32)
    order = np.lexsort((np.broadcast_to(np.arange(len(base)), cos32.shape), -cos32), axis=1)[:, :4]
    np.testing.assert_array_equal(found.ids, order)
    np.testing.assert_array_equal(found.sims, np.take_along_axis(cos32, order, 1))


def test_a_nan_query_ends_once_every_row_is_a_candidate():
    # a NaN cosine is never certified: the re-search must stop when nothing is left to discard
    base, queries = as_stored(random_unit(200, 8, seed=14)), as_stored(random_unit(3, 8, seed=15))
    queries[1] = np.nan
    found = search(queries, base, 4, plan("bf16", extra=1))
    np.testing.assert_array_equal(found.ids[[0, 2]], reference(queries[[0, 2]], base, 4)[1])


def test_fewer_base_rows_than_k_pad_with_nan_and_minus_one():
    base, queries = as_stored(random_unit(3, 8, seed=8)), as_stored(random_unit(5, 8, seed=9))
    found = search(queries, base, 5, plan("bf16"))
    assert (found.ids[:, 3:] == -1).all() and np.isnan(found.sims[:, 3:]).all()
    np.testing.assert_array_equal(found.ids[:, :3], reference(queries, base, 3)[1])
    assert exact_neighbours(queries, base, 5).ids.shape == (5, 3)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_products_stay_within_the_error_bound(dtype):
    queries = torch.from_numpy(as_stored(clustered_unit(400, 384, seed=10)) * 1.001)  # not float16 values
    base = torch.from_numpy(as_stored(clustered_unit(400, 384, seed=11)))
    products = (queries.to(dtype) @ base.to(dtype).T).double()
    cosines = (queries.double() @ base.double().T).float().double()  # the re-ranked float32 cosine
    q_error = torch.linalg.vector_norm(queries.to(dtype).double() - queries.double(), dim=1)
    b_error = float(torch.linalg.vector_norm(base.to(dtype).double() - base.double(), dim=1).max())
    q_norm = torch.linalg.vector_norm(queries.double(), dim=1)
    b_norm = float(torch.linalg.vector_norm(base.double(), dim=1).max())
    bound = error_bound(dtype, 384, q_norm, q_error, b_norm, b_error)
    assert ((products - cosines).abs() <= bound[:, None]).all()
    assert float(bound.max()) < {torch.bfloat16: 0.01, torch.float16: 0.002, torch.float32: 1e-4}[dtype]
    below_one = products.abs().max(dim=1).values < 1  # every product of the query in (-1, 1)
    assert below_one.float().mean() > 0.9
    tight = error_bound(dtype, 384, q_norm, q_error, b_norm, b_error, below_one)
    assert ((products - cosines)[below_one].abs() <= tight[below_one, None]).all()
    assert (tight[below_one] < bound[below_one]).all() and torch.equal(tight[~below_one], bound[~below_one])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rounding_a_sum_below_one_moves_it_by_at_most_half_the_unit_roundoff(dtype):
    """`error_bound`'s `below_one` premise, on float32 sums across (-1, 1), densest near +-1 and at
    the midpoints between representable values (where rounding moves them farthest)."""
    edges = 1 - torch.logspace(-9, 0, 20_000, dtype=torch.float64)
    spacing = torch.finfo(dtype).eps / 2  # of the numbers in [1/2, 1)
    midpoints = 0.5 + (torch.arange(int(0.5 / spacing)) + 0.5) * spacing
    sums = torch.cat([edges, -edges, midpoints, torch.rand(100_000, dtype=torch.float64) * 2 - 1]).float()
    sums = sums[sums.abs() < 1]
    moved = (sums.to(dtype).double() - sums.double()).abs()
    assert float(moved.max()) <= UNIT_ROUNDOFF[dtype] / 2
    assert float(moved.max()) > 0.9 * UNIT_ROUNDOFF[dtype] / 2  # the bound is reached: it is not loose


def _faiss_mined(src: np.ndarray, tgt: np.ndarray, scratch: Path, k: int = 4) -> Candidates:
    """The float32 FAISS reference: IndexFlatIP neighbours, re-ranked, selected as mine does."""

    def neighbours(queries: np.ndarray, base: np.ndarray):
        shard = SearchShard(lambda q, n: exact_knn(q, base, n))
        return find_neighbours(lambda: [(0, queries)], len(queries), [shard], lambda i: base[i], k)

    fwd, bwd = neighbours(src, tgt), neighbours(tgt, src)
    selected = select_candidates(
        lambda: [(0, fwd)], lambda: [(0, bwd)], (len(src), len(tgt)), "ratio", "max", scratch
    )
    return Candidates.from_records(selected.records)


def test_mined_pairs_equal_the_faiss_float32_reference(tmp_path):
    src = as_stored(clustered_unit(900, 64, clusters=16, seed=12))
    tgt = as_stored(np.concatenate([src[:300] + 0.05 * random_unit(300, 64, seed=13), random_unit(500, 64)]))
    tgt = as_stored(tgt / np.linalg.norm(tgt, axis=1, keepdims=True))
    mined, want = mine_arrays(src, tgt), _faiss_mined(src, tgt, tmp_path)
    np.testing.assert_array_equal(mined.src, want.src)
    np.testing.assert_array_equal(mined.tgt, want.tgt)
    np.testing.assert_allclose(mined.score, want.score, rtol=1e-6)


@pytest.mark.integration
def test_real_sentence_vectors_give_the_reference_neighbours_and_pairs(e5_dir, tmp_path):
    from bitextmine.encoder.encoder import SentenceEncoder

    bucc = require_shared("data/bucc-like/de-en")
    encoder = SentenceEncoder.load(str(e5_dir), precision="bf16")
    sides = []
    for lang in ("de", "en"):
        lines = (bucc / f"de-en.dev.{lang}").read_text().splitlines()[:800]
        sides.append(as_stored(encoder.encode([line.split("\t", 1)[1] for line in lines]).vectors))
    de, en = sides
    found = search(de, en, 4, plan("bf16", query_rows=256, base_rows=300, extra=28))
    assert_equally_near(de, en, found.ids, 4)
    mined, want = mine_arrays(de, en), _faiss_mined(de, en, tmp_path)
    assert same_pairs(mined) == same_pairs(want)  # the order of pairs whose scores tie may differ
    np.testing.assert_allclose(np.sort(mined.score), np.sort(want.score), rtol=1e-6)


@pytest.mark.parametrize(
    ("card_bytes", "dtype", "block"),
    [
        (81_559 * 2**20, torch.float16, (16_384, 524_288)),  # an H100: the tuned block
        (81_559 * 2**20, torch.float32, (16_384, 262_144)),
        (24_564 * 2**20, torch.float16, (16_384, 131_072)),  # 24 GB cards
        (4 * 10**9, torch.float16, (16_384, 16_384)),
        (5 * 10**8, torch.float16, (4_096, 8_192)),  # then fewer query rows
    ],
)
def test_cuda_blocks_take_at_most_a_share_of_the_cards_memory(card_bytes, dtype, block):
    assert cuda_block(card_bytes, dtype) == block
    assert block[0] * block[1] * torch.finfo(dtype).bits // 8 <= CUDA_PRODUCT_SHARE * card_bytes


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_cuda_products_give_the_cpu_neighbours(precision):
    base = as_stored(clustered_unit(5000, 384, seed=14))
    queries = as_stored(clustered_unit(2000, 384, seed=15))
    gpu = replace(GemmPlan.for_device("cuda", precision), query_rows=512, base_rows=1024, extra=4)
    found = search(queries, base, 4, gpu)
    np.testing.assert_array_equal(found.ids, reference(queries, base, 4)[1])
    np.testing.assert_array_equal(found.ids, search(queries, base, 4, plan("bf16")).ids)
    fwd, bwd = mutual_neighbours(queries, base, 4, replace(gpu, query_rows=1024))
    np.testing.assert_array_equal(fwd.ids, found.ids)
    np.testing.assert_array_equal(bwd.ids, reference(base, queries, 4)[1])
