"""Regional precision (mining/regional_precision.py, mining/regions.py) against brute-force numpy."""

from __future__ import annotations

import numpy as np
import pytest

from bitextmine.mining.regional_precision import (
    COUNTS_AS_TRANSLATION,
    LOWEST_PRECISION,
    REWEIGHTINGS,
    SETTLED,
    PrecisionCounts,
    RegionCurve,
    RegionLabels,
    concave_slopes,
    region_curve,
    regional_precision,
)
from bitextmine.mining.regions import (
    REGIONS,
    ROWS_PER_REGION,
    Regions,
    fit_regions,
    region_count,
    region_mismatch,
)
from bitextmine.search.gemm import ArrayVectors


def brute_majorant_slopes(gains: np.ndarray) -> np.ndarray:
    """The least concave majorant at each integer x (the largest interpolation between two points around
    it), differenced."""
    ys = np.concatenate([[0.0], gains])
    n = len(ys)
    majorant = np.array(
        [
            max(
                ys[a] + (ys[b] - ys[a]) * (x - a) / (b - a) if b > a else ys[a]
                for a in range(x + 1)
                for b in range(x, n)
            )
            for x in range(n)
        ]
    )
    return np.diff(majorant)


@pytest.mark.parametrize("seed", range(6))
def test_concave_slopes_are_those_of_the_least_concave_majorant(seed):
    rng = np.random.default_rng(seed)
    gains = np.cumsum(rng.choice([1.0, 0.0, -0.5, 0.3], size=rng.integers(1, 40)))
    slopes = concave_slopes(gains)
    np.testing.assert_allclose(slopes, brute_majorant_slopes(gains), atol=1e-12)
    assert np.all(np.diff(slopes) <= 1e-12)  # non-increasing
    assert np.all(np.cumsum(slopes) >= gains - 1e-9)  # above every point


def brute_region_precision(scores: np.ndarray, decoys: np.ndarray, weights=None) -> np.ndarray:
    """Per candidate in decreasing score order: the majorant slope of (i, i - decoys' weight reaching it)."""
    ordered = np.sort(scores)[::-1]
    weights = np.ones(len(decoys)) if weights is None else weights
    gains = np.array([i + 1 - np.sum(weights[decoys >= s]) for i, s in enumerate(ordered)], dtype=float)
    return np.clip(brute_majorant_slopes(gains), 0, 1)


def test_region_curve_counts_every_decoy_as_one_false_pair():
    rng = np.random.default_rng(3)
    scores, decoys = rng.normal(1.02, 0.03, 30), rng.normal(1.0, 0.02, 25)
    curve = region_curve(scores, decoys)
    np.testing.assert_allclose(curve.precision, brute_region_precision(scores, decoys), atol=1e-12)
    np.testing.assert_array_equal(curve.scores, np.sort(scores)[::-1])


def test_a_region_without_decoys_is_all_translations_and_one_of_only_decoys_none():
    assert region_curve(np.array([1.0, 0.9, 0.8]), np.zeros(0)).precision.tolist() == [1.0, 1.0, 1.0]
    flooded = region_curve(np.array([1.0, 0.9]), np.array([1.1, 1.05, 0.95]))
    assert flooded.precision.tolist() == [0.0, 0.0]


def test_region_curve_lookup_of_other_scores():
    curve = RegionCurve(np.array([1.1, 1.0, 0.9]), np.array([1.0, 0.5, 0.2]))
    np.testing.assert_array_equal(curve.at(np.array([1.1, 1.0, 0.9])), [1.0, 0.5, 0.2])
    # above them all: the best's; between two: the lowest candidate at least as high; below all: the last
    np.testing.assert_array_equal(curve.at(np.array([2.0, 1.05, 0.95, 0.1])), [1.0, 1.0, 0.5, 0.2])
    assert RegionCurve(np.zeros(0), np.zeros(0)).at(np.array([1.0])).tolist() == [0.0]


def brute_regional(scores, src_rows, tgt_rows, decoys, weights, labels):
    """The mean over clusterings and both sides of each region's brute-force curve at each pair."""
    query_regions = np.concatenate([labels.src, labels.tgt], axis=1)
    total = np.zeros(len(scores))
    for c in range(len(labels.src)):
        for pair_regions in (labels.src[c, src_rows], labels.tgt[c, tgt_rows]):
            for r in range(labels.regions):
                mine = pair_regions == r
                if not mine.any():
                    continue
                chosen = (query_regions[c] == r) & np.isfinite(decoys)
                precision = brute_region_precision(scores[mine], decoys[chosen], weights[chosen])
                ranked = np.empty(mine.sum())
                ranked[np.argsort(-scores[mine], kind="stable")] = precision
                total[mine] += ranked
    return total / (2 * len(labels.src))


