"""The report of examples/benchmarks/bench_auto_pairs.py from hand-made rows."""

from __future__ import annotations

import sys

import pytest

from tests.helpers import REPO

sys.path.insert(0, str(REPO / "examples" / "benchmarks"))
bench = pytest.importorskip("bench_auto_pairs")

STAMP = {"date": "2026-11-29", "machine": "test box", "software": "python 3.11", "commit": "abc1234"}


def row(pair: str, margin_f1: float, auto_f1: float) -> dict:
    def cell(threshold: float, f1: float) -> dict:
        return {"threshold": threshold, "precision": 90.0, "recall": 95.5, "f1": f1,
                "estimated_precision": 88.1, "estimated_recall": 97.2,
                "calibration_unlike": 0.12}  # fmt: skip

    oracle = {"precision": 97.0, "recall": 96.0, "f1": 96.5}
    return {"pair": pair, "flores_margin": cell(1.0139, margin_f1), "auto": cell(0.4605, auto_f1),
            "oracle": oracle, **STAMP}  # fmt: skip


def test_the_report_gives_each_pair_the_flores_margin_auto_and_the_oracle():
    text = bench.report([row("ru-en", 72.24, 96.23), row("zh-en", 34.4, 86.98)])
    ru = "| ru-en | 1.0139 | 90.0 / 95.5 / 72.24 | 0.4605 | 90.0 / 95.5 / 96.23 | 88.1 / 97.2 | 0.12 | 96.5 |"
    assert ru in text
    assert "| zh-en | 1.0139 | 90.0 / 95.5 / 34.4 | 0.4605 | 90.0 / 95.5 / 86.98 |" in text
    assert "abc1234" in text and "`calibrate --pairs`" in text
    # the worst, zh-en in both: the oracle 96.5 less auto's 86.98, less the FLORES margin's 34.4
    assert "within 9.52 F1 of its oracle" in text and "up to 62.10 below it" in text
