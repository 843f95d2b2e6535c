"""Progress of long work on stderr: a live bar on a terminal, a plain line every LOG_EVERY_SECONDS in a
file. The command line shows it unless --quiet (cli/output.py); the Python API where a call is given
`show_progress_bar=True` (quiet by default, as a library should be)."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

LOG_EVERY_SECONDS = 30.0  # how often a progress line is written when stderr is a file, not a terminal


class ProgressDisplay:
    """Progress on `console` (stderr by default). On a terminal a live bar; in a file (a Slurm log,
    `2> log`), where a bar would show only its last frame once the run ends, a plain line every
    LOG_EVERY_SECONDS and one at the end. With `rates`, sentences/s and tokens/s are shown too (`advance`
    then takes tokens). Nothing unless `shown`, nor where there is nothing to do (a total of 0: a rerun
    that finds the work done). A `deferred` display starts at its first `advance` (0 units count), so a
    step that reports no work (an exact index: nothing to build) shows none."""

    def __init__(
        self,
        description: str,
        total: int | None,
        *,
        rates: bool = False,
        clock: Callable[[], float] = time.monotonic,
        console: Console | None = None,
        shown: bool = True,
        deferred: bool = False,
    ) -> None:
        self.description, self.total, self.rates, self.clock = description, total, rates, clock
        self.deferred, self.running = deferred, False
        self.done = self.tokens = 0
        self.started = self.last_line = 0.0
        self.bar: Progress | None = None
        self.console = console or Console(stderr=True)
        self.shown = shown and total != 0
        if self.shown and self.console.is_terminal:
            columns = [
                TextColumn("{task.description}", "bold", markup=False),
                BarColumn(),
                MofNCompleteColumn(),
            ]
            self.bar = Progress(
                *columns, *([_RateColumn()] if rates else []), TimeElapsedColumn(), console=self.console
            )
            self.task = self.bar.add_task(description, total=total, tokens=0)

    def __enter__(self) -> ProgressDisplay:
        if not self.deferred:
            self._start()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.running:
            return
        if self.bar is not None:
            self.bar.stop()
        elif self.shown:
            self.console.print(self.line(), highlight=False, soft_wrap=True)

    def _start(self) -> None:
        self.running = True
        self.started = self.last_line = self.clock()
        if self.bar is not None:
            self.bar.start()

    def advance(self, n: int, tokens: int = 0) -> None:
        if not self.running:
            self._start()
        self.done += n
        self.tokens += tokens
        if self.bar is not None:
            self.bar.update(self.task, advance=n, tokens=self.tokens)
        elif self.shown and self.clock() - self.last_line >= LOG_EVERY_SECONDS:
            self.last_line = self.clock()
            self.console.print(self.line(), highlight=False, soft_wrap=True)

    def set_total(self, total: int) -> None:
        self.total = total
        if self.bar is not None:
            self.bar.update(self.task, total=total)

    def line(self) -> str:
        """`description: done/total (percent), rates, elapsed` as one plain line."""
        elapsed = self.clock() - self.started
        of = "" if self.total is None else f"/{self.total:,} ({100 * self.done / max(self.total, 1):.0f}%)"
        speed = ""
        if self.rates and elapsed > 0:
            speed = f", {self.done / elapsed:,.1f} sent/s, {self.tokens / elapsed:,.0f} tok/s"
        return f"{self.description}: {self.done:,}{of}{speed}, {_clock_time(elapsed)}"


def _clock_time(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{seconds:02d}"


class _RateColumn(ProgressColumn):
    """Sentences/s from the task's progress and tokens/s from its `tokens` field."""

    def render(self, task: Task) -> Text:
        elapsed = task.elapsed or 0.0
        if elapsed <= 0:
            return Text("")
        tokens = task.fields.get("tokens", 0)
        return Text(f"{task.completed / elapsed:,.1f} sent/s  {tokens / elapsed:,.0f} tok/s", style="cyan")


def progress_display(description: str, total: int | None, *, rates: bool = False) -> ProgressDisplay:
    """A display of `total` units on stderr (a context manager; `advance(units, tokens)` counts them);
    with `rates`, sentences/s and tokens/s too."""
    return ProgressDisplay(description, total, rates=rates)
