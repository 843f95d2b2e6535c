"""Calibrated margin thresholds, kept in a threshold store keyed by model fingerprint, margin and pair.

The store is ``WORK/thresholds.json`` or a file the user names (``--thresholds FILE``), never the
model dir, which may be shared, read-only or the Hugging Face cache. Layout::

    {"thresholds": [{"fingerprint": "3f0c...", "model": "intfloat/multilingual-e5-small",
                     "margin": "ratio", "pair": "de-en", "value": 1.0311, "split": "dev",
                     "precision": 95.75, "recall": 95.75, "f1": 95.75, "rule": "best F1",
                     "date": "2025-06-01T12:00:00+00:00"}, ...]}

one record per fingerprint, margin and pair: a ratio threshold means nothing for the distance margin,
and score scales differ between pairs, so a pair's threshold serves that pair unless the user asks
for another's (``auto:PAIR``). Calibrations read, modify and replace the file holding an flock on a
sibling lock file, so concurrent calibrations of different pairs all survive; readers take no lock
(the file is replaced atomically).

Model dirs calibrated before the store existed carry ``{"thresholds": {"ratio": {"de-en": t}}}`` in
their ``bitextmine.json``; it is read when the store has nothing for the fingerprint, margin and pair.
Its ``"default"`` entry (bitextmine 0.1: the last pair calibrated) is ignored.
"""

from __future__ import annotations

import fcntl
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from pathlib import Path
from typing import Any

from bitextmine.encoder.settings import BITEXTMINE_CONFIG
from bitextmine.errors import BitextmineError
from bitextmine.evaluation.bucc import BEST_F1, SweepResult
from bitextmine.files import WriteError, read_json, write_json
from bitextmine.text.languages import parse_pair

_OLD_DEFAULT = "default"
_NUMBERS = {"value", "precision", "recall", "f1"}


@dataclass(frozen=True)
class ThresholdRecord:
    """One calibrated threshold and how it was chosen (precision, recall, F1 in percent)."""

    fingerprint: str
    model: str
    margin: str
    pair: str
    value: float
    split: str
    precision: float
    recall: float
    f1: float
    rule: str  # BEST_F1 or "precision >= P"
    date: str

    @classmethod
    def from_sweep(
        cls, result: SweepResult, *, fingerprint: str, model: str, margin: str, pair: str, split: str
    ) -> ThresholdRecord:
        date = datetime.now().astimezone().isoformat(timespec="seconds")
        scores = result.scores.as_percent()
        return cls(
            fingerprint, model, margin, pair, result.threshold, split, **scores, rule=result.rule, date=date
        )

    def describe(self) -> str:
        """E.g. ``calibrated for de-en on dev (best F1 95.75)``."""
        if self.rule == BEST_F1:
            how = f"best F1 {self.f1:.2f}"
        else:
            how = f"{self.rule}: precision {self.precision:.2f}, recall {self.recall:.2f}"
        return f"calibrated for {self.pair} on {self.split} ({how})"


@dataclass(frozen=True)
class ThresholdChoice:
    """The threshold a run uses, the pair it was calibrated for and where it came from, for people."""

    value: float
    pair: str
    source: str


def parse_threshold(value: str | None) -> float | str | None:
    """``--threshold`` as given: None, a number, "auto" or "auto:PAIR"; a one-line error otherwise."""
    if value is None:
        return None
    text = value.strip()
    if text == "auto":
        return text
    if text.startswith("auto:"):
        try:
            parse_pair(text.removeprefix("auto:"))
        except BitextmineError as exc:
            raise BitextmineError(f"--threshold {text}: {exc}") from None
        return text
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise BitextmineError(
            f"--threshold must be a number, auto or auto:PAIR (e.g. auto:de-en), not {value!r}"
        )
    return number


def resolve_threshold(
    spec: float | str | None,
    *,
    store: Path,
    fingerprint: str,
    margin: str,
    pair: str,
    model_dir: Path | None = None,
) -> ThresholdChoice | None:
    """The threshold `spec` (see `parse_threshold`) stands for when mining `pair` with the model of
    `fingerprint`: None (keep all), the number given, this pair's calibrated threshold ("auto") or
    another pair's ("auto:PAIR"), from `store`, else from `model_dir`'s bitextmine.json (the old place).
    """
    spec = parse_threshold(spec) if isinstance(spec, str) else spec
    if spec is None:
        return None
    if not isinstance(spec, str):
        return ThresholdChoice(float(spec), pair, "given on the command line")
    wanted = pair if spec == "auto" else spec.removeprefix("auto:")
    record = find_threshold(store, fingerprint, margin, wanted)
    if record is not None:
        return ThresholdChoice(record.value, wanted, f"{record.describe()} in {store}")
    legacy = _legacy_table(model_dir, margin)
    if wanted in legacy:
        where = f"{model_dir}/{BITEXTMINE_CONFIG} (in the model dir, where bitextmine 0.1 kept thresholds)"
        return ThresholdChoice(legacy[wanted], wanted, f"calibrated for {wanted} in {where}")
    stored = {r.pair for r in read_thresholds(store) if (r.fingerprint, r.margin) == (fingerprint, margin)}
    raise BitextmineError(_missing(store, fingerprint, margin, wanted, sorted(stored | set(legacy)), spec))


