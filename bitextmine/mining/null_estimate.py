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

COUNT_ROWS = 1_000_000  # scores counted at once

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


def estimated_precision(
    candidate_scores: np.ndarray, decoys: np.ndarray, threshold: float, directions: int
) -> float | None:
    """The estimated share of translations among the candidates scoring >= `threshold`: 1 less the decoys
    reaching it (per direction pooled) over those candidates, at least 0; None when none reach it."""
    kept = _count_at_least(candidate_scores, threshold)
    if kept == 0:
        return None
    false = _count_at_least(decoys, threshold) / directions
    return max(0.0, 1.0 - false / kept)


def _count_at_least(values: np.ndarray, threshold: float) -> int:
    return sum(
        int(np.count_nonzero(np.asarray(values[a : a + COUNT_ROWS]) >= threshold))
        for a in range(0, len(values), COUNT_ROWS)
    )
