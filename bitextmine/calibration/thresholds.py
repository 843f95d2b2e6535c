"""Calibrated margin thresholds, kept in a threshold store keyed by model fingerprint, margin, k and pair.

The store is ``WORK/thresholds.json`` or a file the user names (``--thresholds FILE``), never the
model dir, which may be shared, read-only or the Hugging Face cache. Layout::

    {"thresholds": [{"fingerprint": "3f0c...", "model": "intfloat/multilingual-e5-small",
                     "margin": "ratio", "pair": "de-en", "value": T, "split": "dev",
                     "precision": P, "recall": R, "f1": F, "rule": "best F1",
                     "date": "2025-06-01T12:00:00+00:00", "k": 4, "strategy": "max",
                     "sentences": 16800}, ...]}

one record per fingerprint, margin, k and pair: each changes the scale of the scores. A ratio
threshold means nothing for the distance margin; k sets the neighbourhood means the margin divides by
(the larger k, the lower the means and the higher the ratio scores); and score scales differ between
pairs, so a pair's threshold serves that pair unless the user asks for another's (``auto:PAIR``).
The candidate strategy is recorded but is no key: a pair's score is its margin over both directions'
k-NN means whatever the strategy, which only chooses which pairs compete for the one-to-one
selection (mining/selection.py), so a threshold keeps the same pairs' scores under every strategy.
`sentences` (both sides of the split) lets `mine` say when a corpus is far larger than the split
(`size_drift_note`). Records written before k, the strategy and the split's size were recorded read as
k=4 (the default k they were calibrated with unless the user changed it), an unrecorded strategy (None)
and an unknown size (None). Calibrations read,
modify and replace the file holding an flock on a sibling lock file, so concurrent calibrations of
different pairs all survive; readers take no lock (the file is replaced atomically).

Model dirs calibrated before the store existed carry ``{"thresholds": {"ratio": {"de-en": t}}}`` in
their ``bitextmine.json``; it is read, as k=4, when the store has nothing for the fingerprint, margin,
k and pair. Its ``"default"`` entry (bitextmine 0.1: the last pair calibrated) is ignored.
"""

from __future__ import annotations

import math
import os
from contextlib import AbstractContextManager
from dataclasses import MISSING, asdict, dataclass, fields
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bitextmine.calibration.sweep import BEST_F1, SweepResult
from bitextmine.encoder.settings import BITEXTMINE_CONFIG
from bitextmine.errors import BitextmineError, BitextmineValueError, real_number
from bitextmine.files import WriteError, read_json, write_json
from bitextmine.mining.selection import STRATEGIES
from bitextmine.text.languages import parse_pair
from bitextmine.workspace.locks import file_lock

if TYPE_CHECKING:
    from bitextmine.encoder.encoder import SentenceEncoder

_OLD_DEFAULT = "default"
OLD_K = 4  # the k of thresholds recorded without one (the store's first records, the model dir's)
_NUMBERS = {"value", "precision", "recall", "f1"}


@dataclass(frozen=True, order=True)
class ThresholdKey:
    """What a stored threshold is for: everything that changes the scale of the scores, and the pair."""

    fingerprint: str
    margin: str
    k: int
    pair: str

    def describe(self) -> str:
        return f"{self.pair} ({self.margin} margin, k={self.k})"


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
    k: int = OLD_K  # neighbours of the margin's means
    strategy: str | None = None  # the candidate strategy the scores were measured with; None: not recorded
    sentences: int | None = None  # in the calibration split, both sides; None: not recorded

    @classmethod
    def from_sweep(
        cls,
        result: SweepResult,
        *,
        fingerprint: str,
        model: str,
        margin: str,
        k: int,
        strategy: str,
        pair: str,
        split: str,
        sentences: int | None = None,
    ) -> ThresholdRecord:
        date = datetime.now().astimezone().isoformat(timespec="seconds")
        scores = result.scores.as_percent()
        return cls(
            fingerprint,
            model,
            margin,
            pair,
            result.threshold,
            split,
            **scores,
            rule=result.rule,
            date=date,
            k=k,
            strategy=strategy,
            sentences=sentences,
        )

    def describe(self) -> str:
        """E.g. ``calibrated for de-en on dev with k=4, strategy max (best F1 F)``: the setting its
        precision, recall and F1 were measured with."""
        if self.rule == BEST_F1:
            how = f"best F1 {self.f1:.2f}"
        else:
            how = f"{self.rule}: precision {self.precision:.2f}, recall {self.recall:.2f}"
        setting = f"k={self.k}" + (f", strategy {self.strategy}" if self.strategy else "")
        return f"calibrated for {self.pair} on {self.split} with {setting} ({how})"

    @property
    def key(self) -> ThresholdKey:
        return ThresholdKey(self.fingerprint, self.margin, self.k, self.pair)


