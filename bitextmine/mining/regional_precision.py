"""Each candidate pair's precision, estimated among the candidates of its own region of the embedding
space (mining/regions.py): the score `mine --threshold auto` thresholds where it plants calibration pairs.

One margin threshold cannot serve a corpus with dense and sparse regions: where neighbours are nearly as
close as a translation (captions, templates) translations score lower than false pairs do elsewhere.
Within one region, the decoys of its queries (mining/null_estimate.py) reaching a score t stand for the
false pairs among its candidates reaching t, so TP(t) = kept(t) - false(t) estimates its translations.
The decoy of a query whose candidate the one-to-one pass kept counts as one false pair: counted per
direction pooled, as the corpus-wide estimate counts them, a region without translations comes out near
half precision at its top (the pass keeps the better of each sentence's competing candidates, which
score above their queries' decoys). A query whose candidate lost to a better one has no pair among the
candidates: its decoy counts per direction pooled. But a sentence with a translation has a decoy too,
which stands for no false pair: where translations are dense their decoys would sink the region's
precision. So the precisions are estimated again, each decoy of a query whose own candidate counts as a
translation now counting as the chance that it is none (one minus that candidate's precision), and again
with those, until they settle. Where both directions are searched, a false pair's two queries bring two
decoys, and a pass pushes a stretch of false pairs' precisions down: every candidate at LOWEST_PRECISION
or more counts as a translation. Where one direction is, a false pair brings one, a pass leaves such a
stretch where it found it and the decoys it lowered let small precisions creep up: only a candidate more
likely a translation than not counts. Reweighing needs enough sentences a region (mining/regions.py):
where each holds few, false pairs lift one another's precisions.

Taken by decreasing score, each candidate adds about one to TP if it is a translation and zero if not;
the slopes of TP's least concave majorant (`concave_slopes`, the Grenander estimator) are
non-increasing, and the slope at a candidate estimates the share of translations among the candidates
scored like it in its region: its local precision, clipped to [0, 1]. A pair's regional precision is the
mean of its local precisions over the clusterings, in its source's region and in its target's.

F1 is highest where every pair kept has a local precision of at least half the F1 reached, wherever it
lies: a threshold on the regional precision keeps, in every region, the candidates down to the score
where translations make up that share, which no single margin threshold does where regions differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from bitextmine.mining.regions import Regions

if TYPE_CHECKING:
    from bitextmine.search.gemm import VectorSource

# Passes after the first, at most: they stop once no precision moves by more than SETTLED, a step far
# finer than the thresholds set on them (each pass moves them about half as far as the one before).
REWEIGHTINGS = 16
SETTLED = 1e-3
# Below this precision a pair counts as no translation: its query's decoy weighs fully, the estimates of
# translations kept leave it out, and no learned threshold is set lower. In a corpus whose translations
# are too rare for the planted pairs to estimate an F1 of 50%, the tops of a few of the regions each
# false pair is read in would pass a lower threshold in their thousands and add up to translations the
# corpus does not hold.
LOWEST_PRECISION = 0.25
# The precision from which a candidate counts as a translation when reweighing its query's decoy, by the
# directions searched (module docstring).
COUNTS_AS_TRANSLATION = {2: LOWEST_PRECISION, 1: 0.5}


def concave_slopes(gains: np.ndarray) -> np.ndarray:
    """Slopes of the least concave majorant of the points (i, gains[i - 1]), i = 1..n, and (0, 0): each
    point's the slope of the hull segment that spans it (float64 [n]). They are the non-increasing
    least-squares fit to the steps between the points (Grenander's estimator as isotonic regression),
    which scipy's pool-adjacent-violators computes in compiled code (imported here: a second of start-up
    that only a learned threshold needs)."""
    from scipy.optimize import isotonic_regression

    steps = np.diff(np.asarray(gains, dtype=np.float64), prepend=0.0)
    if not len(steps):
        return steps
    return isotonic_regression(steps, increasing=False).x


@dataclass(frozen=True)
class RegionCurve:
    """One region's candidate scores, decreasing, and the local precision at each."""

    scores: np.ndarray  # float64, decreasing
    precision: np.ndarray  # float64 in [0, 1], non-increasing

    def at(self, scores: np.ndarray) -> np.ndarray:
        """The local precision at each of `scores`: that of the lowest candidate scoring at least as high
        (the best candidate's above them all; 0 for a region without candidates)."""
        if not len(self.scores):
            return np.zeros(len(scores))
        reached = np.searchsorted(-self.scores, -np.asarray(scores, dtype=np.float64), side="right")
        return self.precision[np.maximum(reached, 1) - 1]


