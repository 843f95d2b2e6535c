"""The threshold `mine` learns inside the corpus it mines: the calibration pairs kept beside the threshold
store (calibration/pairs_store.py) planted in the corpus (calibration/planted.py), searched with the
corpus's own indexes after its candidates are selected.

A learned threshold is one on the pairs' regional precision (mining/regional_precision.py): the corpus's
candidates and the planted pairs each scored in their regions, the translations kept estimated as the
sum of the kept candidates' precisions. A given threshold stays a margin, estimated from the decoys."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bitextmine.calibration.pairs_store import load_pairs, pairs_file
from bitextmine.calibration.planted import (
    MIN_FOUND,
    CalibrationPairs,
    CorpusEstimate,
    CorpusMeans,
    Planted,
    Search,
    best_f1,
    estimate_at,
    plant,
)
from bitextmine.calibration.thresholds import REGIONAL_SCALE, ThresholdChoice
from bitextmine.errors import BitextmineError
from bitextmine.mining.null_estimate import DecoyCounts
from bitextmine.mining.regional_precision import (
    LOWEST_PRECISION,
    PrecisionCounts,
    RegionLabels,
    regional_precision,
)
from bitextmine.mining.regions import fit_regions, region_count, region_mismatch
from bitextmine.mining.selection import Selection
from bitextmine.mining.settings import MiningSettings
from bitextmine.search.knn import Neighbours
from bitextmine.search.language_search import BaseSearch
from bitextmine.workspace.layout import Workspace

if TYPE_CHECKING:
    from bitextmine.search.gemm import VectorSource

# From this mismatch `mine` says the calibration pairs are unlike the corpus's translations: pairs drawn
# from the corpus's own kind stay well below it, news pairs planted in a corpus of captions and news well
# above (examples/benchmarks/results/constants.md, "Calibration unlike the corpus").
UNLIKE_NOTE = 0.25
PLANTING_COUNTS = (
    "planted_pairs",
    "planted_duplicates",
    "estimated_recall",
    "estimated_translations",
    "calibration_unlike",
)


@dataclass(frozen=True)
class InCorpus:
    """The threshold used, and what planting the calibration pairs estimates it keeps (None: no pairs
    were planted, or too few were found to estimate)."""

    threshold: ThresholdChoice
    estimate: CorpusEstimate | None
    planted: int  # calibration pairs planted
    duplicates: int  # calibration pairs left out because the corpus holds one of their sentences
    pair_precision: np.ndarray | None = None  # each candidate's, where the threshold is on that scale
    unlike: float | None = None  # how unlike the planted pairs are to the corpus's translations (_unlike)

    def kept_rows(self) -> np.ndarray | None:
        """The candidates the learned threshold keeps (rows of the selection, best first); None where the
        threshold is a margin, which keeps a prefix of them."""
        if self.pair_precision is None:
            return None
        return np.flatnonzero(self.pair_precision >= self.threshold.value)

    @staticmethod
    def counts_absent() -> dict[str, Any]:
        """The stats' planting counts where nothing was planted."""
        return dict.fromkeys(PLANTING_COUNTS)

    def counts(self) -> dict[str, Any]:
        """What `mine`'s stats record of the planting."""
        estimate = self.estimate
        return {
            "planted_pairs": self.planted,
            "planted_duplicates": self.duplicates,
            "estimated_recall": None if estimate is None else round(100 * estimate.recall, 2),
            "estimated_translations": None if estimate is None else estimate.translations,
            "calibration_unlike": None if self.unlike is None else round(self.unlike, 3),
        }


def calibration_pairs(store: Path, fingerprint: str, pair: str, dim: int) -> CalibrationPairs | None:
    """The calibration pairs kept for `pair` and the model of `fingerprint`, None if there are none; pairs
    of another dimension than the corpus's vectors are a one-line error (checked before any search)."""
    path = pairs_file(store, fingerprint, pair)
    pairs = load_pairs(path)
    if pairs is not None and pairs.src.shape[1] != dim:
        raise BitextmineError(
            f"{path}: calibration pairs of dim {pairs.src.shape[1]} for vectors of dim {dim}; calibrate again"
        )
    return pairs


def language_search(workspace: Workspace, base: BaseSearch) -> Search:
    """Queries held in memory searched against `base`'s language of `workspace`, k neighbours each."""

    def search(queries: np.ndarray, k: int) -> Neighbours:
        return replace(base, k=k).neighbours(workspace, lambda: [(0, queries)], len(queries))

    return search


