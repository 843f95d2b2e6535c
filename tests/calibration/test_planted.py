"""A threshold learned inside the corpus (calibration/planted.py): planted pairs found as a dense numpy
reimplementation over the whole corpus-plus-planted matrix finds them; the threshold with the best
estimated F1 over every planted score, checked against the formula evaluated by brute force."""

from __future__ import annotations

import numpy as np
import pytest

from bitextmine.calibration.planted import (
    DUPLICATE_COSINE,
    MIN_FOUND,
    CalibrationPairs,
    CorpusMeans,
    Planted,
    best_f1,
    estimate_at,
    plant,
)
from bitextmine.errors import BitextmineError
from bitextmine.mining.margin import margin_scores
from bitextmine.mining.null_estimate import DecoyCounts
from bitextmine.mining.regional_precision import LOWEST_PRECISION, PrecisionCounts
from bitextmine.search.knn import Neighbours
from bitextmine.steps.corpus_threshold import _check_learned, _half_the_best_f1
from tests.helpers import random_unit, unit

K = 3


def exact_search(base: np.ndarray):
    def search(queries: np.ndarray, k: int) -> Neighbours:
        sims = queries @ base.T
        order = np.argsort(-sims, axis=1, kind="stable")[:, :k]
        return Neighbours(np.take_along_axis(sims, order, 1).astype(np.float32), order.astype(np.int64))

    return search


def corpus_means(src: np.ndarray, tgt: np.ndarray) -> CorpusMeans:
    sims = src @ tgt.T
    top = lambda m: -np.sort(-m, axis=1)[:, :K]  # noqa: E731
    return CorpusMeans(top(sims).mean(1), top(sims.T).mean(1))


def reference_found(src, tgt, pairs: CalibrationPairs, margin: str, strategy: str) -> np.ndarray:
    """Every planted pair's score where found one-to-one, from the dense matrix of the corpus and the
    planted sentences together: planted rows' means over their k best in the other side of both, corpus
    rows' means over the corpus alone; each planted query's best-scoring of its k nearest."""
    n_s, n_t = len(src), len(tgt)
    all_src, all_tgt = np.concatenate([src, pairs.src]), np.concatenate([tgt, pairs.tgt])
    sims = all_src @ all_tgt.T
    means = corpus_means(src, tgt)
    fwd_mean = np.concatenate([means.fwd, -np.sort(-sims[n_s:], axis=1)[:, :K].mean(1)])
    bwd_mean = np.concatenate([means.bwd, -np.sort(-sims[:, n_t:].T, axis=1)[:, :K].mean(1)])
    scores = margin_scores(sims.astype(np.float64), fwd_mean[:, None], bwd_mean[None, :], margin)
    forward, backward = [], []
    for p in range(n_s, n_s + len(pairs)):
        near = np.argsort(-sims[p], kind="stable")[:K]
        best = near[np.argmax(scores[p, near])]
        forward.append((scores[p, best], p, best))
    for q in range(n_t, n_t + len(pairs)):
        near = np.argsort(-sims[:, q], kind="stable")[:K]
        best = near[np.argmax(scores[near, q])]
        backward.append((scores[best, q], best, q))
    if strategy == "intersect":
        pool = [c for c in forward if any(c[1:] == b[1:] for b in backward)]
    else:
        pool = {"max": forward + backward, "fwd": forward, "bwd": backward}[strategy]
    found = np.full(len(pairs), -np.inf)
    used_src, used_tgt = set(), set()
    for score, s, t in sorted(pool, key=lambda c: -c[0]):  # stable: ties keep the pool's order
        if s in used_src or t in used_tgt:
            continue
        used_src.add(s)
        used_tgt.add(t)
        if s - n_s == t - n_t and s >= n_s:
            found[s - n_s] = score
    return found