def random_candidates(seed, n_src=40, n_tgt=50, pairs=30, clusterings=3, regions=4):
    rng = np.random.default_rng(seed)
    src_rows, tgt_rows = rng.permutation(n_src)[:pairs], rng.permutation(n_tgt)[:pairs]
    scores = np.concatenate([rng.normal(1.08, 0.02, pairs // 3), rng.normal(1.0, 0.03, pairs - pairs // 3)])
    decoys = rng.normal(1.0, 0.03, n_src + n_tgt)
    decoys[rng.random(len(decoys)) < 0.2] = np.nan  # queries without a decoy
    labels = RegionLabels(
        rng.integers(0, regions, (clusterings, n_src)).astype(np.int16),
        rng.integers(0, regions, (clusterings, n_tgt)).astype(np.int16),
        regions,
    )
    return scores, src_rows, tgt_rows, decoys, labels


def decoy_weights(labels, src_rows, tgt_rows, directions, precision):
    """Query by query: 1 / directions without a candidate; with one, one minus its precision where it
    counts as a translation, else one."""
    n_src, n_tgt = labels.src.shape[1], labels.tgt.shape[1]
    weights = np.full(n_src + n_tgt, 1.0 / directions)
    for pair, (s, t) in enumerate(zip(src_rows, tgt_rows, strict=True)):
        counted = precision[pair] >= COUNTS_AS_TRANSLATION[directions]
        weights[s] = weights[n_src + t] = 1 - precision[pair] if counted else 1.0
    return weights


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("directions", [1, 2])
def test_regional_precision_is_the_mean_over_clusterings_and_sides_of_each_region_curve(seed, directions):
    scores, src_rows, tgt_rows, decoys, labels = random_candidates(seed)
    curves, precision = regional_precision(scores, (src_rows, tgt_rows), decoys, labels, directions, rounds=0)
    got = curves.of(scores, labels.src[:, src_rows], labels.tgt[:, tgt_rows])
    np.testing.assert_array_equal(precision, got)
    weights = decoy_weights(labels, src_rows, tgt_rows, directions, np.zeros(len(scores)))
    assert set(weights) == {1.0, 1.0 / directions}  # queries without a candidate among them
    expected = brute_regional(scores, src_rows, tgt_rows, decoys, weights, labels)
    np.testing.assert_allclose(got, expected, atol=1e-12)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("directions", [1, 2])
def test_each_reweighting_weighs_a_translations_decoy_by_the_chance_it_is_none(seed, directions):
    scores, src_rows, tgt_rows, decoys, labels = random_candidates(seed)
    for rounds in (1, 2, REWEIGHTINGS):

        def brute_pass(precision):
            weights = decoy_weights(labels, src_rows, tgt_rows, directions, precision)
            return brute_regional(scores, src_rows, tgt_rows, decoys, weights, labels)

        expected = brute_pass(np.zeros(len(scores)))
        for _ in range(rounds):
            previous, expected = expected, brute_pass(expected)
            if np.max(np.abs(expected - previous)) <= SETTLED:
                break
        _, precision = regional_precision(
            scores, (src_rows, tgt_rows), decoys, labels, directions, rounds=rounds
        )
        np.testing.assert_allclose(precision, expected, atol=1e-12)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("directions", [1, 2])
def test_the_reweighting_lifts_no_false_pairs_where_the_corpus_has_no_translations(seed, directions):
    """Every candidate a false pair, each query's decoy drawn as its candidate's score is: few pairs count
    as translations after the passes. Weighing down every candidate's decoy, whatever its precision,
    would let them lift each other pass after pass (thousands here where one direction is searched)."""
    rng = np.random.default_rng(seed)
    n = 3000
    scores = rng.normal(1.0, 0.02, n)
    tgt_decoys = rng.normal(1.0, 0.02, n) if directions == 2 else np.full(n, np.nan)
    decoys = np.concatenate([rng.normal(1.0, 0.02, n), tgt_decoys])
    regions = rng.integers(0, 8, (4, n)).astype(np.int16)
    rows = np.arange(n)
    _, precision = regional_precision(
        scores, (rows, rows), decoys, RegionLabels(regions, regions, 8), directions
    )
    assert np.mean(precision >= LOWEST_PRECISION) < 0.05


def test_regional_precision_separates_a_dense_region_that_no_single_margin_threshold_serves():
    """Two regions: in the dense one translations score 0.99 and false pairs 0.97, in the sparse one
    translations 1.06 and false pairs 1.00. One margin threshold loses one region's translations or
    takes the other's false pairs; the regional precision keeps each region's translations only."""
    rng = np.random.default_rng(1)
    per, false_per = 200, 400
    true_scores = np.concatenate([rng.normal(0.99, 0.004, per), rng.normal(1.06, 0.004, per)])
    false_scores = np.concatenate([rng.normal(0.97, 0.004, false_per), rng.normal(1.0, 0.004, false_per)])
    scores = np.concatenate([true_scores, false_scores])
    truth = np.arange(len(scores)) < 2 * per
    region = np.concatenate([np.zeros(per), np.ones(per), np.zeros(false_per), np.ones(false_per)])
    # every candidate's two sentences are queries of its region; a false pair's decoy scores as it does,
    # a translation's lies below it; one direction searched
    src_decoys = np.where(truth, scores - 0.05, scores + rng.normal(0, 0.002, len(scores)))
    decoys = np.concatenate([src_decoys, np.full(len(scores), np.nan)])
    rows = np.arange(len(scores))
    labels = RegionLabels(region[None].astype(np.int16), region[None].astype(np.int16), 2)
    _, precision = regional_precision(scores, (rows, rows), decoys, labels, 1)

    def best_f1(score: np.ndarray) -> float:
        order = np.argsort(-score, kind="stable")
        hits = np.cumsum(truth[order])
        return float(np.max(2 * hits / (np.arange(1, len(order) + 1) + truth.sum())))

    assert best_f1(scores) < 0.8
    assert best_f1(precision) > 0.98
    kept = precision >= 0.5
    assert kept[truth].mean() > 0.95 and not kept[~truth].any()


def test_precision_counts_against_sums():
    rng = np.random.default_rng(2)
    precision = rng.random(50)
    counts = PrecisionCounts(precision)
    for threshold in (0.0, 0.3, precision[7], 0.99, 1.5):
        kept = precision >= threshold
        assert counts.kept(threshold) == kept.sum()
        assert counts.true(threshold) == pytest.approx(precision[kept].sum())
        expected = precision[kept].mean() if kept.any() else None
        assert counts.precision(threshold) == (pytest.approx(expected) if kept.any() else None)


def test_regions_assign_each_row_to_its_nearest_centroid_in_every_clustering():
    rng = np.random.default_rng(4)
    src = rng.normal(size=(500, 8)).astype(np.float32)
    tgt = rng.normal(size=(300, 8)).astype(np.float32)
    src /= np.linalg.norm(src, axis=1, keepdims=True)
    tgt /= np.linalg.norm(tgt, axis=1, keepdims=True)
    regions = fit_regions((ArrayVectors(src), ArrayVectors(tgt)), regions=4, clusterings=3, seed=5)
    assert regions.centroids.shape == (3, 4, 8)
    labels = regions.assign(ArrayVectors(src))
    expected = np.stack([(src @ c.T).argmax(1) for c in regions.centroids])
    np.testing.assert_array_equal(labels, expected)
    again = fit_regions((ArrayVectors(src), ArrayVectors(tgt)), regions=4, clusterings=3, seed=5)
    np.testing.assert_array_equal(again.centroids, regions.centroids)  # the seed fixes them


def test_few_rows_get_fewer_regions():
    rows = np.eye(4, dtype=np.float32)[np.arange(60) % 4]
    regions = fit_regions((ArrayVectors(rows), ArrayVectors(rows)), regions=32, clusterings=2)
    assert isinstance(regions, Regions) and regions.count == 120 // 39


def test_a_region_per_rows_per_region_sentences_between_one_and_regions():
    assert region_count(0) == region_count(ROWS_PER_REGION - 1) == 1
    assert region_count(5 * ROWS_PER_REGION + 7) == 5
    assert region_count(REGIONS * ROWS_PER_REGION) == region_count(10**9) == REGIONS


@pytest.mark.parametrize("seed", range(3))
def test_region_mismatch_is_the_total_variation_less_a_draws_against_sums(seed):
    rng = np.random.default_rng(seed)
    regions, rows, n = 5, 400, 60
    population = rng.integers(0, regions, (2, rows)).astype(np.int16)
    weights = rng.uniform(0, 1, rows)
    sample = rng.integers(0, regions, (2, n)).astype(np.int16)
    expected = []
    for labels, drawn in zip(population, sample, strict=True):
        p = np.array([weights[labels == r].sum() for r in range(regions)]) / weights.sum()
        q = np.array([(drawn == r).mean() for r in range(regions)])
        chance = sum(0.5 * np.sqrt(2 / np.pi * x * (1 - x) / n) for x in p)
        expected.append(sum(abs(p - q)) / 2 - chance)
    assert region_mismatch(population, weights, sample, regions) == pytest.approx(np.mean(expected))


def test_a_draw_from_the_population_is_alike_and_one_from_elsewhere_is_not():
    rng = np.random.default_rng(0)
    population = rng.choice(8, (3, 20_000), p=[0.4, 0.2, 0.1, 0.1, 0.1, 0.05, 0.05, 0.0]).astype(np.int16)
    weights = np.ones(20_000)
    drawn = population[:, rng.choice(20_000, 400, replace=False)]
    assert abs(region_mismatch(population, weights, drawn, 8)) < 0.03
    elsewhere = np.full((3, 400), 7, np.int16)  # a region the population never holds
    assert region_mismatch(population, weights, elsewhere, 8) > 0.9


def test_a_population_in_one_region_gives_a_number():
    """Its share can round above 1 (np.bincount sums in another order than np.sum), and the chance term
    took the root of a number below 0: NaN."""
    weights = np.random.default_rng(0).uniform(0, 1, (3, 200))[2]
    population = np.zeros((2, 200), np.int16)
    assert np.bincount(population[0], weights=weights)[0] / weights.sum() > 1
    assert region_mismatch(population, weights, np.zeros((2, 5), np.int16), 3) == pytest.approx(0, abs=1e-7)
