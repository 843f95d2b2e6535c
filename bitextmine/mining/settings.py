"""The settings that give a pair its margin score and pick the candidates, declared and checked here for
`mine`, `score` and `calibrate` (and `eval bucc`, `mine_arrays`), which all score pairs the same way.
Checked when made, by the command line and the Python API alike: before any work."""

from __future__ import annotations

from dataclasses import dataclass

from bitextmine.errors import whole_number
from bitextmine.mining.margin import MAX_K, check_margin
from bitextmine.mining.selection import check_strategy


@dataclass
class MarginSettings:
    """A pair's score: its `margin` over the mean cosines of each side's `k` nearest neighbours. A
    calibrated threshold holds for one margin and k (calibration/thresholds.py)."""

    k: int = 4
    margin: str = "ratio"

    def __post_init__(self) -> None:  # when made: before any encoding or search
        whole_number("k", self.k, 1, MAX_K)
        check_margin(self.margin)


@dataclass
class MiningSettings(MarginSettings):
    """Margin scores and the candidate `strategy`: which pairs compete for the one-to-one selection
    (mining/selection.py). Scoring a given bitext selects nothing, so it takes `MarginSettings`."""

    strategy: str = "max"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_strategy(self.strategy)