def region_curve(scores: np.ndarray, decoys: np.ndarray, weights: np.ndarray | None = None) -> RegionCurve:
    """The curve of one region's candidate `scores` and its queries' `decoys` (finite only), each decoy
    counting as `weights` false pairs (one each by default)."""
    decoys = np.asarray(decoys, dtype=np.float64)
    weights = np.ones(len(decoys)) if weights is None else np.asarray(weights, dtype=np.float64)
    order = np.argsort(decoys, kind="stable")
    ordered = np.sort(np.asarray(scores, dtype=np.float64))[::-1]
    reach = np.searchsorted(decoys[order], ordered, side="left")
    return RegionCurve(ordered, _local_precision(reach, weights[order]))


def _local_precision(reach: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The local precision of a region's candidates, best first, the i-th scoring above `reach[i]` of its
    decoys, whose weights are `weights` in increasing order of the decoys' values."""
    below = np.concatenate([[0.0], np.cumsum(weights)])  # weight of the decoys below each
    gains = np.arange(1, len(reach) + 1) - (below[-1] - below[reach])
    return np.clip(concave_slopes(gains), 0.0, 1.0)


@dataclass(frozen=True)
class RegionLabels:
    """Every sentence's region in each clustering: source rows, target rows (int16 [clusterings, rows]),
    and the regions a clustering has."""

    src: np.ndarray
    tgt: np.ndarray
    regions: int

    @classmethod
    def of(cls, regions: Regions, src: VectorSource, tgt: VectorSource) -> RegionLabels:
        return cls(regions.assign(src), regions.assign(tgt), regions.count)


@dataclass(frozen=True)
class RegionalPrecision:
    """The curves of every region, in every clustering, grouping the candidates by their source's region
    (`by_src`) and by their target's (`by_tgt`): [clustering][region]."""

    by_src: list[list[RegionCurve]]
    by_tgt: list[list[RegionCurve]]

    def of(self, scores: np.ndarray, src_regions: np.ndarray, tgt_regions: np.ndarray) -> np.ndarray:
        """The regional precision of pairs scored `scores` whose source and target lie in `src_regions`
        and `tgt_regions` (int [clusterings, pairs]): float64 [pairs]."""
        total = np.zeros(len(scores))
        for curves, labels in ((self.by_src, src_regions), (self.by_tgt, tgt_regions)):
            for clustering, regions in enumerate(curves):
                for region, curve in enumerate(regions):
                    rows = np.flatnonzero(labels[clustering] == region)
                    total[rows] += curve.at(scores[rows])
        return total / (2 * len(self.by_src))


def regional_precision(
    scores: np.ndarray,
    pair_rows: tuple[np.ndarray, np.ndarray],
    decoys: np.ndarray,
    labels: RegionLabels,
    directions: int,
    rounds: int = REWEIGHTINGS,
) -> tuple[RegionalPrecision, np.ndarray]:
    """The curves of the one-to-one candidates (`scores`, their source and target rows `pair_rows`),
    with the queries' `decoys` (source queries, then target queries; NaN for none) counted in their
    query's region, and the candidates' regional precision: after a first pass with every decoy of a
    query with a candidate one false pair (one without, 1 / `directions`), up to `rounds` more with the
    decoys of queries whose candidate counts as a translation (by the `directions` searched) weighing the
    chance that it is none, until no precision moves by more than SETTLED (module docstring)."""

    grouped = _Grouped.of(scores, pair_rows, decoys, labels)

    def weights(precision: np.ndarray) -> np.ndarray:
        return _reweighted(precision, pair_rows, len(decoys), labels.src.shape[1], directions)

    curves, precision = grouped.estimate(weights(np.zeros(len(scores))))  # no translations counted yet
    for _ in range(rounds):
        previous = precision
        curves, precision = grouped.estimate(weights(precision))
        if not len(precision) or np.max(np.abs(precision - previous)) <= SETTLED:
            break
    return curves, precision


def _reweighted(
    precision: np.ndarray,
    pair_rows: tuple[np.ndarray, np.ndarray],
    queries: int,
    sources: int,
    directions: int,
) -> np.ndarray:
    """Each query's decoy weight: 1 / `directions` where the query has no candidate; where it has, one
    minus the candidate's precision if that counts as a translation, else one (target queries follow the
    `sources` source queries)."""
    weights = np.full(queries, 1.0 / directions)
    counted = np.where(precision >= COUNTS_AS_TRANSLATION[directions], 1.0 - precision, 1.0)
    weights[pair_rows[0]] = counted
    weights[sources + pair_rows[1]] = counted
    return weights


@dataclass(frozen=True)
class _Group:
    """One region's candidates and its queries' decoys in one clustering, by their places in `_Grouped`'s
    orders (each increasing, so the candidates come best first and the decoys increasing), with what no
    pass changes: how many of the decoys each candidate scores above (`reach`), and each candidate's last
    tie, whose precision `RegionCurve.at` reads at its score (`ties`)."""

    candidates: np.ndarray
    decoys: np.ndarray
    reach: np.ndarray  # int32: a region holds fewer than 2**31 decoys
    ties: np.ndarray  # int32

    @classmethod
    def of(
        cls, candidates: np.ndarray, decoys: np.ndarray, ordered: np.ndarray, values: np.ndarray
    ) -> _Group:
        scores = ordered[candidates]
        reach = np.searchsorted(values[decoys], scores, side="left")
        ties = np.searchsorted(-scores, -scores, side="right") - 1
        return cls(candidates, decoys, reach.astype(np.int32), ties.astype(np.int32))


@dataclass(frozen=True)
class _Grouped:
    """The candidates sorted once, best first, and the finite decoys once, increasing, with each region's
    share of them in every clustering (`_Group`), grouped by the candidates' sources' regions (`by_src`)
    and by their targets' (`by_tgt`): a pass of `regional_precision` only weighs the decoys anew."""

    ordered: np.ndarray  # the candidates' scores, decreasing
    best_first: np.ndarray  # their rows, in that order
    by_value: np.ndarray  # the finite decoys' queries, in increasing order of the decoys
    by_src: list[list[_Group]]  # [clustering][region]
    by_tgt: list[list[_Group]]

    @classmethod
    def of(
        cls,
        scores: np.ndarray,
        pair_rows: tuple[np.ndarray, np.ndarray],
        decoys: np.ndarray,
        labels: RegionLabels,
    ) -> _Grouped:
        finite = np.flatnonzero(np.isfinite(decoys))
        by_value = finite[np.argsort(decoys[finite], kind="stable")]
        values = np.asarray(decoys, np.float64)[by_value]
        query_regions = np.concatenate([labels.src, labels.tgt], axis=1)[:, by_value]
        best_first = np.argsort(-np.asarray(scores, np.float64), kind="stable")
        ordered = np.asarray(scores, np.float64)[best_first]
        sides = (labels.src[:, pair_rows[0][best_first]], labels.tgt[:, pair_rows[1][best_first]])
        grouped: tuple[list[list[_Group]], list[list[_Group]]] = ([], [])
        for clustering, regions in enumerate(query_regions):
            decoy_groups = _groups(regions, labels.regions)
            for side, pair_regions in zip(grouped, sides, strict=True):
                pair_groups = _groups(pair_regions[clustering], labels.regions)
                side.append(
                    [_Group.of(c, d, ordered, values) for c, d in zip(pair_groups, decoy_groups, strict=True)]
                )
        return cls(ordered, best_first, by_value, *grouped)

    def estimate(self, weights: np.ndarray) -> tuple[RegionalPrecision, np.ndarray]:
        """Every region's curve, each decoy of query q counting as `weights[q]` false pairs, and each
        candidate's regional precision (`RegionalPrecision.of` at its own score and regions)."""
        weights = weights[self.by_value]
        total = np.zeros(len(self.ordered))

        def side(groups: list[list[_Group]]) -> list[list[RegionCurve]]:
            curves = []
            for regions in groups:
                curves.append([])
                for group in regions:
                    precision = _local_precision(group.reach, weights[group.decoys])
                    total[group.candidates] += precision[group.ties]
                    curves[-1].append(RegionCurve(self.ordered[group.candidates], precision))
            return curves

        curves = RegionalPrecision(side(self.by_src), side(self.by_tgt))
        precision = np.empty(len(total))
        precision[self.best_first] = total / (2 * len(self.by_src))
        return curves, precision


def _groups(regions: np.ndarray, count: int) -> list[np.ndarray]:
    """The positions of each region's entries in `regions`, in their order there, region by region."""
    order = np.argsort(regions, kind="stable")
    return np.split(order, np.cumsum(np.bincount(regions, minlength=count))[:-1])


class PrecisionCounts:
    """The pairs whose regional precision reaches a threshold, and the translations among them estimated
    as the sum of their precisions (the interface of null_estimate.DecoyCounts, for the planted
    threshold): the precisions sorted once, with their running sums (16 bytes a pair)."""

    def __init__(self, precision: np.ndarray) -> None:
        self.values = np.sort(np.asarray(precision, dtype=np.float64))
        self.sums = np.concatenate([[0.0], np.cumsum(self.values[::-1])])

    def kept(self, threshold: float) -> int:
        return len(self.values) - int(np.searchsorted(self.values, threshold, side="left"))

    def true(self, threshold: float) -> float:
        return float(self.sums[self.kept(threshold)])

    def precision(self, threshold: float) -> float | None:
        kept = self.kept(threshold)
        return self.true(threshold) / kept if kept else None
