"""Mining vs an independent brute-force numpy miner, and properties of the candidate selection."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bitextmine.errors import BitextmineError
from bitextmine.mining.arrays import mine_arrays
from bitextmine.mining.margin import MARGINS
from bitextmine.mining.selection import STRATEGIES
from bitextmine.search.knn import SearchShard, exact_knn, find_neighbours, merge_top_k


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def bitext(n_src: int, n_tgt: int, pairs: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random unit vectors; the first `pairs` rows of each side are noisy translations of each other."""
    rng = np.random.default_rng(seed)
    src = rng.normal(size=(n_src, dim))
    tgt = rng.normal(size=(n_tgt, dim))
    tgt[:pairs] = src[:pairs] + 0.4 * rng.normal(size=(pairs, dim))
    return unit(src).astype(np.float32), unit(tgt).astype(np.float32)


def brute_force(src, tgt, k, margin, strategy):
    """Full similarity matrix, explicit loops: the reference the miner must reproduce."""
    sim = src.astype(np.float64) @ tgt.astype(np.float64).T
    k_f, k_b = min(k, sim.shape[1]), min(k, sim.shape[0])
    fwd_nn = [np.argsort(-sim[i])[:k_f] for i in range(sim.shape[0])]
    bwd_nn = [np.argsort(-sim[:, j])[:k_b] for j in range(sim.shape[1])]
    fwd_mean = [sim[i, fwd_nn[i]].sum() / k_f for i in range(sim.shape[0])]
    bwd_mean = [sim[bwd_nn[j], j].sum() / k_b for j in range(sim.shape[1])]

    def score(i, j):
        denominator = fwd_mean[i] / 2 + bwd_mean[j] / 2  # sum/2k + sum/2k
        return {
            "ratio": sim[i, j] / denominator,
            "distance": sim[i, j] - denominator,
            "csls": 2 * sim[i, j] - fwd_mean[i] - bwd_mean[j],
            "absolute": sim[i, j],
        }[margin]

    fwd = []
    for i in range(sim.shape[0]):
        j = max(fwd_nn[i], key=lambda j: score(i, j))
        fwd.append((score(i, j), i, j))
    bwd = []
    for j in range(sim.shape[1]):
        i = max(bwd_nn[j], key=lambda i: score(i, j))
        bwd.append((score(i, j), i, j))
    if strategy == "fwd":
        pool = fwd
    elif strategy == "bwd":
        pool = bwd
    elif strategy == "max":
        pool = fwd + bwd
    else:
        best_src = {j: i for _, i, j in bwd}
        pool = [(s, i, j) for s, i, j in fwd if best_src[j] == i]
    used_src, used_tgt, out = set(), set(), []
    for s, i, j in sorted(pool, key=lambda t: -t[0]):
        if i not in used_src and j not in used_tgt:
            used_src.add(i)
            used_tgt.add(j)
            out.append((i, j, s))
    return out


@pytest.mark.parametrize("margin", MARGINS)
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("k", [1, 4, 7])
def test_exact_mining_equals_brute_force(margin, strategy, k):
    src, tgt = bitext(60, 45, pairs=20, dim=16, seed=k)
    got = mine_arrays(src, tgt, k=k, margin=margin, strategy=strategy)
    want = brute_force(src, tgt, k, margin, strategy)
    assert [(int(s), int(t)) for s, t in zip(got.src, got.tgt, strict=True)] == [(i, j) for i, j, _ in want]
    assert np.allclose(got.score, [s for _, _, s in want], atol=1e-4)
    assert np.all(np.diff(got.score) <= 0)


def test_k_larger_than_a_side_is_clamped():
    src, tgt = bitext(10, 3, pairs=3, dim=8, seed=1)
    got = mine_arrays(src, tgt, k=4)
    want = brute_force(src, tgt, 4, "ratio", "max")
    assert [(int(s), int(t)) for s, t in zip(got.src, got.tgt, strict=True)] == [(i, j) for i, j, _ in want]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_an_empty_side_gives_no_candidates(strategy):
    src, tgt = bitext(10, 3, pairs=3, dim=8, seed=1)
    assert len(mine_arrays(src, tgt[:0], strategy=strategy)) == 0
    assert len(mine_arrays(src[:0], tgt, strategy=strategy)) == 0


