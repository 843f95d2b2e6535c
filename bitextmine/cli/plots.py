"""Plots for the summaries: curves and histograms as text lines, and the calibration curve as a PNG.

The text plots are our own few lines rather than plotext: plotext draws finer (braille) lines, but a
grid with one letter a series is enough to see where precision, recall and F1 cross and where the
chosen threshold sits; its output is plain text that tests can compare and that reads the same in a
log file, and it adds no dependency. The PNG needs matplotlib (the ``plot`` extra), imported only
when a plot is asked for and drawn on an Agg canvas, touching neither pyplot nor a GUI backend."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from bitextmine.errors import BitextmineError
from bitextmine.files import OutputTarget

if TYPE_CHECKING:
    from matplotlib.figure import Figure

CURVES = {"precision": "precision", "recall": "recall", "f1": "F1"}  # curve key -> label
_EIGHTHS = ["", "▏", "▎", "▍", "▌", "▋", "▊", "▉"]


def curve_range(curve: Sequence[dict[str, Any]]) -> tuple[float, float]:
    """The thresholds that keep at least one candidate (the sweep's keep-none point lies far above)."""
    kept = [point["threshold"] for point in curve if point["kept"] > 0] or [p["threshold"] for p in curve]
    return min(kept), max(kept)


def curve_lines(
    x: Sequence[float],
    series: dict[str, Sequence[float]],
    *,
    mark: float | None = None,
    x_range: tuple[float, float] | None = None,
    width: int = 60,
    height: int = 10,
) -> list[str]:
    """Percentages (0 to 100) against `x` as text: each series drawn with its name's first letter (later
    ones over earlier ones), `mark` as a column of │, points outside `x_range` left out."""
    low, high = x_range or (min(x), max(x))
    span = (high - low) or 1.0
    grid = [[" "] * width for _ in range(height)]

    def column(value: float) -> int:
        return round((value - low) / span * (width - 1))

    if mark is not None and low <= mark <= high:
        for row in grid:
            row[column(mark)] = "│"
    for name, values in series.items():
        for xi, yi in zip(x, values, strict=True):
            if low <= xi <= high:
                grid[height - 1 - round(min(max(yi, 0), 100) / 100 * (height - 1))][column(xi)] = name[0]
    axis = {0: "100", height - 1: "0"}
    lines = [f"{axis.get(i, ''):>4} ┤{''.join(row)}" for i, row in enumerate(grid)]
    left, right = f"{low:.4f}", f"{high:.4f}"
    legend = "  ".join(f"{name[0]} {name}" for name in series) + ("  │ chosen" if mark is not None else "")
    return [
        *lines,
        "     └" + "─" * width,
        "      " + left + right.rjust(width - len(left)),
        "      " + legend,
    ]


def histogram_lines(edges: list[float], counts: list[int], width: int = 40) -> list[str]:
    """A histogram as text, one line a bin: its range, a bar scaled to the largest count, the count."""
    if len(edges) != len(counts) + 1 and (edges or counts):
        raise ValueError(f"{len(edges)} edges for {len(counts)} counts: expected one more edge than counts")
    top = max(counts, default=0)
    digits = len(f"{top:,}")
    lines = []
    for low, high, count in zip(edges, edges[1:], counts, strict=False):
        eighths = round(count / top * width * 8) if top else 0
        eighths = max(eighths, 1) if count else 0  # a non-empty bin always shows
        bar = "█" * (eighths // 8) + _EIGHTHS[eighths % 8]
        lines.append(f"{low:9.4f} – {high:<9.4f} {bar:<{width}} {count:>{digits},}")
    return lines


def calibration_figure(curve: Sequence[dict[str, Any]], chosen: dict[str, Any], title: str) -> Figure:
    """Precision, recall and F1 (percent) against the threshold, one line each over exactly the points
    of `curve` (calibrate --json's "curve"), the chosen threshold marked."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise BitextmineError("--plot needs matplotlib: pip install 'bitextmine[plot]'") from None
    figure = Figure(figsize=(8, 4.5), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    thresholds = [point["threshold"] for point in curve]
    for key, label in CURVES.items():
        axes.plot(thresholds, [point[key] for point in curve], label=label)
    axes.axvline(chosen["threshold"], color="grey", linestyle="--", linewidth=1)
    axes.plot(
        [chosen["threshold"]] * len(CURVES),
        [chosen[key] for key in CURVES],
        "ko",
        label=f"chosen: {chosen['threshold']:.4f}",
    )
    low, high = curve_range(curve)
    pad = (high - low) * 0.02 or 0.01
    axes.set(xlim=(low - pad, high + pad), ylim=(0, 102), title=title, ylabel="%")
    axes.set_xlabel("threshold (pairs scoring >= it are kept)")
    axes.grid(alpha=0.3)
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1))  # outside: it never hides a curve
    return figure


def save_calibration_plot(
    target: OutputTarget, curve: Sequence[dict[str, Any]], chosen: dict[str, Any], title: str
) -> Figure:
    """`calibration_figure` written to `target` as a PNG; the figure, for inspection."""
    figure = calibration_figure(curve, chosen, title)
    with target.open("wb") as fh:
        figure.savefig(fh, format="png", dpi=120)
    return figure