def corpus_and_pairs(seed: int, dim: int = 12) -> tuple[np.ndarray, np.ndarray, CalibrationPairs]:
    """A corpus with some translations (noisy copies) and clusters of near sentences, and calibration
    pairs some of which land in the clusters."""
    rng = np.random.default_rng(seed)
    src = random_unit(40, dim, seed)
    tgt = np.concatenate([unit(src[:15] + 0.3 * rng.normal(size=(15, dim))), random_unit(30, dim, seed + 1)])
    planted_src = np.concatenate(
        [random_unit(10, dim, seed + 2), unit(src[20:25] + 0.2 * rng.normal(size=(5, dim)))]
    )
    planted_tgt = unit(planted_src + rng.normal(0, 0.12, size=planted_src.shape))
    return src, tgt, CalibrationPairs(planted_src, planted_tgt)


def plant_exact(src, tgt, pairs: CalibrationPairs, margin: str, strategy: str) -> Planted:
    """`plant` with exact searches of the corpus's two sides."""
    means = corpus_means(src, tgt)
    return plant(pairs, exact_search(src), exact_search(tgt), means, k=K, margin=margin, strategy=strategy)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("margin", ["ratio", "distance"])
@pytest.mark.parametrize("strategy", ["max", "intersect", "fwd", "bwd"])
def test_planted_pairs_are_found_as_the_dense_reference_finds_them(seed, margin, strategy):
    src, tgt, pairs = corpus_and_pairs(seed)
    planted = plant_exact(src, tgt, pairs, margin, strategy)
    assert planted.duplicates == 0
    expected = reference_found(src, tgt, pairs, margin, strategy)
    np.testing.assert_allclose(planted.found, expected, rtol=1e-5)
    assert np.isfinite(planted.found).sum() >= 5  # the test sees pairs found and pairs lost


def test_a_pair_whose_sentence_the_corpus_holds_is_not_planted():
    src, tgt, pairs = corpus_and_pairs(0)
    tgt = np.concatenate([tgt, pairs.tgt[3:4]])  # the corpus holds the target of pair 3
    src = np.concatenate([src, unit(pairs.src[7:8] + 1e-4)])  # and, nearly, the source of pair 7
    planted = plant_exact(src, tgt, pairs, "ratio", "max")
    assert planted.duplicates == 2 and len(planted.found) == len(pairs) - 2
    kept = np.delete(np.arange(len(pairs)), [3, 7])
    expected = reference_found(src, tgt, pairs.subset(kept), "ratio", "max")
    np.testing.assert_allclose(planted.found, expected, rtol=1e-5)
    assert float(pairs.tgt[3] @ tgt[-1]) >= DUPLICATE_COSINE


def test_no_pair_left_to_plant_gives_no_estimate():
    src, tgt, pairs = corpus_and_pairs(0)
    planted = plant(
        pairs, exact_search(np.concatenate([src, pairs.src])), exact_search(tgt), corpus_means(src, tgt),
        k=K, margin="ratio", strategy="max",
    )  # fmt: skip
    assert planted.duplicates == len(pairs) and len(planted.found) == 0
    counts = DecoyCounts(np.array([1.1, 1.0]), np.array([0.9, np.nan]), 2)
    assert best_f1(planted, counts) is None and estimate_at(planted, counts, 1.0) is None


def brute_force_choice(found, candidates, decoys, directions):
    """The estimated F1 at every planted score, from counts over the whole arrays."""
    finite = found[np.isfinite(found)]

    def true(t):
        return max(0.0, (candidates >= t).sum() - (decoys >= t).sum() / directions)

    reached = [t for t in finite if (finite >= t).sum() >= MIN_FOUND]
    translations = int(max(true(t) / np.mean(found >= t) for t in reached))

    def f1(t):
        precision = true(t) / max((candidates >= t).sum(), 1)
        recall = true(t) / translations
        return 2 * precision * recall / (precision + recall) if precision + recall else 0.0

    best = max(np.unique(finite), key=lambda t: (f1(t), t))
    return best, translations, f1(best)


