"""Pair filters: drop candidate pairs that score well but are not translations (docs/design.md, "Pair
filters").

`FILTERS` lists the filters (`mining/builtin_filters.py`), cheap ones first: the order they run in and
the order of their settings. `PairFilter` runs the enabled ones over chunks of candidates sorted by
decreasing score and counts, per filter, the pairs it was the first to drop. A new filter is a
`FilterRule` class (`mining/filter_base.py`) named in `FILTERS`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from bitextmine.errors import BitextmineError
from bitextmine.mining.builtin_filters import Copies, Dedup, Language, Length, LengthRatio, Letters, ScoreMax
from bitextmine.mining.filter_base import FilterRule, settings_type
from bitextmine.text.lid import DEFAULT_OTHER_CONFIDENCE, knows

FILTERS: tuple[type[FilterRule], ...] = (ScoreMax, Length, LengthRatio, Letters, Copies, Language, Dedup)
FilterSettings = settings_type(FILTERS, __name__)
FILTER_NAMES = tuple(s.option for rule in FILTERS for s in rule.fields)  # what --filter takes

NO_FILTERS = FilterSettings()
# `--filters web`: what web crawls need (measured: examples/benchmarks/bench_filters.py)
WEB = FilterSettings(
    length_ratio=2.5, letters=True, copies=0.9, language=DEFAULT_OTHER_CONFIDENCE, dedup=True
)
PRESETS = {"none": NO_FILTERS, "web": WEB}
# `mine`'s preset when none is given: it costs little on clean dev splits and wins back F1 on web-like
# noise after encode's default LID (examples/benchmarks/results/bench_filters.md)
DEFAULT_PRESET = "web"


def parse_filters(preset: str | None, items: Sequence[str] = ()) -> FilterSettings:
    """A preset (none, web) with `NAME[=VALUE]` items applied on top; one-line errors for bad items."""
    name = (preset or "none").lower()
    if name not in PRESETS:
        raise BitextmineError(f"unknown filter preset {preset!r}; choose one of {', '.join(PRESETS)}")
    return with_items(PRESETS[name], items)


def with_items(settings: Any, items: Sequence[str]) -> Any:
    """`settings` (of any `settings_type`) with the `--filter NAME[=VALUE]` items applied in turn."""
    fields = {s.option: s for rule in settings.rules for s in rule.fields}
    for item in items:
        key, _, value = item.partition("=")
        if key not in fields:
            raise BitextmineError(
                f"unknown filter {key!r} in --filter {item!r}; filters: {', '.join(fields)}"
            )
        settings = replace(settings, **{fields[key].field: fields[key].read(item, value)})
    return settings


def default_filters(
    src_lang: str, tgt_lang: str, warn: Callable[[str], None], items: Sequence[str] = ()
) -> FilterSettings:
    """`mine`'s filters when no preset is asked for: DEFAULT_PRESET with the `items` (--filter) on top,
    without its language check where the language identifier does not know a language (said through
    `warn`) and no item asks for the check, so that no pair fails for it."""
    settings = parse_filters(DEFAULT_PRESET, items)
    unknown = [lang for lang in (src_lang, tgt_lang) if not knows(lang)]
    asked = any(item.partition("=")[0] == "language" for item in items)
    if unknown and settings.language is not None and not asked:
        warn(
            f"language identification does not know {', '.join(map(repr, unknown))}: the default filters "
            f"({DEFAULT_PRESET}) skip their language check (--filters {DEFAULT_PRESET} or none silences this)"
        )
        settings = replace(settings, language=None)
    return settings


class PairFilter:
    """The enabled filters of `settings` for one language pair, stateful across chunks (dedup, counts)."""

    def __init__(self, settings: FilterSettings, src_lang: str, tgt_lang: str) -> None:
        self.langs = (src_lang, tgt_lang)
        self.rules = [rule(settings, self.langs) for rule in settings.rules if rule.is_on(settings)]
        self.dropped = {rule.name: 0 for rule in self.rules}

    def keep(self, scores: np.ndarray, src: Sequence[str], tgt: Sequence[str]) -> np.ndarray:
        """Boolean mask of the pairs of this chunk that pass every enabled filter."""
        keep = np.ones(len(scores), dtype=bool)
        for rule in self.rules:
            alive = np.flatnonzero(keep)
            if not len(alive):
                break
            passed = rule.keep(np.asarray(scores)[alive], [src[i] for i in alive], [tgt[i] for i in alive])
            self.dropped[rule.name] += int(np.count_nonzero(~passed))
            keep[alive[~passed]] = False
        return keep

    def counts(self) -> dict[str, int]:
        return dict(self.dropped)