def in_corpus(
    pairs: CalibrationPairs,
    threshold: ThresholdChoice,
    learn: bool,
    selection: Selection,
    counts: DecoyCounts,
    corpus: tuple[Search, Search, VectorSource, VectorSource],
    settings: MiningSettings,
    *,
    min_precision: float | None = None,
) -> InCorpus:
    """Plant `pairs` in the corpus whose candidates `selection` holds (`counts`: its decoy counts) and
    whose source and target sides `corpus` searches and holds; where `learn`, the threshold is the
    regional precision learned there, or `min_precision` where given (unless too few pairs are found:
    then `threshold` stays, the calibrated margin, and a `min_precision` is an error), else the estimate
    is taken at `threshold`."""
    means = CorpusMeans(np.asarray(selection.fwd_means), np.asarray(selection.bwd_means))
    planted = plant(
        pairs,
        corpus[0],
        corpus[1],
        means,
        k=settings.k,
        margin=settings.margin,
        strategy=settings.strategy,
    )
    if not learn:
        estimate = estimate_at(planted, counts, threshold.value)
        return InCorpus(threshold, estimate, len(planted.found), planted.duplicates)
    if np.isfinite(planted.found).sum() < MIN_FOUND:  # too few to learn from: no regions fitted
        _check_learned(min_precision, planted)
        return InCorpus(threshold, None, len(planted.found), planted.duplicates)
    precision, planted_precision, unlike = _regional(
        selection, pairs.subset(planted.rows), planted, corpus[2:]
    )
    above_floor = PrecisionCounts(_as_translations(precision))
    if min_precision is None:
        estimate = _half_the_best_f1(planted_precision, above_floor)
    else:
        estimate = estimate_at(planted_precision, above_floor, min_precision)
    if estimate is None:
        return InCorpus(threshold, None, len(planted.found), planted.duplicates)
    given = "" if min_precision is None else "--min-precision, on the "
    source = (
        f"{given}regional precision learned inside this corpus from {len(planted.found):,} planted "
        f"calibration pairs ({threshold.source})"
    )
    learned = ThresholdChoice(estimate.threshold, threshold.pair, source, scale=REGIONAL_SCALE)
    return InCorpus(learned, estimate, len(planted.found), planted.duplicates, precision, unlike)


def _check_learned(min_precision: float | None, planted: Planted) -> None:
    """A `min_precision` needs the regional precision, which too few found planted pairs leave unfitted."""
    if min_precision is not None:
        found = int(np.isfinite(planted.found).sum())
        raise BitextmineError(
            f"--min-precision {min_precision:g}: only {found} of {len(planted.found):,} planted calibration "
            f"pairs were found in this corpus, too few (at least {MIN_FOUND}) to estimate its regional "
            "precision; mine with --threshold auto alone (the calibrated margin) or a numeric --threshold"
        )


def _half_the_best_f1(planted: Planted, counts: PrecisionCounts) -> CorpusEstimate | None:
    """The estimate at half the best F1 that the planted pairs estimate over the regional precision, and
    at least LOWEST_PRECISION: the threshold that keeps every pair whose local precision is at
    least half the F1 reached (F1's optimum, mining/regional_precision.py). The best estimated F1's own
    threshold sits higher where the estimates err (the precisions err low, the planted pairs are found
    more easily than the corpus's hardest), which costs recall."""
    best = best_f1(planted, counts)
    if best is None:
        return None
    return estimate_at(planted, counts, max(best[1] / 2, LOWEST_PRECISION))


def _regional(
    selection: Selection, pairs: CalibrationPairs, planted: Planted, corpus: tuple[VectorSource, VectorSource]
) -> tuple[np.ndarray, Planted, float | None]:
    """The regional precision of every candidate, the planted pairs with theirs in place of their
    margins (regions fitted on the corpus's two sides), and how unlike the found planted pairs' regions
    are to those of the corpus's translations (`_unlike`)."""
    regions = fit_regions(corpus, region_count(sum(len(side) for side in corpus)))
    labels = RegionLabels.of(regions, *corpus)
    records = selection.records
    scores, rows = np.asarray(records["score"]), (np.asarray(records["src"]), np.asarray(records["tgt"]))
    decoys = np.asarray(selection.decoys)
    curves, precision = regional_precision(scores, rows, decoys, labels, selection.directions)
    found = np.isfinite(planted.found)
    planted_labels = regions.assign_array(pairs.src[found]), regions.assign_array(pairs.tgt[found])
    planted_precision = np.full(len(planted.found), -np.inf)
    planted_precision[found] = curves.of(planted.found[found], *planted_labels)
    candidate_labels = labels.src[:, rows[0]], labels.tgt[:, rows[1]]
    unlike = _unlike(precision, candidate_labels, planted_labels, labels.regions)
    return precision, replace(planted, found=planted_precision), unlike


def _unlike(
    precision: np.ndarray,
    candidates: tuple[np.ndarray, np.ndarray],
    planted: tuple[np.ndarray, np.ndarray],
    regions: int,
) -> float | None:
    """How unlike the planted pairs' regions are to the corpus's translations' (the candidates weighted by
    `_as_translations`), by `region_mismatch`, averaged over the two sides; None where no candidate
    reaches LOWEST_PRECISION."""
    weights = _as_translations(precision)
    if not weights.sum():
        return None
    sides = zip(candidates, planted, strict=True)
    return float(np.mean([region_mismatch(labels, weights, sample, regions) for labels, sample in sides]))


def _as_translations(precision: np.ndarray) -> np.ndarray:
    """What each candidate counts for as a translation: its regional precision from LOWEST_PRECISION, 0
    below it (mining/regional_precision.py: false pairs' small precisions would add up to translations)."""
    return np.where(precision >= LOWEST_PRECISION, precision, 0.0)
