"""The calibrate step, and scoring on BUCC-format splits: learn the margin threshold with the best F1 on
a split and store it in the model dir, or measure P/R/F1 at a threshold."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bitextmine.encoder.encoder import ProgressCallback, SentenceEncoder
from bitextmine.errors import BitextmineError
from bitextmine.evaluation.bucc import BuccSplit, Scores, SweepResult
from bitextmine.evaluation.calibration import MiningSettings, calibrate_threshold, mine_split, scores_at
from bitextmine.evaluation.thresholds import calibrated_threshold, store_threshold


@dataclass
class Calibration:
    pair: str
    split: str
    settings: MiningSettings
    result: SweepResult  # the threshold and the P/R/F1 it gives on the split
    stored_in: Path  # the model dir's bitextmine.json


@dataclass
class BuccEvaluation:
    scores: Scores
    threshold: float
    candidates: int  # one-to-one candidates before the threshold


def calibrate(
    split: BuccSplit,
    encoder: SentenceEncoder,
    settings: MiningSettings | None = None,
    cache_dir: Path | None = None,
    progress: ProgressCallback | None = None,
) -> Calibration:
    """Encode and mine the split exactly, find the threshold with the best F1 and store it in the
    encoder's model dir (per pair and as the margin's default) for `mine --threshold auto`."""
    settings = settings or MiningSettings()
    result = calibrate_threshold(mine_split(split, encoder, settings, cache_dir, progress))
    stored = store_threshold(encoder.loaded.model_dir, settings.margin, split.pair, result.threshold)
    return Calibration(split.pair, split.split, settings, result, stored)


def evaluate_bucc(
    split: BuccSplit,
    encoder: SentenceEncoder,
    threshold: float | str = "auto",
    settings: MiningSettings | None = None,
    cache_dir: Path | None = None,
    progress: ProgressCallback | None = None,
) -> BuccEvaluation:
    """P/R/F1 of the split mined with `encoder`, keeping pairs scoring >= `threshold`: a number, "auto"
    (calibrated for this pair, from the model dir) or "oracle" (the best threshold on this split)."""
    settings = settings or MiningSettings()
    mined = mine_split(split, encoder, settings, cache_dir, progress)
    if threshold == "oracle":
        used = calibrate_threshold(mined).threshold
    elif threshold == "auto":
        used = calibrated_threshold(encoder.loaded.model_dir, settings.margin, split.pair)
    else:
        used = _number(threshold)
    return BuccEvaluation(scores_at(mined, used), used, len(mined.candidates))


def _number(value: float | str) -> float:
    try:
        return float(value)
    except ValueError:
        raise BitextmineError(f"--threshold must be auto, oracle or a number, not {value!r}") from None
