"""The pair-filter options shared by `mine`, `score` and `eval bucc`, and the table of what they dropped."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from bitextmine.cli.app import checked_by
from bitextmine.cli.output import fields_table
from bitextmine.errors import warn_user
from bitextmine.mining.filters import (
    DEFAULT_PRESET,
    FILTER_NAMES,
    PRESETS,
    FilterSettings,
    default_filters,
    parse_filters,
)

_PRESETS_HELP = (
    f"Filter preset: {', '.join(PRESETS)}. web drops pairs with a side confidently in another language, "
    "copies, sides without words, length ratios above 2.5 and duplicate pairs (docs/commands.md)."
)
FiltersPresetOption = Annotated[
    str, typer.Option("--filters", help=_PRESETS_HELP, callback=checked_by(parse_filters))
]
# `mine`, `mine-files`: no preset given is `default_filters`
MineFiltersOption = Annotated[
    str | None,
    typer.Option(
        "--filters",
        help=f"{_PRESETS_HELP} \\[default: {DEFAULT_PRESET}, without its language check for a language "
        "that language identification does not know]",
        callback=checked_by(parse_filters),
    ),
]
FilterOption = Annotated[
    list[str] | None,
    typer.Option(
        "--filter",
        help=f"A filter NAME[=VALUE] on top of the preset, repeatable: {', '.join(FILTER_NAMES)} "
        "(e.g. --filter score-max=1.3 --filter copies=0.8 --filter dedup=off).",
        callback=checked_by(lambda items: parse_filters("none", items)),
    ),
]


def filter_settings(preset: str, items: list[str] | None) -> FilterSettings:
    return parse_filters(preset, items or [])


def mine_filter_settings(
    preset: str | None, items: list[str] | None, src_lang: str, tgt_lang: str
) -> FilterSettings | None:
    """`mine`'s filters: None (`default_filters`, resolved by the mine step) when neither a preset nor
    a filter is given; the filters on top of `default_filters` without a preset; else on the preset."""
    if preset is None and not items:
        return None
    if preset is None:
        return default_filters(src_lang, tgt_lang, warn_user, items or [])
    return parse_filters(preset, items or [])


def filtered_table(title: str, reached: int, dropped: dict[str, int], kept: int) -> Table:
    """How many candidates reached the threshold, what each filter dropped, how many were kept."""
    rows = [("reached the threshold", f"{reached:,}")]
    rows += [(f"dropped by {name}", f"{count:,}") for name, count in dropped.items()]
    rows.append(("kept", f"{kept:,}"))
    return fields_table(title, rows)