def test_planted_translations_are_found_above_the_rest():
    src, tgt = bitext(200, 200, pairs=50, dim=32, seed=3)
    got = mine_arrays(src, tgt)
    top = {(int(s), int(t)) for s, t in zip(got.src[:50], got.tgt[:50], strict=True)}
    assert top == {(i, i) for i in range(50)}
    assert np.all(got.above(1.1).score >= 1.1)


@pytest.mark.integration  # mining twice: seconds
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), strategy=st.sampled_from(STRATEGIES), margin=st.sampled_from(MARGINS))
def test_permuting_the_inputs_permutes_the_output(seed, strategy, margin):
    src, tgt = bitext(25, 20, pairs=10, dim=8, seed=seed)
    rng = np.random.default_rng(seed)
    p, q = rng.permutation(len(src)), rng.permutation(len(tgt))
    base = mine_arrays(src, tgt, margin=margin, strategy=strategy)
    permuted = mine_arrays(src[p], tgt[q], margin=margin, strategy=strategy)
    expected = {(int(s), int(t)) for s, t in zip(base.src, base.tgt, strict=True)}
    mapped = {(int(p[s]), int(q[t])) for s, t in zip(permuted.src, permuted.tgt, strict=True)}
    assert mapped == expected


@pytest.mark.integration  # mining twice: seconds
@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000), strategy=st.sampled_from(STRATEGIES), side=st.sampled_from(["src", "tgt"])
)
def test_a_far_away_distractor_never_changes_the_other_pairs(seed, strategy, side):
    src, tgt = bitext(25, 25, pairs=12, dim=8, seed=seed)

    # Shift everything into the positive orthant of one axis so real cosines stay > 0, and add a
    # distractor orthogonal to all of them (cosine 0): it can never enter another sentence's top k.
    def lift(x: np.ndarray) -> np.ndarray:
        return unit(np.hstack([x + 3.0 * np.eye(1, x.shape[1], 0), np.zeros((len(x), 1))])).astype(np.float32)

    src, tgt = lift(src), lift(tgt)
    far = np.eye(1, src.shape[1], src.shape[1] - 1, dtype=np.float32)
    base = mine_arrays(src, tgt, strategy=strategy)
    if side == "src":
        grown = mine_arrays(np.vstack([src, far]), tgt, strategy=strategy)
        outsider = (len(src), None)
    else:
        grown = mine_arrays(src, np.vstack([tgt, far]), strategy=strategy)
        outsider = (None, len(tgt))
    pairs = {(int(s), int(t)) for s, t in zip(grown.src, grown.tgt, strict=True)}
    others = {(s, t) for s, t in pairs if s != outsider[0] and t != outsider[1]}
    assert others == {(int(s), int(t)) for s, t in zip(base.src, base.tgt, strict=True)}


def test_fetching_more_than_k_reranks_a_lossy_search_to_the_exact_neighbours():
    """A search that ranks only roughly (like PQ codes: any n of the true top 12) is repaired by fetch."""
    src, tgt = bitext(40, 50, pairs=10, dim=16, seed=5)
    rng = np.random.default_rng(0)

    def scrambled(queries, n):
        _, ids = exact_knn(queries, tgt, 12)
        return None, rng.permuted(ids, axis=1)[:, :n]

    blocks = lambda: [(0, src)]  # noqa: E731
    exact = find_neighbours(
        blocks, len(src), [SearchShard(lambda q, n: exact_knn(q, tgt, n))], tgt.__getitem__, 4
    )
    repaired = find_neighbours(blocks, len(src), [SearchShard(scrambled)], tgt.__getitem__, 4, fetch=12)
    np.testing.assert_array_equal(repaired.ids, exact.ids)
    np.testing.assert_allclose(repaired.sims, exact.sims, atol=1e-6)
    unrepaired = find_neighbours(blocks, len(src), [SearchShard(scrambled)], tgt.__getitem__, 4, fetch=4)
    assert not np.array_equal(np.sort(unrepaired.ids, 1), np.sort(exact.ids, 1))