# What a threshold applies to: the margin score, or each pair's regional precision
# (mining/regional_precision.py) that `mine --threshold auto` learns inside the corpus.
MARGIN_SCALE = "margin"
REGIONAL_SCALE = "regional precision"


@dataclass(frozen=True)
class ThresholdChoice:
    """The threshold a run uses, the pair it was calibrated for and where it came from, for people."""

    value: float
    pair: str
    source: str
    calibrated_on: int | None = None  # sentences of the split it was calibrated on; None: unknown or given
    scale: str = MARGIN_SCALE  # what it thresholds: MARGIN_SCALE or REGIONAL_SCALE


# A corpus this many times the size of the calibration split is where the scale benchmark saw a calibrated
# threshold keep its precision but lose much of its recall (examples/benchmarks/results/bench_scale_real.md).
SIZE_DRIFT = 10


def size_drift_note(choice: ThresholdChoice | None, sentences: int) -> str | None:
    """What to tell the user when a calibrated threshold is used on a corpus of `sentences` (both sides)
    SIZE_DRIFT times the split it was calibrated on, or more; None otherwise."""
    if choice is None or choice.calibrated_on is None or sentences < SIZE_DRIFT * choice.calibrated_on:
        return None
    return (
        f"the threshold was calibrated on {choice.calibrated_on:,} sentences and this corpus has "
        f"{sentences:,}: margin scores shift with a corpus's size and density, so this corpus's recall can "
        "be far below the calibration's (docs/design.md, 'Thresholds at scale')"
    )


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
            raise BitextmineValueError(f"--threshold {text}: {exc}") from None
        return text
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise BitextmineValueError(
            f"--threshold must be a number, auto or auto:PAIR (e.g. auto:de-en), not {value!r}"
        )
    return number


def check_threshold(value: object) -> float | str | None:
    """A threshold given in Python: None, a finite number, or a string `parse_threshold` reads."""
    if value is None or isinstance(value, str):
        return parse_threshold(value)
    return real_number("threshold", value)


def resolve_threshold(
    spec: float | str | None,
    *,
    store: Path,
    fingerprint: str,
    margin: str,
    k: int,
    pair: str,
    model_dir: Path | None = None,
    calibrate_with: str = "--model MODEL",
) -> ThresholdChoice | None:
    """The threshold `spec` (see `parse_threshold`) stands for when mining `pair` with the model of
    `fingerprint`, `margin` and `k`: None (keep all), the number given, this pair's calibrated threshold
    ("auto") or another pair's ("auto:PAIR"), from `store`, else from `model_dir`'s bitextmine.json (the
    old place, k=4). A calibration of another margin or k is never used: that is a one-line error
    listing the model's calibrations and saying how to calibrate (`calibrate_with`: the options that
    name the model to `calibrate`)."""
    spec = parse_threshold(spec) if isinstance(spec, str) else spec
    if spec is None:
        return None
    if not isinstance(spec, str):
        return ThresholdChoice(float(spec), pair, "given on the command line")
    wanted = ThresholdKey(fingerprint, margin, k, spec.removeprefix("auto:") if spec != "auto" else pair)
    records = [r for r in read_thresholds(store) if r.fingerprint == fingerprint]
    record = next((r for r in records if r.key == wanted), None)
    if record is not None:
        return ThresholdChoice(record.value, wanted.pair, f"{record.describe()} in {store}", record.sentences)
    legacy = _legacy_table(model_dir, margin)
    if k == OLD_K and wanted.pair in legacy:
        where = f"{model_dir}/{BITEXTMINE_CONFIG} (in the model dir, where bitextmine 0.1 kept thresholds)"
        return ThresholdChoice(legacy[wanted.pair], wanted.pair, f"calibrated for {wanted.pair} in {where}")
    calibrated = sorted(
        {r.key for r in records} | {ThresholdKey(fingerprint, margin, OLD_K, p) for p in legacy}
    )
    raise BitextmineError(_missing(store, wanted, calibrated, spec, calibrate_with))


