"""Margin scores for bitext mining (Artetxe & Schwenk 2019; DAP appendix B; docs/design.md, "Margin scoring").

For unit vectors x, y with cos(x, y), let fwd(x) be the mean cosine of x to its k nearest neighbours
in the target set and bwd(y) the mean cosine of y to its k nearest neighbours in the source set. The
denominator is sum_{NN_k(x)} cos/2k + sum_{NN_k(y)} cos/2k = (fwd(x) + bwd(y)) / 2, so that ratio
thresholds read like LASER's (about 1.04-1.10).

CSLS (Conneau et al. 2018, used by Gaschi et al. for word retrieval) is 2 cos(x, y) - fwd(x) - bwd(y):
twice the distance margin, so both rank candidates identically; its thresholds sit on twice the scale.
"""

from __future__ import annotations

import numpy as np

from bitextmine.errors import BitextmineValueError

MARGINS = ("ratio", "distance", "csls", "absolute")
# The most neighbours a margin averages (the CLI's --k): LASER uses 4 and the literature at most a few
# dozen; a search keeps k neighbours of every query row, so a far larger k only exhausts memory.
MAX_K = 4096


def check_margin(margin: str) -> str:
    if margin not in MARGINS:
        raise BitextmineValueError(f"unknown margin {margin!r}; choose one of {', '.join(MARGINS)}")
    return margin


def margin_scores(cos: np.ndarray, fwd_mean: np.ndarray, bwd_mean: np.ndarray, margin: str) -> np.ndarray:
    """Score of each (x, y) whose cosine is `cos`; fwd_mean/bwd_mean broadcast against it."""
    if check_margin(margin) == "absolute":
        return cos
    if margin == "csls":
        return 2 * cos - fwd_mean - bwd_mean
    denominator = (fwd_mean + bwd_mean) / 2
    return cos / denominator if margin == "ratio" else cos - denominator
