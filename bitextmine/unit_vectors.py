"""Checked unit vectors: what every consumer of vectors made elsewhere (`mine_arrays`, objects with
`.encode`) needs before cosines mean anything."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from bitextmine.errors import BitextmineValueError

# How far from 1 a vector's norm may be: float16 storage moves it by about 1e-3, bf16 by about 4e-3;
# a vector further off was not normalised, and its cosines (and margins) would be wrong.
UNIT_NORM_TOLERANCE = 1e-2


def unit_rows(name: str, vectors: npt.ArrayLike, normalize: bool) -> np.ndarray:
    """`vectors` as contiguous float32 rows of norm 1 (L2-normalised copies with `normalize`), or a
    ValueError naming the side and the first offending row."""
    try:
        array = np.ascontiguousarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise BitextmineValueError(f"{name}: not an array of numbers ({exc})") from None
    if array.ndim != 2:
        raise BitextmineValueError(f"{name}: expected a 2-D array [sentences, dim], got shape {array.shape}")
    _refuse_rows(name, ~np.isfinite(array).all(axis=1), lambda row: "holds NaN or infinite values")
    norms = np.linalg.norm(array, axis=1)
    if normalize:
        _refuse_rows(name, norms == 0, lambda row: "is all zeros: it has no direction to normalise")
        return array / norms[:, None]
    _refuse_rows(
        name,
        np.abs(norms - 1) > UNIT_NORM_TOLERANCE,
        lambda row: (
            f"has norm {norms[row]:.4g}, not 1 (within {UNIT_NORM_TOLERANCE}): pass unit vectors "
            "or normalize=True"
        ),
    )
    return array


def _refuse_rows(name: str, bad: np.ndarray, what: Callable[[int], str]) -> None:
    """A ValueError naming the side, its first `bad` row (`what` it is) and how many more there are."""
    if bad.any():
        row = int(np.argmax(bad))
        more = int(bad.sum()) - 1
        also = f" ({more:,} more row(s) too)" if more else ""
        raise BitextmineValueError(f"{name}: row {row} {what(row)}{also}")
