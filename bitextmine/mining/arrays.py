"""Margin-based mining: k nearest neighbours both ways, margin scores, one-to-one candidate selection.

The core works on two collections of unit vectors reached through a `search` function (an index or
exact search) and a `take` function (exact stored vectors by row), so the same code mines a workspace
with FAISS indexes and a small in-memory BUCC split with exact search. Candidate cosines are always
recomputed from the stored vectors, never taken from a compressed index.
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import numpy.typing as npt

from bitextmine.errors import BitextmineValueError, BitextmineWarning
from bitextmine.mining.selection import Candidates, select_candidates
from bitextmine.mining.settings import MiningSettings
from bitextmine.search.gemm import GemmPlan, mutual_neighbours
from bitextmine.unit_vectors import unit_rows


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
    Bad input (not 2-D, not finite, not unit vectors, different dimensions, a setting `mine` refuses, a
    device not here, a scratch folder missing) is a one-line ValueError."""
    MiningSettings(k, margin, strategy)
    plan = GemmPlan.for_device(device)
    if scratch is not None and not Path(scratch).is_dir():
        raise BitextmineValueError(f"scratch {scratch}: not an existing folder")
    src, tgt = unit_rows("src", src, normalize), unit_rows("tgt", tgt, normalize)
    if src.shape[1] != tgt.shape[1]:
        raise BitextmineValueError(
            f"src vectors have {src.shape[1]} dimensions, tgt vectors {tgt.shape[1]}: mine vectors of "
            "one encoder"
        )
    if 0 < min(len(src), len(tgt)) <= k:  # no sentence, no pair: nothing to warn about
        warnings.warn(
            f"{len(src)} x {len(tgt)} sentences with k={k}: each neighbourhood is the whole other side, "
            "so margin scores cannot tell translations from the rest; mine more sentences or lower k",
            BitextmineWarning,
            stacklevel=2,
        )
    fwd, bwd = mutual_neighbours(src, tgt, k, plan)
    with tempfile.TemporaryDirectory(prefix="bitextmine-selection-", dir=scratch) as folder:
        selected = select_candidates(
            lambda: [(0, fwd)], lambda: [(0, bwd)], (len(src), len(tgt)), margin, strategy, Path(folder)
        )
        return Candidates.from_records(selected.records)
