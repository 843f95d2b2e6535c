"""Progress of the Python API's long calls on stderr, shown where a call is given `show_progress_bar=True`
(quiet by default, as a library should be): the command line's display, a live bar on a terminal and a
plain line every 30 seconds in a file (cli/output.py's ProgressDisplay)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bitextmine.cli.output import ProgressDisplay


def progress_display(description: str, total: int | None, *, rates: bool = False) -> ProgressDisplay:
    """A display of `total` units (a context manager; `advance(units, tokens)` counts them); with `rates`,
    sentences/s and tokens/s too."""
    from bitextmine.cli.output import ProgressDisplay  # the CLI's modules, loaded only to be shown

    return ProgressDisplay(description, total, rates=rates)
