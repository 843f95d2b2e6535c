"""Pair filters: drop candidate pairs that score well but are not translations (docs/design.md, "Pair
filters").

Web text gives high margins to pairs of which one side is not in its language (English left untranslated,
a third language), to identical junk (numbers, dates, codes, URLs) and to page furniture. Each filter
looks at one candidate pair (score, source text, target text) and says keep or drop; `PairFilter` runs
the enabled ones in FILTER_ORDER (cheap ones first) over chunks of candidates sorted by decreasing score
and counts, per filter, the pairs it was the first to drop. Dedup is last and keeps the first, i.e.
best-scoring, occurrence; it holds 8 bytes per kept pair.
"""

from __future__ import annotations

import difflib
import hashlib
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np

from bitextmine.errors import BitextmineError, BitextmineValueError, real_number, whole_number
from bitextmine.text.lid import DEFAULT_OTHER_CONFIDENCE, has_words, is_other_language, knows, lid_code

FILTER_ORDER = ("score-max", "length", "length-ratio", "letters", "copies", "language", "dedup")
WIDE_CHAR_WEIGHT = 3  # an East Asian wide character carries about three Latin ones (zh-en gold: 0.29)


def _check(settings: FilterSettings) -> None:
    """Each value of its type and range, numbers finite (`score-max=nan` dropped every pair)."""
    for field in ("score_max", "length_ratio", "copies", "language"):
        if getattr(settings, field) is not None:
            real_number(f"--filter {field.replace('_', '-')}", getattr(settings, field))
    for field in ("min_chars", "max_chars"):
        if getattr(settings, field) is not None:
            whole_number(f"--filter {field.replace('_', '-')}", getattr(settings, field), 0)
    checks = [
        (settings.length_ratio is None or settings.length_ratio >= 1, "length-ratio must be >= 1"),
        (settings.copies is None or 0 < settings.copies <= 1, "copies must be in (0, 1]"),
        (settings.language is None or 0 <= settings.language <= 1, "language must be in [0, 1]"),
        (
            all(isinstance(v, bool) for v in (settings.letters, settings.dedup)),
            "letters and dedup must be True or False",
        ),
    ]
    for ok, message in checks:
        if not ok:
            raise BitextmineValueError(f"--filter: {message}")


@dataclass(frozen=True)
class FilterSettings:
    """Which filters run and their parameters; None (or False) means off."""

    score_max: float | None = None  # drop pairs scoring above this (mostly boilerplate)
    min_chars: int | None = None  # drop pairs with a side shorter than this
    max_chars: int | None = None  # ... or longer than this
    length_ratio: float | None = None  # drop pairs whose side lengths differ by more than this factor
    letters: bool = False  # drop pairs with a side that has no word (numbers, dates, codes, URLs)
    copies: float | None = None  # drop pairs whose sides are this similar or more (1.0: identical)
    language: float | None = None  # drop pairs with a side identified as another language at this confidence
    dedup: bool = False  # drop pairs equal to a better-scoring kept pair after normalisation

    def __post_init__(self) -> None:  # made by parse_filters or by hand: checked before any work
        _check(self)

    def enabled(self) -> list[str]:
        on = {
            "score-max": self.score_max is not None,
            "length": self.min_chars is not None or self.max_chars is not None,
            "length-ratio": self.length_ratio is not None,
            "letters": self.letters,
            "copies": self.copies is not None,
            "language": self.language is not None,
            "dedup": self.dedup,
        }
        return [name for name in FILTER_ORDER if on[name]]

    def to_json(self) -> dict[str, float | int | bool | None]:
        return asdict(self)


NO_FILTERS = FilterSettings()


# `--filters web`: what web crawls need (measured: examples/benchmarks/bench_filters.py)
WEB = FilterSettings(
    length_ratio=2.5, letters=True, copies=0.9, language=DEFAULT_OTHER_CONFIDENCE, dedup=True
)
PRESETS = {"none": NO_FILTERS, "web": WEB}
# `mine`'s preset when none is given: it costs little on clean dev splits and wins back F1 on web-like
# noise after encode's default LID (examples/benchmarks/results/bench_filters.md)
DEFAULT_PRESET = "web"

# --filter NAME[=VALUE]: the settings field, how to read VALUE, and the value without one
_SPECS: dict[str, tuple[str, Callable[[str], object], object]] = {
    "score-max": ("score_max", float, None),
    "min-chars": ("min_chars", int, None),
    "max-chars": ("max_chars", int, None),
    "length-ratio": ("length_ratio", float, 2.5),
    "letters": ("letters", lambda v: v.lower() not in {"0", "false", "no", "off"}, True),
    "copies": ("copies", float, 0.9),
    "language": ("language", float, DEFAULT_OTHER_CONFIDENCE),
    "dedup": ("dedup", lambda v: v.lower() not in {"0", "false", "no", "off"}, True),
}
FILTER_NAMES = tuple(_SPECS)


def parse_filters(preset: str | None, items: Sequence[str] = ()) -> FilterSettings:
    """A preset (none, web) with `NAME[=VALUE]` items applied on top; one-line errors for bad items."""
    name = (preset or "none").lower()
    if name not in PRESETS:
        raise BitextmineError(f"unknown filter preset {preset!r}; choose one of {', '.join(PRESETS)}")
    settings = PRESETS[name]
    for item in items:
        key, _, value = item.partition("=")
        if key not in _SPECS:
            raise BitextmineError(
                f"unknown filter {key!r} in --filter {item!r}; filters: {', '.join(_SPECS)}"
            )
        field, read, default = _SPECS[key]
        settings = replace(settings, **{field: _filter_value(item, key, value, read, default)})
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


