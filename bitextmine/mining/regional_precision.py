"""Each candidate pair's precision, estimated among the candidates of its own region of the embedding
space (mining/regions.py): the score `mine --threshold auto` thresholds where it plants calibration pairs.

One margin threshold cannot serve a corpus with dense and sparse regions: where neighbours are nearly as
close as a translation (captions, templates) translations score lower than false pairs do elsewhere.
Within one region, the decoys of its queries (mining/null_estimate.py) reaching a score t stand for the
false pairs among its candidates reaching t, so TP(t) = kept(t) - false(t) estimates its translations.
Each decoy counts as one false pair: counted per direction pooled, as the corpus-wide estimate counts
them, a region without translations comes out near half precision at its top (the one-to-one pass keeps
the better of each sentence's competing candidates, which score above their queries' decoys). But a
sentence with a translation has a decoy too, which stands for no false pair: where translations are
dense their decoys would sink the region's precision. So the precisions are estimated again, each
decoy of a query whose own candidate is likely a translation now counting as the chance that it is
none (one minus that candidate's precision).

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

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from bitextmine.mining.regions import Regions

if TYPE_CHECKING:
    from bitextmine.search.gemm import VectorSource

REWEIGHTINGS = 2  # passes after the first: the precisions settle in two
# A decoy weighs less only where its query's candidate is more likely a translation than not: a false
# pair that lowered its own decoy would raise its own precision, pass after pass.
LIKELY_TRANSLATION = 0.5


def concave_slopes(gains: np.ndarray) -> np.ndarray:
    """Slopes of the least concave majorant of the points (i, gains[i - 1]), i = 1..n, and (0, 0): each
    point's the slope of the hull segment that spans it (float64 [n])."""
    ys = [0.0, *np.asarray(gains, dtype=np.float64).tolist()]
    hull = [0]
    for i in range(1, len(ys)):
        while len(hull) >= 2 and _on_or_below(hull[-2], hull[-1], i, ys):
            hull.pop()
        hull.append(i)
    slopes = np.empty(len(ys) - 1)
    for a, b in itertools.pairwise(hull):
        slopes[a:b] = (ys[b] - ys[a]) / (b - a)
    return slopes


def _on_or_below(a: int, b: int, c: int, ys: list[float]) -> bool:
    """Whether point b lies on or below the segment from point a to point c (x = the index)."""
    return (ys[b] - ys[a]) * (c - a) <= (ys[c] - ys[a]) * (b - a)


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
    ordered = np.sort(np.asarray(scores, dtype=np.float64))[::-1]
    decoys = np.asarray(decoys, dtype=np.float64)
    weights = np.ones(len(decoys)) if weights is None else np.asarray(weights, dtype=np.float64)
    order = np.argsort(decoys, kind="stable")
    below = np.concatenate([[0.0], np.cumsum(weights[order])])  # weight of the decoys below each
    false = below[-1] - below[np.searchsorted(decoys[order], ordered, side="left")]
    gains = np.arange(1, len(ordered) + 1) - false
    return RegionCurve(ordered, np.clip(concave_slopes(gains), 0.0, 1.0))


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
    rounds: int = REWEIGHTINGS,
) -> tuple[RegionalPrecision, np.ndarray]:
    """The curves of the one-to-one candidates (`scores`, their source and target rows `pair_rows`),
    with the queries' `decoys` (source queries, then target queries; NaN for none) counted in their
    query's region, and the candidates' regional precision: after a first pass with every decoy one false
    pair, `rounds` more with the decoys of queries whose candidate is likely a translation weighing the
    chance that it is none (module docstring)."""
    weights = np.ones(len(decoys))
    for round_ in range(rounds + 1):
        curves = _curves(scores, pair_rows, decoys, weights, labels)
        precision = curves.of(scores, labels.src[:, pair_rows[0]], labels.tgt[:, pair_rows[1]])
        if round_ < rounds:
            weights = np.ones(len(decoys))
            likely = np.where(precision >= LIKELY_TRANSLATION, 1.0 - precision, 1.0)
            weights[pair_rows[0]] = likely
            weights[labels.src.shape[1] + pair_rows[1]] = likely  # target queries follow the sources
    return curves, precision


def _curves(
    scores: np.ndarray,
    pair_rows: tuple[np.ndarray, np.ndarray],
    decoys: np.ndarray,
    weights: np.ndarray,
    labels: RegionLabels,
) -> RegionalPrecision:
    query_regions = np.concatenate([labels.src, labels.tgt], axis=1)
    finite = np.isfinite(decoys)

    def curves(pair_regions: np.ndarray) -> list[list[RegionCurve]]:
        return [
            [
                region_curve(scores[pair_regions[c] == r], decoys[mine], weights[mine])
                for r in range(labels.regions)
                for mine in (finite & (query_regions[c] == r),)
            ]
            for c in range(len(labels.src))
        ]

    return RegionalPrecision(curves(labels.src[:, pair_rows[0]]), curves(labels.tgt[:, pair_rows[1]]))


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
