"""Calibrated margin thresholds, stored in the model dir's ``bitextmine.json`` next to its settings.

Layout: ``{"thresholds": {"ratio": {"de-en": 1.062, "fr-en": 1.055}, ...}}``, one table per margin
because a ratio threshold means nothing for the distance margin. A pair's threshold serves that pair
only: score scales differ between pairs (a zh-en threshold is not a de-en one). Model dirs calibrated
by bitextmine 0.1 also hold a ``"default"`` entry (the last pair calibrated); it is ignored, and
dropped at the next calibration.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bitextmine.encoder.settings import BITEXTMINE_CONFIG
from bitextmine.errors import BitextmineError
from bitextmine.files import read_json, write_json

_OLD_DEFAULT = "default"


def _config(model_dir: Path) -> dict[str, Any]:
    path = model_dir / BITEXTMINE_CONFIG
    return read_json(path) if path.is_file() else {}


def store_threshold(model_dir: Path, margin: str, pair: str, threshold: float) -> Path:
    """Record `threshold` for `pair` and `margin`; other keys are kept."""
    config = _config(model_dir)
    table = config.setdefault("thresholds", {}).setdefault(margin, {})
    table.pop(_OLD_DEFAULT, None)
    table[pair] = threshold
    path = model_dir / BITEXTMINE_CONFIG
    try:
        write_json(path, config)
    except PermissionError:
        raise BitextmineError(f"{path}: not writable; copy the model dir and calibrate the copy") from None
    return path


def calibrated_threshold(model_dir: Path, margin: str, pair: str) -> float:
    """The pair's calibrated threshold; a one-line error naming the pairs that are calibrated if not."""
    table = {
        k: v for k, v in _config(model_dir).get("thresholds", {}).get(margin, {}).items() if k != _OLD_DEFAULT
    }
    if pair in table:
        return float(table[pair])
    calibrated = f" (calibrated: {', '.join(sorted(table))})" if table else ""
    raise BitextmineError(
        f"no calibrated {margin} threshold for {pair} in {model_dir / BITEXTMINE_CONFIG}{calibrated}: run "
        f"`bitextmine calibrate --bucc DIR --pair {pair} --model {model_dir}` or pass --threshold FLOAT"
    )
