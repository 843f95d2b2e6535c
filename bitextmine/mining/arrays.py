"""Margin-based mining: k nearest neighbours both ways, margin scores, one-to-one candidate selection.

The core works on two collections of unit vectors reached through a `search` function (an index or
exact search) and a `take` function (exact stored vectors by row), so the same code mines a workspace
with FAISS indexes and a small in-memory BUCC split with exact search. Candidate cosines are always
recomputed from the stored vectors, never taken from a compressed index.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from bitextmine.mining.selection import Candidates, select_candidates
from bitextmine.search.gemm import GemmPlan, exact_neighbours


def mine_arrays(
    src: np.ndarray,
    tgt: np.ndarray,
    *,
    k: int = 4,
    margin: str = "ratio",
    strategy: str = "max",
    device: str = "cpu",
    scratch: Path | None = None,
) -> Candidates:
    """Exact mining of two in-memory sets of unit vectors (BUCC splits, tests); the neighbours are
    searched on `device` (cpu, cuda, cuda:N) by exact matrix products (search/gemm.py). The selection's
    scratch files go to a new folder in `scratch` (a workspace's: workspace/scratch.py), else in $TMPDIR."""
    plan = GemmPlan.for_device(device)
    fwd, bwd = exact_neighbours(src, tgt, k, plan), exact_neighbours(tgt, src, k, plan)
    with tempfile.TemporaryDirectory(prefix="bitextmine-selection-", dir=scratch) as folder:
        selected = select_candidates(
            lambda: [(0, fwd)], lambda: [(0, bwd)], (len(src), len(tgt)), margin, strategy, Path(folder)
        )
        return Candidates.from_records(selected)
