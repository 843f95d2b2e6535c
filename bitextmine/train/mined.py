"""Mined pairs as training data: `mine`'s output read back, kept by score and optionally weighted by it.

Every format of `bitextmine.mining.mined_file` is read. A TSV whose first line has two fields is a pair
TSV (``xx<TAB>en``) instead. The languages come from the file name as `mine` writes it: ``de-en.tsv.zst``,
or ``en-de.tsv.zst`` (then the sides are swapped, so that English is the target as in every training
pair; `train.data` reads the name).

Weights (``--weight-by-score``): a kept pair with score s weighs ``(s - floor) / scale``, where floor
is ``--min-score`` (without it: the file's lowest kept score) and scale is the mean of ``s - floor``
over the file's kept pairs, so a file's weights average 1 and a pair at the floor weighs 0. When every
kept pair scores the floor, each weighs 1.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bitextmine.errors import BitextmineError, Warn, warn_user
from bitextmine.mining.mined_file import TSV_FIELDS, TSV_LAYOUT, mined_records, parse_score
from bitextmine.text.cleaning import clean_line
from bitextmine.text.reader import read_lines


@dataclass(frozen=True)
class ScoreUse:
    """What `train` does with mined scores: keep pairs scoring >= min_score (None: all), weight them."""

    min_score: float | None = None
    weighted: bool = False


NO_SCORE_USE = ScoreUse()


@dataclass(frozen=True)
class MinedSelection:
    """How one mined file is read: its format and side order, which pairs are kept, what each weighs."""

    format: str
    swapped: bool  # the file's source side is English
    min_score: float | None
    floor: float | None  # weighted: a pair weighs (score - floor) / scale; None: unweighted
    scale: float
    kept: int
    total: int

    def weight(self, score: float) -> float | None:
        if self.floor is None:
            return None
        return (score - self.floor) / self.scale if self.scale > 0 else 1.0


def is_mined(path: Path, fmt: str) -> bool:
    """jsonl and parquet files are mined; a TSV is mined unless its first line has two fields (a pair
    TSV); an empty one is mined if compressed. A first line that fits neither is an error."""
    if not fmt.startswith("tsv"):
        return True
    with contextlib.closing(read_lines(path, _warned_when_streamed)) as lines:
        first = next(lines, None)
    if first is None:
        return fmt != "tsv"
    number, line = first
    fields = line.split("\t")
    if len(fields) == 2:
        return False
    if len(fields) not in TSV_FIELDS:
        raise BitextmineError(
            f"{path}:{number}: expected 'xx<TAB>en' (a pair TSV) or {TSV_LAYOUT} (mine's output), "
            f"got {len(fields)} fields"
        )
    parse_score(fields[0], f"{path}:{number}")
    return True


def select_mined(path: Path, fmt: str, swapped: bool, scores: ScoreUse) -> MinedSelection:
    """Read the whole file once: check every record, count the pairs `scores` keeps, fit the weights."""
    total, kept, kept_sum, lowest, highest, highest_kept = 0, 0, 0.0, math.inf, -math.inf, -math.inf
    for score, src, tgt in mined_records(path, fmt, _warned_when_streamed):
        total, highest = total + 1, max(highest, score)
        if _accepted(score, src, tgt, scores.min_score):
            kept, kept_sum = kept + 1, kept_sum + score
            lowest, highest_kept = min(lowest, score), max(highest_kept, score)
    if total and not kept and scores.min_score is not None:
        raise BitextmineError(
            f"{path}: none of its {total:,} pairs has score >= {scores.min_score} and two non-empty "
            f"sides (highest score {highest:.4f})"
        )
    floor, scale = None, 1.0
    if scores.weighted and kept:
        floor = lowest if scores.min_score is None else scores.min_score
        scale = kept_sum / kept - floor if highest_kept > floor else 0.0  # 0: every pair weighs 1
    return MinedSelection(fmt, swapped, scores.min_score, floor, scale, kept, total)


def describe(path: str, selection: MinedSelection) -> str:
    """One line for the log: how many pairs a mined file gives and what they weigh."""
    kept = f"{selection.kept:,} of {selection.total:,} mined pairs"
    if selection.min_score is not None:
        kept += f" with score >= {selection.min_score}"
    if selection.floor is not None and selection.scale > 0:
        kept += f", weighted (score - {selection.floor:.4f}) / {selection.scale:.4f}"
    elif selection.floor is not None:
        kept += ", each weighing 1 (they score alike)"
    return f"{path}: {kept}"


def read_mined(
    path: str, selection: MinedSelection, max_chars: int = 2000, warn: Warn = warn_user
) -> Iterator[tuple[str, str, float | None]]:
    """(xx sentence, English sentence, weight) of every kept pair, in file order."""
    for score, src, tgt in mined_records(Path(path), selection.format, warn):
        pair = _accepted(score, src, tgt, selection.min_score)
        if pair is not None:
            xx, en = pair[::-1] if selection.swapped else pair
            yield xx[:max_chars], en[:max_chars], selection.weight(score)


def _accepted(score: float, src: str, tgt: str, min_score: float | None) -> tuple[str, str] | None:
    """The cleaned sides of a kept pair; None for pairs below min_score or with an empty side."""
    if min_score is not None and score < min_score:
        return None
    src, tgt = clean_line(src), clean_line(tgt)
    return (src, tgt) if src and tgt else None


def _warned_when_streamed(message: str) -> None:
    """Reading ahead warns nothing: the training stream reads the file again and warns then."""
