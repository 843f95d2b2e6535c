"""`mine`'s output read back, in every format of `bitextmine.mining.output`: ``tsv.zst``, ``tsv.gz`` and
``tsv`` (``score<TAB>src<TAB>tgt<TAB>src id<TAB>tgt id[<TAB>src meta<TAB>tgt meta]``), ``jsonl`` and
``parquet`` (columns score, src, tgt, ...), as (score, src, tgt) records; a malformed record is a
one-line error naming the file and line (or row). Read by `train` (train/mined.py) and `eval bucc
--mined`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bitextmine.errors import BitextmineError
from bitextmine.mining.output import FORMATS
from bitextmine.text.reader import Warn, read_lines

TSV_FIELDS = (5, 7)  # without and with the two meta columns
TSV_LAYOUT = "'score<TAB>src<TAB>tgt<TAB>src id<TAB>tgt id[<TAB>src meta<TAB>tgt meta]'"
NEEDED_COLUMNS = ("score", "src", "tgt")
PARQUET_BATCH_ROWS = 65_536


def mined_format(path: Path) -> str | None:
    """The mined-output format `path`'s name ends with (None: not one of them)."""
    return next((fmt for fmt in FORMATS if path.name.endswith(f".{fmt}")), None)


def mined_records(path: Path, fmt: str, warn: Warn) -> Iterator[tuple[float, str, str]]:
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
        yield parse_score(fields[0], f"{path}:{number}"), fields[1], fields[2]


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


def parse_score(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise BitextmineError(f"{where}: score {text!r} is not a number") from None
    return _finite(value, text, where)


def _finite(value: float, shown: Any, where: str) -> float:
    if not math.isfinite(value):
        raise BitextmineError(f"{where}: score {shown!r} is not a finite number")
    return value
