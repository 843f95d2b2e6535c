"""Progress of long work: `Progress`, what every step reports it to, and `ProgressDisplay`, which shows it
on stderr (a live bar on a terminal, a plain line every LOG_EVERY_SECONDS in a file). The command line
shows it unless --quiet (cli/output.py); the Python API where a call is given `show_progress_bar=True`
or a `ProgressDisplay` (quiet by default, as a library should be)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichProgress
from rich.text import Text

LOG_EVERY_SECONDS = 30.0  # how often a progress line is written when stderr is a file, not a terminal


# `Progress.advance` as a callback: units done (and tokens, while encoding; reused=True: vectors taken
# as they were, not encoded)
Advance = Callable[..., None]


class Progress:
    """How a step tells its caller how far it has come: the one progress type of the steps (steps/*.py).
    A step opens a stage of `total` units (rows, queries, sentences) with `stage`, counts the units done
    with `advance` and ends the stage itself. This one tells nothing; `ProgressDisplay` shows it."""

    def start(self, description: str, total: int | None, *, rates: bool = False) -> None:
        """A stage of `total` units begins (None: not known yet); `rates`: its units are sentences,
        advanced with their tokens."""

    def advance(self, n: int, tokens: int = 0, *, reused: bool = False) -> None:
        """`n` more units of the stage are done (of `tokens` tokens); `reused`: taken as they were (vectors
        stored earlier), so they count as done but not towards an encoding rate."""

    def end(self) -> None:
        """The stage has ended."""

    @contextmanager
    def stage(self, description: str, total: int | None, *, rates: bool = False) -> Iterator[Progress]:
        """`start`, then `end` once the block is left, however it is left."""
        self.start(description, total, rates=rates)
        try:
            yield self
        finally:
            self.end()


class ProgressDisplay(Progress):
    """Progress on `console` (stderr by default), one stage after another. On a terminal a live bar; in
    a file (a Slurm log, `2> log`), where a bar would show only its last frame once the run ends, a plain
    line every LOG_EVERY_SECONDS and one at the end of the stage; both with the time left where the total
    is known. With `rates`, sentences/s and tokens/s of the sentences encoded (not reused) are shown too.
    Nothing unless `shown`, nor where there is nothing to do (a total of 0: a rerun that finds the work
    done). As a context manager with a `description`, it is that one stage."""

    def __init__(
        self,
        description: str | None = None,
        total: int | None = None,
        *,
        rates: bool = False,
        clock: Callable[[], float] = time.monotonic,
        console: Console | None = None,
        shown: bool = True,
    ) -> None:
        self.first = None if description is None else (description, total, rates)
        self.clock, self.visible = clock, shown
        self.console = console or Console(stderr=True)
        self.description, self.total, self.rates = "", total, rates
        self.done = self.tokens = self.reused = 0
        self.started = self.last_line = 0.0
        self.bar: RichProgress | None = None
        self.shown = self.open = False

    def __enter__(self) -> ProgressDisplay:
        if self.first is not None:
            description, total, rates = self.first
            self.start(description, total, rates=rates)
        return self

    def __exit__(self, *exc: object) -> None:
        self.end()

    def start(self, description: str, total: int | None, *, rates: bool = False) -> None:
        self.end()
        self.description, self.total, self.rates = description, total, rates
        self.done = self.tokens = self.reused = 0
        self.started = self.last_line = self.clock()
        self.shown, self.open = self.visible and total != 0, True
        if self.shown and self.console.is_terminal:
            columns = [
                TextColumn("{task.description}", "bold", markup=False),
                BarColumn(),
                MofNCompleteColumn(),
            ]
            rate = [_RateColumn()] if rates else []
            times = [TimeElapsedColumn(), TimeRemainingColumn()]
            self.bar = RichProgress(*columns, *rate, *times, console=self.console)
            self.task = self.bar.add_task(description, total=total, tokens=0, reused=0)
            self.bar.start()

    def end(self) -> None:
        if not self.open:
            return
        self.open = False
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
        elif self.shown:
            self.console.print(self.line(), highlight=False, soft_wrap=True)

    def advance(self, n: int, tokens: int = 0, *, reused: bool = False) -> None:
        self.done += n
        self.tokens += tokens
        self.reused += n if reused else 0
        if self.bar is not None:
            self.bar.update(self.task, advance=n, tokens=self.tokens, reused=self.reused)
        elif self.shown and self.clock() - self.last_line >= LOG_EVERY_SECONDS:
            self.last_line = self.clock()
            self.console.print(self.line(), highlight=False, soft_wrap=True)

    def set_total(self, total: int) -> None:
        self.total = total
        if self.bar is not None:
            self.bar.update(self.task, total=total)

    def line(self) -> str:
        """`description: done/total (percent), [reused,] rates, elapsed[, left]` as one plain line."""
        elapsed = self.clock() - self.started
        of = "" if self.total is None else f"/{self.total:,} ({100 * self.done / max(self.total, 1):.0f}%)"
        speed = ""
        if self.rates and elapsed > 0:
            speed = "".join(f", {part}" for part in _rates(self.done, self.reused, self.tokens, elapsed))
        left = ""
        if self.total is not None and 0 < self.done < self.total and elapsed > 0:
            left = f", {_clock_time((self.total - self.done) * elapsed / self.done)} left"
        return f"{self.description}: {self.done:,}{of}{speed}, {_clock_time(elapsed)}{left}"


def _rates(done: int, reused: int, tokens: int, elapsed: float) -> list[str]:
    """Sentences/s and tokens/s of the sentences encoded, after how many were reused where some were."""
    encoded = done - reused
    rates = [f"{encoded / elapsed:,.1f} sent/s", f"{tokens / elapsed:,.0f} tok/s"]
    if not reused:
        return rates
    return [f"{reused:,} reused", f"{encoded:,} encoded", *(rates if encoded else [])]


def _clock_time(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{seconds:02d}"


class _RateColumn(ProgressColumn):
    """Sentences/s from the task's progress and tokens/s from its `tokens` field."""

    def render(self, task: Task) -> Text:
        elapsed = task.elapsed or 0.0
        if elapsed <= 0:
            return Text("")
        done, reused, tokens = int(task.completed), task.fields["reused"], task.fields["tokens"]
        return Text("  ".join(_rates(done, reused, tokens, elapsed)), style="cyan")


def progress_display(description: str, total: int | None, *, rates: bool = False) -> ProgressDisplay:
    """A display of `total` units on stderr (a context manager; `advance(units, tokens)` counts them);
    with `rates`, sentences/s and tokens/s too."""
    return ProgressDisplay(description, total, rates=rates)


@contextmanager
def with_bar(progress: Advance | None, shown: bool, total: int, *, rates: bool) -> Iterator[Advance | None]:
    """`progress`, and where `shown` (a call's `show_progress_bar`) also an "encoding" bar of `total`
    units on stderr: the callback to count the units with."""
    if not shown:
        yield progress
        return
    with progress_display("encoding", total, rates=rates) as display:
        if progress is None:
            yield display.advance
            return

        def advance(sentences: int, tokens: int = 0, *, reused: bool = False) -> None:
            progress(sentences, tokens, reused=reused)
            display.advance(sentences, tokens, reused=reused)

        yield advance
