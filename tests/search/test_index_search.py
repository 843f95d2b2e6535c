"""The list-by-list scan of IVF-Flat indexes against FAISS's own search and a numpy brute force."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from bitextmine.search.ivf_scan import (
    MAX_BLOCK_ROWS,
    MIN_BLOCK_ROWS,
    MISSING_SIM,
    QUERIES_A_LIST,
    list_sizes,
    query_block_rows,
    scanned_rows,
    scans_by_list,
    search,
)


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def clustered(n: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((32, dim))
    return unit(centres[rng.integers(32, size=n)] + 0.5 * rng.standard_normal((n, dim)))


def ivf_index(factory: str, base: np.ndarray, nprobe: int) -> faiss.Index:
    index = faiss.index_factory(base.shape[1], factory, faiss.METRIC_INNER_PRODUCT)
    index.train(base)
    index.add(base)
    if faiss.try_extract_index_ivf(index) is not None:
        faiss.extract_index_ivf(index).nprobe = nprobe
    return faiss.deserialize_index(faiss.serialize_index(index))  # as `mine` reads it from disk


def probed_brute_force(index: faiss.Index, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top k by inner product over the rows of each query's probed lists, written from scratch: lists
    in probe order, each list's rows in the order they were added (row order here), cut after the
    index's max_codes rows in all when it has a cap."""
    ivf = faiss.extract_index_ivf(index)
    base = index.reconstruct_n(0, index.ntotal)
    _, assigned = ivf.quantizer.search(base, 1)
    _, probes = ivf.quantizer.search(queries, min(ivf.nprobe, ivf.nlist))
    sims = np.full((len(queries), k), MISSING_SIM, np.float32)
    ids = np.full((len(queries), k), -1, np.int64)
    for q, lists in enumerate(probes):
        rows = np.concatenate([np.flatnonzero(assigned[:, 0] == i) for i in lists if i >= 0])
        rows = rows[: ivf.max_codes or len(rows)]
        scores = base[rows] @ queries[q]
        best = np.argsort(-scores, kind="stable")[:k]
        sims[q, : len(best)], ids[q, : len(best)] = scores[best], rows[best]
    return sims, ids


@pytest.mark.integration  # FAISS training over the grid: seconds
@pytest.mark.parametrize("factory", ["IVF16,Flat", "IVF16_HNSW32,Flat"])
@pytest.mark.parametrize("nprobe", [1, 3, 16, 40])
@pytest.mark.parametrize("k", [1, 4, 50])
def test_list_scan_finds_what_faiss_finds(factory, nprobe, k):
    base, queries = clustered(2000, 24, seed=0), clustered(300, 24, seed=1)
    index = ivf_index(factory, base, nprobe)
    assert scans_by_list(index)
    sims, ids = search(index, queries, k)
    want_sims, want_ids = index.search(queries, k)
    np.testing.assert_array_equal(ids, want_ids)  # random floats: no ties
    np.testing.assert_allclose(sims, want_sims, rtol=0, atol=1e-5)
    ref_sims, ref_ids = probed_brute_force(index, queries, k)
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_allclose(sims, ref_sims, rtol=0, atol=1e-5)


def test_fewer_rows_than_k_in_the_probed_lists_are_padded_like_faiss():
    base, queries = clustered(400, 16, seed=2), clustered(50, 16, seed=3)
    index = ivf_index("IVF8,Flat", base, nprobe=1)
    sims, ids = search(index, queries, 300)
    want_sims, want_ids = index.search(queries, 300)
    assert (ids == -1).any()
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_array_equal(sims[ids < 0], want_sims[want_ids < 0])
    np.testing.assert_allclose(sims[ids >= 0], want_sims[want_ids >= 0], rtol=0, atol=1e-5)


def test_empty_lists_and_duplicate_rows():
    """Rows in a few lists only (others empty), each row three times: tied scores, same multiset of hits."""
    rng = np.random.default_rng(4)
    train = clustered(2000, 16, seed=5)
    rows = np.repeat(unit(rng.standard_normal((40, 16)) + 3 * train[0]), 3, axis=0)
    index = faiss.index_factory(16, "IVF32,Flat", faiss.METRIC_INNER_PRODUCT)
    index.train(train)
    index.add(rows)
    index.nprobe = 8
    queries = rows[::7] + 0.01
    assert (list_sizes(faiss.extract_index_ivf(index)) == 0).any()
    sims, ids = search(index, queries, 6)
    want_sims, want_ids = index.search(queries, 6)
    np.testing.assert_allclose(sims, want_sims, rtol=0, atol=1e-5)
    # among ties either copy will do, but every hit is a row with the score reported for it
    found = ids >= 0
    np.testing.assert_array_equal(found, want_ids >= 0)
    exact = np.einsum("nd,nkd->nk", queries, rows[np.where(found, ids, 0)])
    np.testing.assert_allclose(exact[found], sims[found], rtol=0, atol=1e-5)