@pytest.mark.parametrize("cuts", [[0, 50], [0, 17, 50], [0, 1, 2, 30, 49, 50]])
def test_neighbours_merged_over_row_shards_equal_one_search(cuts):
    """Searching row ranges one by one and merging the re-ranked top-k gives the whole set's top-k."""
    src, tgt = bitext(40, 50, pairs=10, dim=16, seed=9)
    blocks = lambda: [(0, src[:15]), (15, src[15:])]  # noqa: E731
    shards = [
        SearchShard(lambda q, n, a=a, b=b: exact_knn(q, tgt[a:b], n), offset=a)
        for a, b in itertools.pairwise(cuts)
    ]
    merged = find_neighbours(blocks, len(src), shards, tgt.__getitem__, 4)
    whole_set = [SearchShard(lambda q, n: exact_knn(q, tgt, n))]
    whole = find_neighbours(blocks, len(src), whole_set, tgt.__getitem__, 4)
    np.testing.assert_array_equal(merged.ids, whole.ids)
    np.testing.assert_allclose(merged.sims, whole.sims, atol=1e-6)


def test_merge_top_k_pads_missing_hits_and_keeps_first_list_on_ties():
    nan = np.nan
    first = (np.array([[0.9, nan]], np.float32), np.array([[7, -1]]))
    second = (np.array([[0.9, 0.95]], np.float32), np.array([[3, 4]]))
    cos, ids = merge_top_k(first, second, 3)
    assert ids.tolist() == [[4, 7, 3]]
    np.testing.assert_allclose(cos, [[0.95, 0.9, 0.9]])
    cos, ids = merge_top_k((np.zeros((1, 0), np.float32), np.zeros((1, 0), np.int64)), second, 3)
    assert ids.tolist() == [[4, 3, -1]] and np.isnan(cos[0, 2])


def _bad_input_cases():
    src, tgt = bitext(12, 10, pairs=5, dim=8, seed=4)
    nan, inf = tgt.copy(), src.copy()
    nan[3, 2], inf[5, 0] = np.nan, np.inf
    narrow = unit(tgt[:, :4]).astype(np.float32)
    return {
        "not unit": (
            (src * 2, tgt),
            {},
            r"^src: row 0 has norm 2, not 1 \(within 0\.01\): pass unit",
        ),
        "NaN": ((src, nan), {}, r"^tgt: row 3 holds NaN or infinite values$"),
        "inf": ((inf, tgt), {}, r"^src: row 5 holds NaN"),
        "dimensions": ((src, narrow), {}, r"^src vectors have 8 dimensions, tgt vectors 4"),
        "1-D": ((src[0], tgt), {}, r"^src: expected a 2-D array \[sentences, dim\], got shape \(8,\)$"),
        "3-D": ((src, tgt[None]), {}, r"^tgt: expected a 2-D array"),
        "text": (([["a", "b"]], tgt), {}, r"^src: not an array of numbers"),
        "k=0": ((src, tgt), {"k": 0}, r"^k must be a whole number from 1 to 4096, not 0$"),
        "k too large": ((src, tgt), {"k": 4097}, r"^k must be a whole number from 1 to 4096, not 4097$"),
        "k not whole": ((src, tgt), {"k": 2.5}, r"^k must be a whole number"),
        "zero row": ((np.zeros((2, 8)), tgt), {"normalize": True}, r"^src: row 0 is all zeros.*\(1 more row"),
    }


@pytest.mark.parametrize("case", list(_bad_input_cases()))
def test_bad_input_is_a_one_line_value_error(case):
    arrays, options, message = _bad_input_cases()[case]
    with pytest.raises(ValueError, match=message) as raised:
        mine_arrays(*arrays, **options)
    assert isinstance(raised.value, BitextmineError)  # the CLI prints it on one line
    assert "\n" not in str(raised.value)


def test_normalize_mines_unit_copies_and_leaves_the_input_alone():
    src, tgt = bitext(40, 30, pairs=12, dim=8, seed=6)
    scales = np.random.default_rng(6).uniform(0.5, 3, size=(40, 1)).astype(np.float32)
    scaled = src * scales
    given = scaled.copy()
    got, want = mine_arrays(scaled, tgt * 4, normalize=True), mine_arrays(src, tgt)
    np.testing.assert_array_equal(scaled, given)
    assert [(s, t) for s, t, _ in got] == [(s, t) for s, t, _ in want]
    np.testing.assert_allclose(got.score, want.score, atol=1e-5)
    assert got.cosine.max() <= 1 + 1e-6


def test_vectors_rounded_through_float16_count_as_unit_vectors():
    src, tgt = bitext(30, 30, pairs=10, dim=384, seed=8)
    got = mine_arrays(src.astype(np.float16), tgt.astype(np.float16).astype(np.float64))
    assert {(s, t) for s, t, _ in got[:10]} == {(i, i) for i in range(10)}
