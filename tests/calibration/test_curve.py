"""The calibration curve: every threshold of the sweep with P/R/F1, the target-precision rule, and the
plots of it (text and PNG)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from bitextmine.calibration.bucc import BuccError
from bitextmine.calibration.sweep import sweep_curve, sweep_threshold
from bitextmine.cli.plots import (
    calibration_figure,
    curve_lines,
    histogram_lines,
    save_calibration_plot,
)
from bitextmine.errors import BitextmineError
from bitextmine.files import OutputTarget
from tests.helpers import curve_arrays, plotted

# sorted scores 1.20 1.10 1.10 1.05 1.00, gold T T F T F, 4 gold pairs in all (as in test_bucc.py):
SCORES = np.array([1.10, 1.00, 1.20, 1.05, 1.10])
IS_GOLD = np.array([True, False, True, True, False])
# threshold, precision, recall, F1 (percent), kept, true positives, worked out by hand
HAND_CURVE = [
    (2.20, 0.0, 0.0, 0.0, 0, 0),  # above the maximum: keeps none
    (1.15, 100.0, 25.0, 40.0, 1, 1),  # F1 = 2·1/(1+4)
    (1.075, 200 / 3, 50.0, 400 / 7, 3, 2),  # F1 = 2·2/(3+4)
    (1.025, 75.0, 75.0, 75.0, 4, 3),  # F1 = 2·3/(4+4)
    (1.00, 60.0, 75.0, 200 / 3, 5, 3),  # keeps all: F1 = 2·3/(5+4)
]


def test_the_curve_holds_every_threshold_with_hand_computed_scores():
    rows = sweep_curve(SCORES, IS_GOLD, 4).rows()
    assert len(rows) == len(HAND_CURVE)
    for row, (threshold, precision, recall, f1, kept, true_positives) in zip(rows, HAND_CURVE, strict=True):
        assert row == {
            "threshold": pytest.approx(threshold),
            "precision": pytest.approx(precision),
            "recall": pytest.approx(recall),
            "f1": pytest.approx(f1),
            "kept": kept,
            "true_positives": true_positives,
        }
    best = sweep_threshold(SCORES, IS_GOLD, 4)
    assert best.rule == "best F1" and best.threshold == pytest.approx(1.025)
    assert best.curve.rows() == rows


@pytest.mark.parametrize(
    ("target", "threshold", "precision"),
    [
        (1.0, 1.15, 1.0),
        (0.8, 1.15, 1.0),
        (0.75, 1.025, 0.75),  # exactly reached counts
        (0.7, 1.025, 0.75),  # 1.075 (P 2/3) falls below, yet a lower threshold reaches 0.7 again
        (0.6, 1.0, 0.6),
        (0.1, 1.0, 0.6),
    ],
)
def test_target_precision_takes_the_lowest_threshold_reaching_it(target, threshold, precision):
    result = sweep_threshold(SCORES, IS_GOLD, 4, target_precision=target)
    assert result.threshold == pytest.approx(threshold)
    assert result.scores.precision == pytest.approx(precision)
    assert result.rule == f"precision >= {target:g}"
    assert result.scores.predicted == int(np.greater_equal(SCORES, result.threshold).sum())


@pytest.mark.parametrize(
    ("points", "threshold"),
    [
        (20, 1.025),  # F1 >= 55: 1.075, 1.025 and 1.0, middle 1.0375, nearest 1.025
        (40, 1.075),  # F1 >= 35: 1.15 to 1.0, middle 1.075 itself
        (80, 1.15),  # every threshold, 2.20 to 1.0: middle 1.6, nearest 1.15
    ],
)
def test_plateau_takes_the_middle_of_the_thresholds_near_the_best_f1(points, threshold):
    result = sweep_threshold(SCORES, IS_GOLD, 4, plateau=points)
    assert result.threshold == pytest.approx(threshold)
    assert result.rule == f"middle of F1 within {points:g} of the best"
    assert result.scores.predicted == int(np.greater_equal(SCORES, result.threshold).sum())


def test_plateau_0_is_the_best_f1_rule():
    best = sweep_threshold(SCORES, IS_GOLD, 4)
    zero = sweep_threshold(SCORES, IS_GOLD, 4, plateau=0)
    assert (zero.threshold, zero.rule) == (best.threshold, best.rule) == (pytest.approx(1.025), "best F1")


def test_a_bad_plateau_or_two_rules_are_one_line_errors():
    for bad in (-1, 100):
        with pytest.raises(BitextmineError, match="--plateau must be at least 0 and below 100 F1 points"):
            sweep_threshold(SCORES, IS_GOLD, 4, plateau=bad)
    with pytest.raises(BitextmineError, match="--target-precision and --plateau are two rules"):
        sweep_threshold(SCORES, IS_GOLD, 4, target_precision=0.9, plateau=1)


def test_an_unreachable_or_invalid_target_precision_is_a_one_line_error():
    with pytest.raises(BuccError, match=r"no threshold reaches precision 0.9 \(the highest is 0.5000"):
        sweep_threshold(np.array([2.0, 1.0]), np.array([False, True]), 1, target_precision=0.9)
    for bad in (0.0, -0.5, 1.01, float("nan")):
        with pytest.raises(BitextmineError, match="--target-precision must be above 0 and at most 1"):
            sweep_threshold(SCORES, IS_GOLD, 4, target_precision=bad)


def chosen_point(rows, threshold):
    return next(row for row in rows if row["threshold"] == threshold)


@pytest.mark.integration  # matplotlib renders a PNG
def test_the_png_is_written_and_plots_exactly_the_curve(tmp_path):
    result = sweep_threshold(SCORES, IS_GOLD, 4)
    rows = result.curve.rows()
    path = tmp_path / "curve.png"
    figure = save_calibration_plot(
        OutputTarget(path), rows, chosen_point(rows, result.threshold), "de-en dev"
    )
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000
    lines = plotted(figure)
    assert lines.pop("chosen") == ([result.threshold] * 3, [75.0, 75.0, 75.0])
    assert lines == curve_arrays(rows)


def test_without_matplotlib_plot_is_a_one_line_error_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    rows = sweep_curve(SCORES, IS_GOLD, 4).rows()
    with pytest.raises(BitextmineError, match=r"--plot needs matplotlib: pip install 'bitextmine\[plot\]'"):
        calibration_figure(rows, rows[3], "title")


def test_curve_lines_draws_each_series_and_the_mark():
    lines = curve_lines(
        [0.0, 1.0, 2.0], {"precision": [100, 50, 0], "F1": [0, 50, 100]}, mark=1.0, width=5, height=3
    )
    assert lines == [
        " 100 ┤p │ F",
        "     ┤  F  ",  # p and F meet at (1.0, 50): the later series is drawn over the earlier
        "   0 ┤F │ p",
        "     └─────",
        "      0.00002.0000",
        "      p precision  F F1  │ chosen",
    ]


def test_curve_lines_leaves_out_points_outside_the_range():
    lines = curve_lines([0.0, 1.0, 9.0], {"recall": [0, 100, 100]}, x_range=(0.0, 1.0), width=3, height=2)
    assert lines[:2] == [" 100 ┤  r", "   0 ┤r  "]


def test_histogram_lines():
    assert histogram_lines([0.0, 0.5, 1.0, 1.5], [8, 1, 0], width=4) == [
        "   0.0000 – 0.5000    ████ 8",
        "   0.5000 – 1.0000    ▌    1",
        "   1.0000 – 1.5000         0",
    ]
    assert histogram_lines([0.0, 1.0], [1000], width=2) == ["   0.0000 – 1.0000    ██ 1,000"]
    assert histogram_lines([], []) == []
    with pytest.raises(ValueError, match="one more edge than counts"):
        histogram_lines([0.0, 1.0], [1, 2])