def _missing(
    store: Path, fingerprint: str, margin: str, wanted: str, calibrated: list[str], spec: str
) -> str:
    others = f" (calibrated: {', '.join(calibrated)})" if calibrated else ""
    borrow = (
        f", or --threshold auto:{calibrated[0]} (another pair's)" if calibrated and spec == "auto" else ""
    )
    return (
        f"no calibrated {margin} threshold for {wanted} with model fingerprint {fingerprint} in {store}"
        f"{others}: run `bitextmine calibrate --bucc DIR --pair {wanted} --model MODEL --thresholds {store}` "
        f"or pass --threshold FLOAT{borrow}"
    )


def find_threshold(store: Path, fingerprint: str, margin: str, pair: str) -> ThresholdRecord | None:
    """The store's record for this fingerprint, margin and pair, if any."""
    key = (fingerprint, margin, pair)
    return next((r for r in read_thresholds(store) if _key(r) == key), None)


def store_threshold(store: Path, record: ThresholdRecord) -> None:
    """Add `record` to the store, replacing the one of the same fingerprint, margin and pair."""
    with _locked(store):
        records = [r for r in read_thresholds(store) if _key(r) != _key(record)] + [record]
        write_json(store, {"thresholds": [asdict(r) for r in sorted(records, key=_key)]})


def read_thresholds(store: Path) -> list[ThresholdRecord]:
    """Every record of the store (none if it does not exist); a malformed store is a one-line error."""
    if not store.is_file():
        return []
    remedy = "fix it or delete it and calibrate again"
    data = read_json(store, remedy=remedy)
    records = data.get("thresholds") if isinstance(data, dict) else None
    if not isinstance(records, list):
        raise BitextmineError(f'{store}: not a threshold store (no "thresholds" list); {remedy}')
    return [_record(store, number, entry, remedy) for number, entry in enumerate(records, 1)]


def _record(store: Path, number: int, entry: Any, remedy: str) -> ThresholdRecord:
    values = {}
    for field in fields(ThresholdRecord):
        value = entry.get(field.name) if isinstance(entry, dict) else None
        wanted = (int, float) if field.name in _NUMBERS else str
        if isinstance(value, bool) or not isinstance(value, wanted) or not _finite(value):
            raise BitextmineError(f"{store}: threshold {number} has no valid {field.name!r}; {remedy}")
        values[field.name] = float(value) if field.name in _NUMBERS else value
    return ThresholdRecord(**values)


def _finite(value: Any) -> bool:
    return isinstance(value, str) or math.isfinite(value)


def _key(record: ThresholdRecord) -> tuple[str, str, str]:
    return record.fingerprint, record.margin, record.pair


def _legacy_table(model_dir: Path | None, margin: str) -> dict[str, float]:
    """The pairs' thresholds of `margin` in the model dir's bitextmine.json, where bitextmine 0.1 kept
    them (none without a model dir)."""
    path = Path(model_dir or "") / BITEXTMINE_CONFIG
    if model_dir is None or not path.is_file():
        return {}
    config = read_json(path)
    tables = config.get("thresholds", {}) if isinstance(config, dict) else None
    table = tables.get(margin, {}) if isinstance(tables, dict) else None
    if not isinstance(table, dict):
        raise BitextmineError(f'{path}: "thresholds" is not a table of margins and pairs')
    return {
        pair: float(value)
        for pair, value in table.items()
        if pair != _OLD_DEFAULT and isinstance(value, int | float) and not isinstance(value, bool)
    }


@contextmanager
def _locked(store: Path) -> Iterator[None]:
    """An exclusive flock on ``.NAME.lock`` beside the store, waited for (a calibration holds it for
    the milliseconds of one read and write); the kernel drops it if the holder dies."""
    lock = store.with_name(f".{store.name}.lock")
    try:
        store.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise WriteError(store, exc, "cannot lock it for writing") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
