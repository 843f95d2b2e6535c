"""What the CLI prints besides messages: progress bars, and result tables (optionally also as JSON)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from bitextmine.cli.app import err, out, user_errors
from bitextmine.files import write_json


def progress_bar(description: str, total: int | None) -> tuple[Progress, Callable[..., None]]:
    """A bar on stderr and the function that advances it by n (extra arguments, such as tokens, are
    ignored)."""
    progress = Progress(
        TextColumn(f"[bold]{description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
    )
    task = progress.add_task(description, total=total)
    return progress, lambda n, *_: progress.update(task, advance=n)


def results_table(
    title: str, columns: Sequence[str], rows: Iterable[Sequence[str]], *, text_columns: Sequence[str] = ()
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


def print_results(table: Table, data: dict[str, Any] | None = None, json_path: Path | None = None) -> None:
    """The table on stdout and, with `json_path`, `data` as JSON there."""
    out.print(table)
    if json_path is not None:
        with user_errors():
            write_json(json_path, data)
        err.print(f"results written to {json_path}", highlight=False)
