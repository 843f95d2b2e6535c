"""The threshold-transfer gap of examples/benchmarks/bench_thresholds.py on hand-made candidates: the
threshold a rule learns on half A, the F1 it gives on half B against B's oracle, and the split into
halves."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from bitextmine.calibration.bucc import BuccSide, BuccSplit
from tests.helpers import REPO

sys.path.insert(0, str(REPO / "examples" / "benchmarks"))
bench = pytest.importorskip("bench_thresholds")

# A: 4 gold pairs, 3 found; the best F1 keeps scores >= 1.05 (3 of 3 kept are gold: F1 6/7).
A = bench.Half("de-en", np.array([0.9, 1.0, 1.1, 1.2, 1.3], np.float32), np.array([0, 0, 1, 1, 1], bool), 4)
# B: 3 gold pairs, all found; its oracle keeps >= 1.02 (F1 1), A's threshold keeps 2 of them (F1 4/5).
B = bench.Half("de-en", np.array([1.0, 1.04, 1.06, 1.2], np.float32), np.array([0, 1, 1, 1], bool), 3)


def test_the_gap_is_the_oracle_f1_on_b_minus_the_f1_of_as_threshold_on_b():
    threshold = A.threshold()
    assert threshold == pytest.approx(1.05, abs=1e-6)
    assert A.sweep().scores.f1 == pytest.approx(6 / 7)
    assert B.f1_at(threshold) == pytest.approx(4 / 5)
    oracle = B.sweep()
    assert (oracle.threshold, oracle.scores.f1) == (pytest.approx(1.02, abs=1e-6), pytest.approx(1.0))
    assert 100 * (oracle.scores.f1 - B.f1_at(threshold)) == pytest.approx(20.0)


def test_the_plateau_width_spans_the_thresholds_near_the_best_f1():
    # F1 on A by threshold: 0.9 -> 6/9, 0.95 -> 6/8, 1.05 -> 6/7, 1.15 -> 4/6, 1.25 -> 2/5
    assert A.plateau_width(1.0) == 0.0
    assert A.plateau_width(20.0) == pytest.approx(1.15 - 0.9, abs=1e-6)


def test_the_joint_threshold_maximises_the_sum_of_f1_over_the_pairs():
    # at 1.02: 6/7 + 1 beats 1.05's 6/7 + 4/5 and every other candidate
    assert bench.joint_threshold([A, B]) == pytest.approx(1.02, abs=1e-6)


def test_a_precision_target_no_threshold_reaches_falls_back_to_the_most_precise():
    # precision by threshold: 1.15 -> 0/1, 1.05 -> 1/2, 1.0 -> 1/3; none reaches 0.95
    noisy = bench.Half("zh-en", np.array([1.0, 1.1, 1.2], np.float32), np.array([0, 1, 0], bool), 1)
    assert noisy.threshold(0.95) == pytest.approx(1.05, abs=1e-6)


def test_halves_deal_the_gold_pairs_evenly_and_every_other_sentence_once():
    src_ids, tgt_ids = [f"de-{i}" for i in range(10)], [f"en-{i}" for i in range(12)]
    gold = {(f"de-{i}", f"en-{i + 2}") for i in range(4)}
    split = BuccSplit(
        "de-en",
        "dev",
        BuccSide("de", src_ids, [f"s{i}" for i in range(10)]),
        BuccSide("en", tgt_ids, [f"t{i}" for i in range(12)]),
        gold,
    )
    src, tgt = np.arange(10.0)[:, None], np.arange(12.0)[:, None]
    (a, a_src, a_tgt), (b, b_src, b_tgt) = bench.halves(split, src, tgt, np.random.default_rng(3))
    assert len(a.gold) == len(b.gold) == 2 and a.gold | b.gold == gold
    for full, one, other in ((split.src, a.src, b.src), (split.tgt, a.tgt, b.tgt)):
        assert sorted(one.ids + other.ids) == sorted(full.ids) and not set(one.ids) & set(other.ids)
    for half, vectors in ((a.src, a_src), (a.tgt, a_tgt), (b.src, b_src), (b.tgt, b_tgt)):
        assert [int(v) for v in vectors[:, 0]] == [int(i.split("-")[1]) for i in half.ids]
    assert all(g[0] in a.src.ids and g[1] in a.tgt.ids for g in a.gold)