def _filter_value(item: str, key: str, value: str, read: Callable[[str], object], default: object) -> object:
    if not value:
        if default is None:
            raise BitextmineError(f"--filter {key} needs a value: --filter {key}=VALUE")
        return default
    try:
        return read(value)
    except ValueError:
        raise BitextmineError(f"--filter {item!r}: {value!r} is not a valid value for {key}") from None


class PairFilter:
    """The enabled filters of `settings` for one language pair, stateful across chunks (dedup, counts)."""

    def __init__(self, settings: FilterSettings, src_lang: str, tgt_lang: str) -> None:
        self.settings = settings
        self.langs = (src_lang, tgt_lang)
        self.enabled = settings.enabled()
        self.dropped = dict.fromkeys(self.enabled, 0)
        self._seen = np.zeros(0, dtype=np.uint64)  # sorted hashes of the kept pairs (dedup)
        if "language" in self.enabled:
            for lang in self.langs:
                lid_code(lang)  # an unknown code fails now, not after the search

    def keep(self, scores: np.ndarray, src: Sequence[str], tgt: Sequence[str]) -> np.ndarray:
        """Boolean mask of the pairs of this chunk that pass every enabled filter."""
        keep = np.ones(len(scores), dtype=bool)
        for name in self.enabled:
            alive = np.flatnonzero(keep)
            if not len(alive):
                break
            passed = self._run(
                name, np.asarray(scores)[alive], [src[i] for i in alive], [tgt[i] for i in alive]
            )
            self.dropped[name] += int(np.count_nonzero(~passed))
            keep[alive[~passed]] = False
        return keep

    def _run(self, name: str, scores: np.ndarray, src: list[str], tgt: list[str]) -> np.ndarray:
        s = self.settings
        if name == "score-max":
            return scores <= s.score_max
        if name == "length":
            return within_length(src, s.min_chars, s.max_chars) & within_length(tgt, s.min_chars, s.max_chars)
        if name == "length-ratio":
            return length_ratio_ok(src, tgt, s.length_ratio)
        if name == "letters":
            return np.array(
                [has_words(a) and has_words(b) for a, b in zip(src, tgt, strict=True)], dtype=bool
            )
        if name == "copies":
            return np.array([not is_copy(a, b, s.copies) for a, b in zip(src, tgt, strict=True)], dtype=bool)
        if name == "language":
            src_other = is_other_language(src, self.langs[0], s.language)
            return ~src_other & ~is_other_language(tgt, self.langs[1], s.language)
        return self._dedup(src, tgt)

    def _dedup(self, src: list[str], tgt: list[str]) -> np.ndarray:
        hashes = np.array([pair_hash(a, b) for a, b in zip(src, tgt, strict=True)], dtype=np.uint64)
        first = np.zeros(len(hashes), dtype=bool)
        first[np.unique(hashes, return_index=True)[1]] = True
        position = np.minimum(np.searchsorted(self._seen, hashes), max(len(self._seen) - 1, 0))
        earlier = (self._seen[position] == hashes) if len(self._seen) else np.zeros(len(hashes), bool)
        keep = first & ~earlier
        self._seen = np.sort(np.concatenate([self._seen, hashes[keep]]), kind="stable")
        return keep

    def counts(self) -> dict[str, int]:
        return dict(self.dropped)


def _each(src: list[str], tgt: list[str], test: Callable[[str, str], bool]) -> np.ndarray:
    return np.array([test(a, b) for a, b in zip(src, tgt, strict=True)], dtype=bool)


def normalise(text: str) -> str:
    """NFKC, case-folded, letters and digits only: what copies and dedup compare."""
    return "".join(c for c in unicodedata.normalize("NFKC", text).casefold() if c.isalnum())


def visible_length(text: str) -> int:
    """Characters, an East Asian wide one counting WIDE_CHAR_WEIGHT (so zh and en lengths compare)."""
    wide = sum(1 for c in text if unicodedata.east_asian_width(c) in "WF")
    return len(text) + (WIDE_CHAR_WEIGHT - 1) * wide


def within_length(texts: Sequence[str], min_chars: int | None, max_chars: int | None) -> np.ndarray:
    lengths = np.array([len(t) for t in texts], dtype=np.int64)
    return (lengths >= (min_chars or 0)) & (lengths <= (max_chars if max_chars is not None else np.inf))


def length_ratio_ok(src: Sequence[str], tgt: Sequence[str], max_ratio: float) -> np.ndarray:
    a = np.array([max(visible_length(t), 1) for t in src], dtype=np.float64)
    b = np.array([max(visible_length(t), 1) for t in tgt], dtype=np.float64)
    return np.maximum(a, b) <= max_ratio * np.minimum(a, b)


def is_copy(src: str, tgt: str, min_similarity: float) -> bool:
    """True if the normalised sides are equal, or at least `min_similarity` alike (difflib's ratio)."""
    a, b = normalise(src), normalise(tgt)
    if a == b:
        return True
    if min_similarity >= 1 or not a or not b:
        return False
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return (
        matcher.real_quick_ratio() >= min_similarity
        and matcher.quick_ratio() >= min_similarity
        and matcher.ratio() >= min_similarity
    )


def pair_hash(src: str, tgt: str) -> int:
    key = f"{normalise(src)}\t{normalise(tgt)}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")
