"""What a pair filter is: the settings it reads and its test over a batch of candidate pairs.

A filter is a `FilterRule` subclass: its `name` (the key of its drop count), its `fields` (each a
`FilterSettings` field, set by `--filter NAME[=VALUE]`, with its value-less default and its type check),
any range rule beyond the type (`check`) and `keep`, the mask of the pairs it lets through.
`settings_type` makes the settings class of an ordered list of filters, so a filter's settings are
written once, in its class; `mining/filters.py` lists the filters `mine` runs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, make_dataclass
from typing import Any, ClassVar

import numpy as np

from bitextmine.errors import BitextmineError, BitextmineValueError, real_number, whole_number

_OFF_WORDS = {"0", "false", "no", "off"}


@dataclass(frozen=True)
class Setting:
    """One settings field of a filter; off (None, or False for a switch) unless set.

    `--filter NAME[=VALUE]` sets it, NAME being the field with dashes; `bare` is its value without VALUE
    (None: VALUE is needed)."""

    field: str
    kind: type[float] | type[int] | type[bool]
    bare: float | int | bool | None = None

    @property
    def option(self) -> str:
        return self.field.replace("_", "-")

    @property
    def off(self) -> bool | None:
        return False if self.kind is bool else None

    def read(self, item: str, value: str) -> float | int | bool:
        """VALUE of `--filter item` (NAME=VALUE, or NAME alone for `bare`); one-line errors."""
        if not value:
            if self.bare is None:
                raise BitextmineError(f"--filter {self.option} needs a value: --filter {self.option}=VALUE")
            return self.bare
        if self.kind is bool:
            return value.lower() not in _OFF_WORDS
        try:
            return self.kind(value)
        except ValueError:
            raise BitextmineError(
                f"--filter {item!r}: {value!r} is not a valid value for {self.option}"
            ) from None

    def check(self, value: object) -> None:
        """Numbers finite and whole where they count (`score-max=nan` dropped every pair), switches bool."""
        if self.kind is bool:
            if not isinstance(value, bool):
                raise BitextmineValueError(f"--filter: {self.option} must be True or False")
        elif value is not None:
            if self.kind is int:
                whole_number(f"--filter {self.option}", value, 0)
            else:
                real_number(f"--filter {self.option}", value)


class FilterRule(ABC):
    """One pair filter for one language pair; it may keep state across the batches of a run (dedup)."""

    name: ClassVar[str]  # its key in the drop counts and the stats
    fields: ClassVar[tuple[Setting, ...]]

    def __init__(self, settings: Any, langs: tuple[str, str]) -> None:
        self.settings = settings
        self.langs = langs

    @classmethod
    def is_on(cls, settings: Any) -> bool:
        return any(getattr(settings, s.field) != s.off for s in cls.fields)

    @classmethod
    def check(cls, settings: Any) -> str | None:
        """What is wrong with its values beyond their types (a range), or None."""
        return None

    @abstractmethod
    def keep(self, scores: np.ndarray, src: list[str], tgt: list[str]) -> np.ndarray:
        """Boolean mask of the pairs of this batch that pass."""


def settings_type(rules: Sequence[type[FilterRule]], module: str = __name__) -> type:
    """The frozen settings dataclass of `rules`: their fields in order, each off by default, checked when
    made; `rules` (its filters, in the order they run), `enabled()` and `to_json()` with it."""
    fields = [
        (s.field, s.kind if s.kind is bool else s.kind | None, field(default=s.off))
        for rule in rules
        for s in rule.fields
    ]
    namespace = {
        "__doc__": "Which filters run and their parameters; None (or False) means off.",
        "__module__": module,
        "rules": tuple(rules),
        "__post_init__": _check,
        "enabled": _enabled,
        "to_json": asdict,
    }
    return make_dataclass("FilterSettings", fields, namespace=namespace, frozen=True)


def _check(settings: Any) -> None:
    """Made by `parse_filters` or by hand: checked before any work."""
    for rule in settings.rules:
        for s in rule.fields:
            s.check(getattr(settings, s.field))
    for rule in settings.rules:
        if (problem := rule.check(settings)) is not None:
            raise BitextmineValueError(f"--filter: {problem}")


def _enabled(settings: Any) -> list[str]:
    """The names of the filters that run, in order."""
    return [rule.name for rule in settings.rules if rule.is_on(settings)]
