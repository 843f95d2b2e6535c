"""Margin-based mining: k nearest neighbours both ways, margin scores, one-to-one candidate selection.

The core works on two collections of unit vectors reached through a `search` function (an index or
exact search) and a `take` function (exact stored vectors by row), so the same code mines a workspace
with FAISS indexes and a small in-memory BUCC split with exact search. Candidate cosines are always
recomputed from the stored vectors, never taken from a compressed index.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from bitextmine.errors import BitextmineValueError, whole_number
from bitextmine.mining.margin import MAX_K, check_margin
from bitextmine.mining.selection import Candidates, check_strategy, select_candidates
from bitextmine.search.gemm import GemmPlan, exact_neighbours

# How far from 1 a vector's norm may be: float16 storage moves it by about 1e-3, bf16 by about 4e-3;
# a vector further off was not normalised, and its cosines (and margins) would be wrong.
UNIT_NORM_TOLERANCE = 1e-2


def mine_arrays(
    src: npt.ArrayLike,
    tgt: npt.ArrayLike,
    *,
    k: int = 4,
    margin: str = "ratio",
    strategy: str = "max",
    normalize: bool = False,
    device: str = "cpu",
    scratch: Path | None = None,
) -> Candidates:
    """Exact mining of two in-memory sets of unit vectors, [sentences, dim] each (BUCC splits, tests);
    `normalize` mines L2-normalised copies of vectors that are not unit vectors. The neighbours are
    searched on `device` (cpu, cuda, cuda:N) by exact matrix products (search/gemm.py). The selection's
    scratch files go to a new folder in `scratch` (a workspace's: workspace/scratch.py), else in $TMPDIR.
    Bad input (not 2-D, not finite, not unit vectors, different dimensions, k out of range) is a
    one-line ValueError."""
    whole_number("k", k, 1, MAX_K)
    check_margin(margin)
    check_strategy(strategy)
    src, tgt = unit_rows("src", src, normalize), unit_rows("tgt", tgt, normalize)
    if src.shape[1] != tgt.shape[1]:
        raise BitextmineValueError(
            f"src vectors have {src.shape[1]} dimensions, tgt vectors {tgt.shape[1]}: mine vectors of "
            "one encoder"
        )
    plan = GemmPlan.for_device(device)
    fwd, bwd = exact_neighbours(src, tgt, k, plan), exact_neighbours(tgt, src, k, plan)
    with tempfile.TemporaryDirectory(prefix="bitextmine-selection-", dir=scratch) as folder:
        selected = select_candidates(
            lambda: [(0, fwd)], lambda: [(0, bwd)], (len(src), len(tgt)), margin, strategy, Path(folder)
        )
        return Candidates.from_records(selected)


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
