"""The calibration pairs `calibrate` keeps beside the threshold store, for `mine` to plant in a corpus
(calibration/planted.py): STORE_DIR/STEM-pairs/PAIR-FINGERPRINT.npy, the pairs' source vectors then their
target vectors ([2, n, dim] float16, as workspaces store vectors), one file per pair and model, replaced
atomically by each calibration of that pair with that model."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from bitextmine.calibration.planted import CalibrationPairs
from bitextmine.errors import BitextmineError
from bitextmine.files import WriteError, atomic_open, save_array


def pairs_file(store: str | os.PathLike[str], fingerprint: str, pair: str) -> Path:
    """Where the calibration pairs of `pair` for the model of `fingerprint` are kept beside `store`."""
    store = Path(store)
    return store.parent / f"{store.stem}-pairs" / f"{pair}-{fingerprint}.npy"


def save_pairs(path: Path, pairs: CalibrationPairs) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(path, "wb") as fh:
            save_array(fh, np.stack([pairs.src, pairs.tgt]).astype(np.float16))
    except OSError as exc:
        raise WriteError(path, exc) from None


def load_pairs(path: Path) -> CalibrationPairs | None:
    """The pairs kept in `path`, None if there are none; a damaged file is a one-line error naming it."""
    if not path.is_file():
        return None
    try:
        stacked = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise BitextmineError(f"{path}: damaged calibration pairs ({exc}); calibrate again") from None
    if stacked.ndim != 3 or len(stacked) != 2 or not np.isfinite(stacked).all():
        raise BitextmineError(
            f"{path}: not calibration pairs ({stacked.dtype} {stacked.shape}); calibrate again"
        )
    src, tgt = stacked.astype(np.float32)
    return CalibrationPairs(src, tgt)
