"""Candidate selection in blocks: the same pairs as one in-memory pass, in memory that does not grow with
the corpus. (Selection against the brute-force miner is tested through `mine_arrays` in test_mine_arrays.)"""

from __future__ import annotations

import sys
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bitextmine.mining.margin import MARGINS
from bitextmine.mining.selection import STRATEGIES, Candidates, Pair, _greedy, select_candidates
from bitextmine.search.knn import Neighbours, exact_knn

from .test_mine_arrays import bitext


def in_blocks(lists: Neighbours, rows: int):
    """A re-iterable NeighbourBlocks over in-memory lists, `rows` queries a block."""
    return lambda: [
        (a, Neighbours(lists.sims[a : a + rows], lists.ids[a : a + rows]))
        for a in range(0, len(lists.ids), rows)
    ]


def knn(queries: np.ndarray, base: np.ndarray, k: int) -> Neighbours:
    sims, ids = exact_knn(queries, base, k)
    return Neighbours(sims.astype(np.float32), ids.astype(np.int64))


def with_duplicates(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A bitext where many rows are exact copies, so scores tie and hubs collect many candidates."""
    src, tgt = bitext(70, 55, pairs=25, dim=8, seed=seed)
    rng = np.random.default_rng(seed)
    src[rng.integers(0, 70, 30)] = src[rng.integers(0, 70, 30)]
    tgt[rng.integers(0, 55, 25)] = tgt[rng.integers(0, 55, 25)]
    return src, tgt


@pytest.mark.integration  # the selection over a grid of blocks: seconds
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("margin", MARGINS)
def test_blocks_and_merge_windows_do_not_change_the_selection(tmp_path, strategy, margin):
    src, tgt = with_duplicates(seed=len(strategy) + len(margin))
    fwd, bwd = knn(src, tgt, 4), knn(tgt, src, 4)
    sizes = (len(src), len(tgt))
    whole = select_candidates(in_blocks(fwd, 70), in_blocks(bwd, 55), sizes, margin, strategy, tmp_path / "a")
    assert len(whole.records) and np.all(np.diff(whole.records["score"]) <= 0)
    for rows, merge_rows in [(1, 1), (7, 5), (20, 3), (33, 1000)]:
        scratch = tmp_path / f"{rows}-{merge_rows}"
        blocked = select_candidates(
            in_blocks(fwd, rows), in_blocks(bwd, rows), sizes, margin, strategy, scratch, merge_rows
        )
        assert blocked.records.tobytes() == whole.records.tobytes(), (rows, merge_rows)
        assert blocked.decoys.tobytes() == whole.decoys.tobytes(), (rows, merge_rows)


def sequential_greedy(src: list[int], tgt: list[int], used_src: set[int], used_tgt: set[int]) -> list[bool]:
    taken = []
    for s, t in zip(src, tgt, strict=True):
        take = s not in used_src and t not in used_tgt
        if take:
            used_src.add(s)
            used_tgt.add(t)
        taken.append(take)
    return taken


@settings(max_examples=200, deadline=None)
@given(
    pairs=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), max_size=40),
    used=st.tuples(st.sets(st.integers(0, 6), max_size=3), st.sets(st.integers(0, 6), max_size=3)),
)
def test_greedy_rounds_take_what_the_sequential_pass_takes(pairs, used):
    batch = np.zeros(len(pairs), dtype=[("src", "<i8"), ("tgt", "<i8")])
    batch["src"], batch["tgt"] = [p[0] for p in pairs], [p[1] for p in pairs]
    used_src, used_tgt = np.zeros(7, bool), np.zeros(7, bool)
    used_src[list(used[0])], used_tgt[list(used[1])] = True, True
    want_src, want_tgt = set(used[0]), set(used[1])
    want = sequential_greedy(batch["src"].tolist(), batch["tgt"].tolist(), want_src, want_tgt)
    assert _greedy(batch, used_src, used_tgt).tolist() == want
    assert set(np.flatnonzero(used_src)) == want_src and set(np.flatnonzero(used_tgt)) == want_tgt


def random_lists(queries: int, base: int, rows: int, seed: int, chunk: int = 20_000):
    """NeighbourBlocks of random k = 4 lists over `base` rows, `rows` (a multiple of `chunk`) a block,
    generated `chunk` rows at a time, so the lists never exist whole unless `rows` covers them all."""

    def part(first: int) -> Neighbours:
        rng = np.random.default_rng([seed, first])
        n = min(chunk, queries - first)
        sims = -np.sort(-rng.uniform(0.3, 0.9, (n, 4)).astype(np.float32), axis=1)
        return Neighbours(sims, rng.integers(0, base, (n, 4)))

    def block(first: int) -> Neighbours:
        parts = [part(a) for a in range(first, min(first + rows, queries), chunk)]
        return Neighbours(np.concatenate([p.sims for p in parts]), np.concatenate([p.ids for p in parts]))

    return lambda: ((first, block(first)) for first in range(0, queries, rows))


@pytest.mark.integration  # a large selection: seconds
def test_selection_allocates_about_one_block_not_the_corpus(tmp_path):
    """400k sentences a side: the lists alone would take 38 MB and the pooled candidates 32 MB; the
    blocked selection's own allocations stay near one block and one merge window."""
    n = 400_000
    fwd, bwd = random_lists(n, n, 20_000, seed=1), random_lists(n, n, 20_000, seed=2)
    tracemalloc.start()
    try:
        selected = select_candidates(
            fwd, bwd, (n, n), "ratio", "max", tmp_path / "blocked", merge_rows=50_000
        ).records
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 12e6, f"selection allocated {peak / 1e6:.1f} MB at its peak"
    assert 0.5 * n < len(selected) <= n
    whole = select_candidates(
        random_lists(n, n, n, seed=1),
        random_lists(n, n, n, seed=2),
        (n, n),
        "ratio",
        "max",
        tmp_path / "whole",
    )
    assert whole.records.tobytes() == selected.tobytes()


def some_candidates() -> Candidates:
    return Candidates(
        np.array([4, 0, 2]), np.array([1, 3, 0]), np.array([1.3, 1.2, 1.05]), np.array([0.9, 0.8, 0.7])
    )


def test_candidates_are_a_sequence_of_pairs():
    pairs = some_candidates()
    assert list(pairs) == [(4, 1, 1.3), (0, 3, 1.2), (2, 0, 1.05)]
    first = pairs[0]
    assert first == Pair(src=4, tgt=1, score=1.3) and type(first.src) is int and type(first.score) is float
    assert pairs[-1].tgt == 0 and pairs[np.int64(1)].src == 0
    with pytest.raises(IndexError):
        pairs[3]
    rest = pairs[1:]
    assert isinstance(rest, Candidates) and len(rest) == 2 and list(rest.cosine) == [0.8, 0.7]
    assert [pair.src for pair in pairs[np.array([True, False, True])]] == [4, 2]
    assert list(pairs.above(1.1)) == list(pairs[:2])
    for src, tgt, score in pairs:
        assert (pairs.src == src).any() and (pairs.tgt == tgt).any() and score > 1


def test_candidates_to_pandas():
    table = some_candidates().to_pandas()
    assert list(table.columns) == ["src", "tgt", "score", "cosine"]
    assert table.to_dict("list") == {
        "src": [4, 0, 2],
        "tgt": [1, 3, 0],
        "score": [1.3, 1.2, 1.05],
        "cosine": [0.9, 0.8, 0.7],
    }


def test_to_pandas_without_pandas_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # `import pandas` raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'bitextmine\[pandas\]'$"):
        some_candidates().to_pandas()