@pytest.mark.integration  # FAISS training over the grid: seconds
@pytest.mark.parametrize("factory", ["IVF16,Flat", "IVF16_HNSW32,Flat"])
@pytest.mark.parametrize("max_codes", [1, 3, 57, 400, 5000])
def test_max_codes_cuts_the_scan_as_faiss_does(factory, max_codes):
    base, queries = clustered(2000, 24, seed=12), clustered(200, 24, seed=13)
    index = ivf_index(factory, base, nprobe=6)
    faiss.extract_index_ivf(index).max_codes = max_codes
    sims, ids = search(index, queries, 4)
    want_sims, want_ids = index.search(queries, 4)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_allclose(sims, want_sims, rtol=0, atol=1e-5)
    ref_sims, ref_ids = probed_brute_force(index, queries, 4)
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_allclose(sims, ref_sims, rtol=0, atol=1e-5)
    assert (ids[:, 3] == -1).all() == (max_codes < 4)  # fewer rows than k leave empty slots


def test_scanned_rows_stop_at_the_budget_in_probe_order():
    sizes = np.array([5, 0, 7, 2])
    probes = np.array([[2, 0, 3], [1, 3, -1], [0, 2, 3]])
    np.testing.assert_array_equal(scanned_rows(sizes, probes), [[7, 5, 2], [0, 2, 0], [5, 7, 2]])
    np.testing.assert_array_equal(scanned_rows(sizes, probes, 9), [[7, 2, 0], [0, 2, 0], [5, 4, 0]])
    np.testing.assert_array_equal(scanned_rows(sizes, probes, 1), [[1, 0, 0], [0, 1, 0], [1, 0, 0]])


@pytest.mark.integration  # FAISS training: seconds
@pytest.mark.parametrize("factory", ["Flat", "IVF8,SQ8", "IVF8,PQ4np"])
def test_other_indexes_are_searched_by_faiss(factory):
    base, queries = clustered(1000, 16, seed=6), clustered(20, 16, seed=7)
    index = ivf_index(factory, base, nprobe=4)
    assert not scans_by_list(index)
    for got, want in zip(search(index, queries, 5), index.search(queries, 5), strict=True):
        np.testing.assert_array_equal(got, want)


def test_l2_ivf_flat_is_left_to_faiss():
    assert not scans_by_list(faiss.index_factory(16, "IVF8,Flat"))


def test_same_call_same_bytes_and_empty_inputs():
    base, queries = clustered(1000, 16, seed=8), clustered(100, 16, seed=9)
    index = ivf_index("IVF8_HNSW32,Flat", base, nprobe=4)
    first, second = search(index, queries, 4), search(index, queries, 4)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(first, second, strict=True))
    sims, ids = search(index, queries[:0], 4)
    assert sims.shape == ids.shape == (0, 4)
    assert search(index, queries, 0)[1].shape == (100, 0)


@pytest.mark.integration  # FAISS training: seconds
def test_a_query_finds_the_same_whatever_block_it_is_searched_in():
    base, queries = clustered(3000, 32, seed=10), clustered(400, 32, seed=11)
    index = ivf_index("IVF24_HNSW32,Flat", base, nprobe=5)
    whole = search(index, queries, 4)
    parts = [search(index, queries[a : a + 37], 4) for a in range(0, len(queries), 37)]
    np.testing.assert_array_equal(whole[1], np.concatenate([p[1] for p in parts]))
    np.testing.assert_allclose(whole[0], np.concatenate([p[0] for p in parts]), rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    ("nlist", "nprobe", "rows"),
    [
        (None, None, MIN_BLOCK_ROWS),  # not IVF
        (820, 8, MIN_BLOCK_ROWS),  # 52,480 wanted
        (2732, 8, 174_848),  # QUERIES_A_LIST queries a list on average
        (2732, 7, 199_827),  # rounded up
        (8200, 8, MAX_BLOCK_ROWS),
        (64, 100, MIN_BLOCK_ROWS),  # nprobe above nlist probes every list
        (1000, 1, MAX_BLOCK_ROWS),
    ],
)
def test_query_blocks_grow_with_lists_a_probe_within_bounds(nlist, nprobe, rows):
    assert query_block_rows(nlist, nprobe) == rows
    if MIN_BLOCK_ROWS < rows < MAX_BLOCK_ROWS:
        assert rows * nprobe / nlist == pytest.approx(QUERIES_A_LIST, abs=nprobe / nlist)