def encoder_threshold(
    spec: float | str | None, store: Path, encoder: SentenceEncoder, *, margin: str, k: int, pair: str
) -> ThresholdChoice | None:
    """`resolve_threshold` for vectors the loaded `encoder` makes (its fingerprint, its model dir)."""
    return resolve_threshold(
        spec,
        store=store,
        fingerprint=encoder.fingerprint,
        margin=margin,
        k=k,
        pair=pair,
        model_dir=encoder.loaded.model_dir,
    )


def _missing(
    store: Path, wanted: ThresholdKey, calibrated: list[ThresholdKey], spec: str, calibrate_with: str
) -> str:
    listed = ", ".join(f"{key.pair} {key.margin} k={key.k}" for key in calibrated)
    others = f" (calibrated: {listed})" if calibrated else ""
    borrowable = [key.pair for key in calibrated if (key.margin, key.k) == (wanted.margin, wanted.k)]
    borrow = (
        f", or --threshold auto:{borrowable[0]} (another pair's)" if borrowable and spec == "auto" else ""
    )
    command = (
        f"bitextmine calibrate --bucc DIR --pair {wanted.pair} --margin {wanted.margin} --k {wanted.k} "
        f"{calibrate_with} --thresholds {store}"
    )
    return (
        f"no calibrated threshold for {wanted.describe()} with model fingerprint {wanted.fingerprint} in "
        f"{store}{others}: run `{command}` or pass --threshold FLOAT{borrow}"
    )


def store_threshold(store: str | os.PathLike[str], record: ThresholdRecord) -> None:
    """Add `record` to the store, replacing the one of the same key (fingerprint, margin, k and pair)."""
    store = Path(store)
    with _locked(store):
        records = [r for r in read_thresholds(store) if r.key != record.key] + [record]
        write_json(store, {"thresholds": [asdict(r) for r in sorted(records, key=lambda r: r.key)]})


def read_thresholds(store: str | os.PathLike[str]) -> list[ThresholdRecord]:
    """Every record of the store (none if it does not exist); a malformed store is a one-line error."""
    store = Path(store)
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
        if isinstance(entry, dict) and field.name not in entry and field.default is not MISSING:
            continue  # recorded since the store's first version: its default says what an old record meant
        value = entry.get(field.name) if isinstance(entry, dict) else None
        if not _valid(field.name, value):
            raise BitextmineError(f"{store}: threshold {number} has no valid {field.name!r}; {remedy}")
        values[field.name] = float(value) if field.name in _NUMBERS else value
    return ThresholdRecord(**values)


def _valid(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if name in _NUMBERS:
        return isinstance(value, int | float) and math.isfinite(value)
    if name == "k":
        return isinstance(value, int) and value >= 1
    if name == "strategy":
        return value is None or value in STRATEGIES
    if name == "sentences":
        return value is None or (isinstance(value, int) and value >= 1)
    return isinstance(value, str)


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


def _locked(store: Path) -> AbstractContextManager[None]:
    """An exclusive flock on ``.NAME.lock`` beside the store, waited for (a calibration holds it for
    the milliseconds of one read and write); the kernel drops it if the holder dies."""
    try:
        store.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WriteError(store, exc, "cannot create its folder") from exc
    return file_lock(store.with_name(f".{store.name}.lock"), exclusive=True, what=str(store), wait=True)