@pytest.mark.parametrize("seed", range(4))
def test_the_threshold_has_the_best_estimated_f1_over_the_planted_scores(seed):
    rng = np.random.default_rng(seed)
    translations = rng.normal(1.08, 0.03, 300)
    others = rng.normal(1.0, 0.025, 3000)
    candidates = np.sort(np.concatenate([translations, others[:1500]]))[::-1]
    decoys = np.concatenate([rng.normal(1.0, 0.025, 3000), [np.nan] * 10])
    found = np.concatenate([rng.normal(1.08, 0.03, 80), [-np.inf] * 20])
    planted = Planted(found, 0, np.arange(len(found)))
    counts = DecoyCounts(candidates, decoys, 2)
    chosen, chosen_f1 = best_f1(planted, counts)
    threshold, _, f1 = brute_force_choice(found, candidates, decoys[~np.isnan(decoys)], 2)
    assert chosen == threshold and chosen_f1 == pytest.approx(f1)
    assert 1.02 < chosen < 1.1  # between the two populations
    estimate = estimate_at(planted, counts, chosen)
    true = (candidates >= chosen).sum() - (decoys >= chosen).sum() / 2
    assert estimate.recall == pytest.approx(np.mean(found >= chosen))  # the planted pairs'
    assert estimate.precision == pytest.approx(true / (candidates >= chosen).sum())
    assert estimate.translations == round(true / estimate.recall)


def test_too_few_found_pairs_give_no_threshold():
    found = np.array([1.1] * (MIN_FOUND - 1) + [-np.inf] * 50)
    counts = DecoyCounts(np.array([1.1, 1.0]), np.array([0.9]), 1)
    assert best_f1(Planted(found, 0, np.arange(len(found))), counts) is None


def test_too_few_found_pairs_leave_a_min_precision_nothing_to_threshold():
    planted = Planted(np.array([1.1] * (MIN_FOUND - 1) + [-np.inf] * 50), 0, np.arange(MIN_FOUND + 49))
    _check_learned(None, planted)  # the calibrated margin stays
    with pytest.raises(BitextmineError, match=r"--min-precision 0.9: only 9 of 59 planted .*\(at least 10\)"):
        _check_learned(0.9, planted)


@pytest.mark.parametrize("seed", range(4))
def test_the_regional_threshold_is_half_the_best_f1_the_planted_precisions_estimate(seed):
    """steps/corpus_threshold's rule, against sums over the arrays: TP(t) the kept precisions' sum."""
    rng = np.random.default_rng(seed)
    false_pairs = 2000 if seed < 3 else 200_000  # the last: translations too rare for half the F1 to hold
    precision = np.concatenate([rng.uniform(0.7, 1.0, 200), rng.uniform(0.0, 0.3, false_pairs)])
    found = np.concatenate([rng.uniform(0.5, 1.0, 60), [-np.inf] * 15])
    chosen = _half_the_best_f1(Planted(found, 0, np.arange(len(found))), PrecisionCounts(precision))

    def true(t):
        return precision[precision >= t].sum()

    finite = found[np.isfinite(found)]
    reached = [t for t in finite if (finite >= t).sum() >= MIN_FOUND]
    translations = int(max(true(t) / np.mean(found >= t) for t in reached))

    def f1(t):
        p, r = true(t) / max((precision >= t).sum(), 1), min(1.0, true(t) / translations)
        return 2 * p * r / (p + r)

    half = max(max(f1(t) for t in np.unique(finite)) / 2, LOWEST_PRECISION)
    assert chosen.threshold == pytest.approx(half)
    assert chosen.precision == pytest.approx(true(half) / (precision >= half).sum())
    assert chosen.recall == pytest.approx(np.mean(found >= half))
    assert chosen.translations == round(true(half) / np.mean(found >= half))
