"""Calibrated margin thresholds, stored in the model dir's ``bitextmine.json`` next to its settings.

Layout: ``{"thresholds": {"ratio": {"de-en": 1.062, "default": 1.062}, ...}}``, one table per
margin because a ratio threshold means nothing for the distance margin.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bitextmine.encoder.settings import BITEXTMINE_CONFIG
from bitextmine.errors import BitextmineError
from bitextmine.files import read_json, write_json


def _config(model_dir: Path) -> dict[str, Any]:
    path = model_dir / BITEXTMINE_CONFIG
    return read_json(path) if path.is_file() else {}


def store_threshold(model_dir: Path, margin: str, pair: str, threshold: float) -> Path:
    """Record `threshold` for `pair` and as the margin's default; other keys are kept."""
    config = _config(model_dir)
    table = config.setdefault("thresholds", {}).setdefault(margin, {})
    table[pair] = threshold
    table["default"] = threshold
    path = model_dir / BITEXTMINE_CONFIG
    try:
        write_json(path, config)
    except PermissionError:
        raise BitextmineError(f"{path}: not writable; copy the model dir and calibrate the copy") from None
    return path


def calibrated_threshold(model_dir: Path, margin: str, pair: str) -> float:
    """The pair's threshold, else the margin's default; a clear error when calibration never ran."""
    table = _config(model_dir).get("thresholds", {}).get(margin, {})
    if pair in table:
        return float(table[pair])
    if "default" in table:
        return float(table["default"])
    raise BitextmineError(
        f"no calibrated {margin} threshold for {pair} in {model_dir / BITEXTMINE_CONFIG}: run "
        f"`bitextmine calibrate --bucc DIR --pair {pair} --model {model_dir}` or pass --threshold FLOAT"
    )
