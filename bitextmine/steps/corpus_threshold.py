"""The threshold `mine` learns inside the corpus it mines: the calibration pairs kept beside the threshold
store (calibration/pairs_store.py) planted in the corpus (calibration/planted.py), searched with the
corpus's own indexes after its candidates are selected."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from bitextmine.calibration.pairs_store import load_pairs, pairs_file
from bitextmine.calibration.planted import (
    CalibrationPairs,
    CorpusEstimate,
    CorpusMeans,
    Search,
    estimate_at,
    learn_threshold,
    plant,
)
from bitextmine.calibration.thresholds import ThresholdChoice
from bitextmine.errors import BitextmineError
from bitextmine.mining.null_estimate import DecoyCounts
from bitextmine.mining.selection import Selection
from bitextmine.mining.settings import MiningSettings
from bitextmine.search.knn import Neighbours
from bitextmine.search.language_search import BaseSearch
from bitextmine.workspace.layout import Workspace

PLANTING_COUNTS = (
    "planted_pairs",
    "planted_duplicates",
    "planted_recall",
    "estimated_recall",
    "estimated_translations",
)


@dataclass(frozen=True)
class InCorpus:
    """The threshold used, and what planting the calibration pairs estimates it keeps (None: no pairs
    were planted, or too few were found to estimate)."""

    threshold: ThresholdChoice
    estimate: CorpusEstimate | None
    planted: int  # calibration pairs planted
    duplicates: int  # calibration pairs left out because the corpus holds one of their sentences

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
            "planted_recall": None if estimate is None else round(100 * estimate.planted_recall, 2),
            "estimated_recall": None if estimate is None else round(100 * estimate.recall, 2),
            "estimated_translations": None if estimate is None else estimate.translations,
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
    searches: tuple[Search, Search],
    settings: MiningSettings,
) -> InCorpus:
    """Plant `pairs` in the corpus whose candidates `selection` holds (`counts`: its decoy counts) and
    whose source and target sides `searches` search; where `learn`, the threshold is the one learned
    there (unless too few pairs are found: then `threshold` stays, the calibrated one), else the estimate
    is taken at `threshold`."""
    means = CorpusMeans(np.asarray(selection.fwd_means), np.asarray(selection.bwd_means))
    planted = plant(
        pairs,
        *searches,
        means,
        k=settings.k,
        margin=settings.margin,
        strategy=settings.strategy,
    )
    estimate = learn_threshold(planted, counts) if learn else estimate_at(planted, counts, threshold.value)
    if learn and estimate is not None:
        source = (
            f"learned inside this corpus from {len(planted.found):,} planted calibration pairs "
            f"({threshold.source})"
        )
        threshold = ThresholdChoice(estimate.threshold, threshold.pair, source)
    return InCorpus(threshold, estimate, len(planted.found), planted.duplicates)
