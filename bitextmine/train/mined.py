"""Mined pairs as training data: `mine`'s output read back, kept by score and optionally weighted by it.

Every format of `bitextmine.mining.output` is read: ``tsv.zst``, ``tsv.gz`` and ``tsv`` (``score<TAB>src
<TAB>tgt<TAB>src id<TAB>tgt id[<TAB>src meta<TAB>tgt meta]``), ``jsonl`` and ``parquet`` (columns score,
src, tgt, ...). A TSV whose first line has two fields is a pair TSV (``xx<TAB>en``) instead. The
languages come from the file name as `mine` writes it: ``de-en.tsv.zst``, or ``en-de.tsv.zst`` (then
the sides are swapped, so that English is the target as in every training pair; `train.data` reads
the name).

Weights (``--weight-by-score``): a kept pair with score s weighs ``(s - floor) / scale``, where floor
is ``--min-score`` (without it: the file's lowest kept score) and scale is the mean of ``s - floor``
over the file's kept pairs, so a file's weights average 1 and a pair at the floor weighs 0. When every
kept pair scores the floor, each weighs 1.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bitextmine.errors import BitextmineError
from bitextmine.mining.output import FORMATS
from bitextmine.text.cleaning import clean_line
from bitextmine.text.reader import Warn, read_lines, warn_user

TSV_FIELDS = (5, 7)  # without and with the two meta columns
TSV_LAYOUT = "'score<TAB>src<TAB>tgt<TAB>src id<TAB>tgt id[<TAB>src meta<TAB>tgt meta]'"
NEEDED_COLUMNS = ("score", "src", "tgt")
PARQUET_BATCH_ROWS = 65_536


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


def table_format(path: Path) -> str | None:
    """The mined-output format `path`'s name ends with (None: not one of them)."""
    return next((fmt for fmt in FORMATS if path.name.endswith(f".{fmt}")), None)


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
    _score(fields[0], f"{path}:{number}")
    return True


def select_mined(path: Path, fmt: str, swapped: bool, scores: ScoreUse) -> MinedSelection:
    """Read the whole file once: check every record, count the pairs `scores` keeps, fit the weights."""
    total, kept, kept_sum, lowest, highest, highest_kept = 0, 0, 0.0, math.inf, -math.inf, -math.inf
    for score, src, tgt in _records(path, fmt, _warned_when_streamed):
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
    for score, src, tgt in _records(Path(path), selection.format, warn):
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


def _records(path: Path, fmt: str, warn: Warn) -> Iterator[tuple[float, str, str]]:
    """(score, src, tgt) of every record; a malformed one is an error naming file and line (or row)."""
    if fmt == "parquet":
        return _parquet_records(path)
    if fmt == "jsonl":
        return _jsonl_records(path, warn)
    return _tsv_records(path, warn)


def _tsv_records(path: Path, warn: Warn) -> Iterator[tuple[float, str, str]]:
    for number, line in read_lines(path, warn):
        fields = line.split("\t")
        if len(fields) not in TSV_FIELDS:
            raise BitextmineError(f"{path}:{number}: expected mine's {TSV_LAYOUT}, got {len(fields)} fields")
        yield _score(fields[0], f"{path}:{number}"), fields[1], fields[2]


def _jsonl_records(path: Path, warn: Warn) -> Iterator[tuple[float, str, str]]:
    for number, line in read_lines(path, warn):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BitextmineError(f"{path}:{number}: not JSON ({exc.msg})") from None
        yield _fields(record, f"{path}:{number}")


def _parquet_records(path: Path) -> Iterator[tuple[float, str, str]]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise BitextmineError(
            f"{path}: reading parquet needs pyarrow: pip install 'bitextmine[parquet]'"
        ) from None
    number = 0
    try:
        table = pq.ParquetFile(path)
        missing = [c for c in NEEDED_COLUMNS if c not in table.schema_arrow.names]
        if missing:
            raise BitextmineError(
                f"{path}: no {', '.join(missing)} column; mine's output has score, src, tgt"
            )
        for batch in table.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=list(NEEDED_COLUMNS)):
            for record in batch.to_pylist():
                number += 1
                yield _fields(record, f"{path}: row {number}")
    except (OSError, pa.ArrowException) as exc:
        raise BitextmineError(f"{path}: not a readable parquet file ({exc})") from None


def _fields(record: Any, where: str) -> tuple[float, str, str]:
    """(score, src, tgt) of a JSON object or parquet row."""
    if not isinstance(record, dict):
        raise BitextmineError(f"{where}: expected a JSON object with score, src and tgt")
    missing = [key for key in NEEDED_COLUMNS if record.get(key) is None]
    if missing:
        raise BitextmineError(f"{where}: no {', '.join(missing)}")
    score, src, tgt = (record[key] for key in NEEDED_COLUMNS)
    if isinstance(score, bool) or not isinstance(score, int | float):
        raise BitextmineError(f"{where}: score {score!r} is not a number")
    if not isinstance(src, str) or not isinstance(tgt, str):
        raise BitextmineError(f"{where}: src and tgt must be strings")
    return _finite(float(score), score, where), src, tgt


def _score(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise BitextmineError(f"{where}: score {text!r} is not a number") from None
    return _finite(value, text, where)


def _finite(value: float, shown: Any, where: str) -> float:
    if not math.isfinite(value):
        raise BitextmineError(f"{where}: score {shown!r} is not a finite number")
    return value


def _warned_when_streamed(message: str) -> None:
    """Reading ahead warns nothing: the training stream reads the file again and warns then."""
