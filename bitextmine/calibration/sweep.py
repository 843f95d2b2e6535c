"""The threshold sweep over a split's one-to-one candidates (docs/design.md).

It follows DAP appendix B and LASER's BUCC script: sort the candidate scores and try a threshold at every
midpoint between consecutive distinct scores, keeping the best F1 (or, with a target precision, the
lowest threshold that reaches it; with a plateau, the middle of the thresholds near the best F1). The
whole curve is kept for reports and plots.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bitextmine.calibration.bucc import BuccError, Scores
from bitextmine.errors import BitextmineError

BEST_F1 = "best F1"


@dataclass(frozen=True, eq=False)
class SweepCurve:
    """Every threshold the sweep tried, decreasing, and what keeping the scores >= it gives."""

    thresholds: np.ndarray
    true_positives: np.ndarray
    kept: np.ndarray
    gold: int

    def scores(self, point: int) -> Scores:
        return Scores.of(int(self.true_positives[point]), int(self.kept[point]), self.gold)

    def precision(self) -> np.ndarray:
        return np.divide(self.true_positives, self.kept, out=np.zeros(self.kept.shape), where=self.kept > 0)

    def f1(self) -> np.ndarray:
        return 2 * self.true_positives / (self.kept + self.gold)

    def rows(self) -> list[dict[str, float]]:
        """One JSON object a threshold: the threshold, precision, recall and F1 in percent, kept, TP."""
        return [
            {"threshold": float(t), **self.scores(i).as_percent(), "kept": int(k), "true_positives": int(tp)}
            for i, (t, k, tp) in enumerate(zip(self.thresholds, self.kept, self.true_positives, strict=True))
        ]


@dataclass(frozen=True)
class SweepResult:
    threshold: float  # keep candidates with score >= threshold
    scores: Scores
    candidates: int  # number of candidate pairs swept over
    curve: SweepCurve
    rule: str = BEST_F1  # how the threshold was chosen: BEST_F1, target_rule(P) or plateau_rule(points)


def sweep_threshold(
    scores: np.ndarray,
    is_gold: np.ndarray,
    gold_total: int,
    target_precision: float | None = None,
    plateau: float | None = None,
) -> SweepResult:
    """The threshold with the best F1 over one-to-one candidates, among equal F1 the higher one; with
    `target_precision`, the lowest threshold whose precision is at least that (a BuccError if none is);
    with `plateau` (F1 points, above 0), the middle of the thresholds whose F1 is within that of the best.

    Tried: the midpoint between each two consecutive distinct scores, the minimum score (keeps all)
    and one above the maximum (keeps none). Thresholds are exact values of the scores' dtype (float32
    stays float32), so ``scores >= threshold`` reproduces the returned Scores exactly.
    """
    check_rule(target_precision, plateau)
    curve = sweep_curve(scores, is_gold, gold_total)
    if target_precision is not None:
        point, rule = _lowest_reaching(curve, target_precision), target_rule(target_precision)
    elif plateau:  # plateau 0 is the best F1
        point, rule = _plateau_middle(curve, plateau), plateau_rule(plateau)
    else:
        point, rule = int(np.argmax(curve.f1())), BEST_F1  # the first maximum is the highest threshold
    return SweepResult(float(curve.thresholds[point]), curve.scores(point), int(curve.kept[-1]), curve, rule)


def sweep_curve(scores: np.ndarray, is_gold: np.ndarray, gold_total: int) -> SweepCurve:
    """Every threshold of the sweep (see `sweep_threshold`), decreasing, with its kept and true counts."""
    values, gold_flags = _check_sweep_input(scores, is_gold, gold_total)
    order = np.argsort(values)[::-1]  # the order within ties does not matter: no cut falls inside one
    values, hits = values[order], np.cumsum(gold_flags[order])
    # keep the top `keep` candidates; a cut only where the next score is strictly lower (ties together)
    keep = np.append(np.flatnonzero(values[:-1] > values[1:]) + 1, values.size)
    return SweepCurve(
        thresholds=np.concatenate([[_above(values[0])], _midpoints(values, keep)]),
        true_positives=np.concatenate([[0], hits[keep - 1]]),
        kept=np.concatenate([[0], keep]),
        gold=gold_total,
    )


def target_rule(target_precision: float) -> str:
    """The rule recorded for a threshold chosen by `--target-precision` (checked here)."""
    if not 0 < target_precision <= 1:
        raise BitextmineError(f"--target-precision must be above 0 and at most 1, not {target_precision}")
    return f"precision >= {target_precision:g}"


def plateau_rule(points: float) -> str:
    """The rule recorded for a threshold chosen by `--plateau` (checked here)."""
    if not 0 <= points < 100:
        raise BitextmineError(f"--plateau must be at least 0 and below 100 F1 points, not {points}")
    return f"middle of F1 within {points:g} of the best"


def check_rule(target_precision: float | None, plateau: float | None) -> None:
    """One rule at most, each within its range (before any encoding)."""
    if target_precision is not None and plateau is not None:
        raise BitextmineError("--target-precision and --plateau are two rules for the threshold: give one")
    if target_precision is not None:
        target_rule(target_precision)
    if plateau is not None:
        plateau_rule(plateau)


def _plateau_middle(curve: SweepCurve, points: float) -> int:
    """The sweep point nearest the middle of the thresholds whose F1 is within `points` of the best: on a
    flat optimum (a trained model's scores) a score shift moves the best-F1 threshold's F1 least there."""
    f1 = curve.f1()
    near = np.flatnonzero(f1 >= f1.max() - points / 100 - 1e-12)
    thresholds = curve.thresholds[near].astype(np.float64)
    middle = (thresholds.max() + thresholds.min()) / 2
    return int(near[np.argmin(np.abs(thresholds - middle))])


def _lowest_reaching(curve: SweepCurve, target_precision: float) -> int:
    target_rule(target_precision)
    precision = curve.precision()
    reaching = np.flatnonzero(precision >= target_precision)
    if reaching.size == 0:
        best = int(np.argmax(precision))
        raise BuccError(
            f"no threshold reaches precision {target_precision:g} (the highest is {precision[best]:.4f}, "
            f"at threshold {curve.thresholds[best]:.4f}): lower --target-precision"
        )
    return int(reaching[-1])  # thresholds decrease: the last one reaching the target is the lowest


def _check_sweep_input(
    scores: np.ndarray, is_gold: np.ndarray, gold_total: int
) -> tuple[np.ndarray, np.ndarray]:
    values = np.asarray(scores)
    if values.dtype != np.float32:
        values = values.astype(np.float64)
    gold_flags = np.asarray(is_gold, dtype=bool)
    if values.ndim != 1 or values.shape != gold_flags.shape:
        raise ValueError(f"scores {values.shape} and is_gold {gold_flags.shape} must be 1-D of one length")
    if values.size == 0:
        raise BuccError("no candidate pairs to calibrate on")
    if gold_total <= 0:
        raise BuccError("no gold pairs to calibrate on (the gold file is empty)")
    if not np.isfinite(values).all():
        raise BuccError("candidate scores to calibrate on must be finite (found NaN or infinity)")
    if int(gold_flags.sum()) > gold_total:
        raise ValueError(f"{int(gold_flags.sum())} candidates are gold but gold_total is {gold_total}")
    return values, gold_flags


def _midpoints(values: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Threshold keeping exactly values[:k] for each k in `keep` (values sorted descending)."""
    last_kept, first_dropped = values[keep[:-1] - 1], values[keep[:-1]]
    with np.errstate(over="ignore"):
        middle = (last_kept + first_dropped) / 2
    # rounding can land the midpoint on the lower score (adjacent floats) or overflow: then use the kept one
    middle = np.where((middle > first_dropped) & (middle <= last_kept), middle, last_kept)
    return np.append(middle, values[-1])


def _above(top: np.floating) -> np.floating:
    """A threshold above every score, top + 1 where that is representable as larger."""
    return max(top + 1, np.nextafter(top, np.inf))
