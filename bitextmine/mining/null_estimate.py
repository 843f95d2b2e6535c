"""How many of the pairs kept at a threshold are translations, estimated from the corpus itself.

Each query sentence's best candidate is its translation or, for a sentence with none in the corpus, the
best of its non-translations: the false pairs above a threshold are the untranslated sentences whose best
non-translation reaches it. A sentence's runner-up candidates are non-translations whatever it is, so
they stand in for that best: its decoy is the runner-up's score moved up by the gap between the second
and third candidates (`runner_up_decoys`), as the best of a sentence's non-translations lies above the
second best by about the gap below it. The decoys reaching a threshold, per direction pooled, estimate
the false pairs among the candidates reaching it (target-decoy competition). A sentence that has a
translation has a decoy too, so the estimate counts too many false pairs where most sentences have their
translation: it errs towards a lower precision.
"""

from __future__ import annotations

import numpy as np

# Directions whose queries' best candidates each strategy pools (mining/selection.py).
POOLED_DIRECTIONS = {"max": 2, "intersect": 2, "fwd": 1, "bwd": 1}


def runner_up_decoys(scores: np.ndarray) -> np.ndarray:
    """Each row's decoy: its second-best score plus the gap to its third; NaN for a row with fewer than
    three finite scores (`scores`: [queries, k], -inf where a neighbour was not found)."""
    if scores.shape[1] < 3:
        return np.full(len(scores), np.nan)
    top = -np.sort(-scores, axis=1)[:, 1:3]
    decoys = 2 * top[:, 0] - top[:, 1]
    return np.where(np.isfinite(top).all(1), decoys, np.nan)


class DecoyCounts:
    """The candidates and the decoys reaching a threshold, counted by bisection: the candidates' scores
    and the decoys (`runner_up_decoys`, NaN for none) are copied into memory once and sorted (8 bytes a
    candidate and a query)."""

    def __init__(self, candidate_scores: np.ndarray, decoys: np.ndarray, directions: int) -> None:
        self.candidates = np.sort(np.asarray(candidate_scores, dtype=np.float64))
        values = np.asarray(decoys, dtype=np.float64)
        self.decoys = np.sort(values[~np.isnan(values)])
        self.directions = directions

    def kept(self, threshold: float) -> int:
        return len(self.candidates) - int(np.searchsorted(self.candidates, threshold, side="left"))

    def true(self, threshold: float) -> float:
        """The candidates reaching `threshold` less the decoys reaching it per direction pooled, >= 0."""
        decoys = len(self.decoys) - int(np.searchsorted(self.decoys, threshold, side="left"))
        return max(0.0, self.kept(threshold) - decoys / self.directions)

    def precision(self, threshold: float) -> float | None:
        """The estimated share of translations among the candidates reaching `threshold`; None when none
        reach it."""
        kept = self.kept(threshold)
        return self.true(threshold) / kept if kept else None
