"""What the CLI prints besides messages: progress bars, and result tables (optionally also as JSON)."""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text

from bitextmine import progress
from bitextmine.cli.app import err, info, out, shows, user_errors
from bitextmine.files import OutputTarget, json_text, output_target

if TYPE_CHECKING:
    from bitextmine.workspace.layout import Workspace

STDOUT = OutputTarget(Path("-"), through=True)  # `--json -`


class ProgressDisplay(progress.ProgressDisplay):
    """A step's progress on the CLI's stderr console, stage after stage; nothing under --quiet."""

    def __init__(
        self,
        description: str | None = None,
        total: int | None = None,
        *,
        rates: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(description, total, rates=rates, clock=clock, console=err, shown=shows(logging.INFO))


def results_table(
    title: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[str | Text]],
    *,
    text_columns: Sequence[str] = (),
) -> Table:
    """A titled table: numbers right-aligned, the columns named in `text_columns` left-aligned."""
    table = Table(title=title, title_justify="left")
    for name in columns:
        table.add_column(name, justify="left" if name in text_columns else "right")
    for row in rows:
        table.add_row(*row)
    return table


def fields_table(title: str, fields: Iterable[tuple[str, str]]) -> Table:
    """A titled two-column table of named values, names in bold."""
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(justify="right")
    for name, value in fields:
        table.add_row(name, value)
    return table


def scores_table(title: str, scores: Any, threshold: float | None, candidates: int) -> Table:
    """Precision, recall and F1 (percent) of BUCC-format scoring, with the threshold used."""
    pct = scores.as_percent()
    row = [
        f"{pct['precision']:.2f}",
        f"{pct['recall']:.2f}",
        f"{pct['f1']:.2f}",
        "—" if threshold is None else f"{threshold:.4f}",
        f"{candidates:,}",
        f"{scores.gold:,}",
    ]
    return results_table(title, ["precision", "recall", "F1", "threshold", "candidates", "gold"], [row])


def print_results(
    table: Table, data: dict[str, Any] | None = None, target: OutputTarget | None = None
) -> None:
    """The table on stdout and, with a `--json` target, `data` as JSON there (see `emit_json`)."""
    out.print(table)
    emit_json(target, data)


def json_target(
    json_path: Path | None,
    *,
    inputs: Iterable[str | os.PathLike[str] | None] = (),
    workspace: Workspace | None = None,
) -> OutputTarget | None:
    """`--json PATH|-` checked before the command's work (files.output_target's rule; `inputs`: what the
    command reads and its other outputs, None for those not given)."""
    if json_path is None:
        return None
    if str(json_path) == "-":
        return STDOUT
    return output_target(json_path, inputs=inputs, workspace=workspace)


def emit_json(target: OutputTarget | None, data: Any) -> None:
    """`data` as JSON in the `--json` target (see `json_target`) or, for `-`, alone on stdout (the
    option's callback has sent the printed summary to stderr). Paths become strings."""
    if target is None:
        return
    if target is STDOUT:
        sys.stdout.write(_json_text(data, sys.stdout.encoding or "utf-8"))
        return
    with user_errors(), target.open() as fh:
        fh.write(_json_text(data))
    info(f"results written to {target.path}")


def _json_text(data: Any, encoding: str = "utf-8") -> str:
    return json_text(data, encoding, indent=2, default=_json_value) + "\n"


def _json_value(value: Any) -> Any:
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "item"):  # a numpy scalar
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
