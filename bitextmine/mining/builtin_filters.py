"""The pair filters `mine`, `score` and `eval bucc` offer, and the text measures they compare.

Web text gives high margins to pairs of which one side is not in its language (English left untranslated,
a third language), to identical junk (numbers, dates, codes, URLs) and to page furniture: each filter
here drops one kind. Dedup keeps the first, i.e. best-scoring, occurrence of a pair; it holds 8 bytes
per kept pair.
"""

from __future__ import annotations

import difflib
import hashlib
import unicodedata
from collections.abc import Sequence
from typing import Any

import numpy as np

from bitextmine.mining.filter_base import FilterRule, Setting
from bitextmine.text.lid import DEFAULT_OTHER_CONFIDENCE, has_words, is_other_language, lid_code

WIDE_CHAR_WEIGHT = 3  # an East Asian wide character carries about three Latin ones (zh-en gold: 0.29)


class ScoreMax(FilterRule):
    """Drops pairs scoring above `score_max` (mostly boilerplate)."""

    name = "score-max"
    fields = (Setting("score_max", float),)

    def keep(self, scores: np.ndarray, src: list[str], tgt: list[str]) -> np.ndarray:
        return scores <= self.settings.score_max


class Length(FilterRule):
    """Drops pairs with a side shorter than `min_chars` or longer than `max_chars`."""

    name = "length"
    fields = (Setting("min_chars", int), Setting("max_chars", int))

    def keep(self, scores: np.ndarray, src: list[str], tgt: list[str]) -> np.ndarray:
        bounds = self.settings.min_chars, self.settings.max_chars
        return within_length(src, *bounds) & within_length(tgt, *bounds)


class LengthRatio(FilterRule):
    """Drops pairs whose side lengths differ by more than the factor `length_ratio`."""

    name = "length-ratio"
    fields = (Setting("length_ratio", float, 2.5),)

    @classmethod
    def check(cls, settings: Any) -> str | None:
        return (
            None
            if settings.length_ratio is None or settings.length_ratio >= 1
            else "length-ratio must be >= 1"
        )

    def keep(self, scores: np.ndarray, src: list[str], tgt: list[str]) -> np.ndarray:
        return length_ratio_ok(src, tgt, self.settings.length_ratio)


class Letters(FilterRule):
    """Drops pairs with a side that has no word (numbers, dates, codes, URLs)."""

    name = "letters"
    fields = (Setting("letters", bool, True),)

    def keep(self, scores: np.ndarray, src: list[str], tgt: list[str]) -> np.ndarray:
        return np.array([has_words(a) and has_words(b) for a, b in zip(src, tgt, strict=True)], dtype=bool)


class Copies(FilterRule):
    """Drops pairs whose sides are `copies` similar or more (1.0: identical)."""

    name = "copies"
    fields = (Setting("copies", float, 0.9),)

    @classmethod
    def check(cls, settings: Any) -> str | None:
        return None if settings.copies is None or 0 < settings.copies <= 1 else "copies must be in (0, 1]"

    def keep(self, scores: np.ndarray, src: list[str], tgt: list[str]) -> np.ndarray:
        similar = self.settings.copies
        return np.array([not is_copy(a, b, similar) for a, b in zip(src, tgt, strict=True)], dtype=bool)


class Language(FilterRule):
    """Drops pairs with a side identified as another language at confidence `language`."""

    name = "language"
    fields = (Setting("language", float, DEFAULT_OTHER_CONFIDENCE),)

    def __init__(self, settings: Any, langs: tuple[str, str]) -> None:
        super().__init__(settings, langs)
        for lang in langs:
            lid_code(lang)  # an unknown code fails now, not after the search

    @classmethod
    def check(cls, settings: Any) -> str | None:
        ok = settings.language is None or 0 <= settings.language <= 1
        return None if ok else "language must be in [0, 1]"

    def keep(self, scores: np.ndarray, src: list[str], tgt: list[str]) -> np.ndarray:
        confidence = self.settings.language
        src_other = is_other_language(src, self.langs[0], confidence)
        return ~src_other & ~is_other_language(tgt, self.langs[1], confidence)


class Dedup(FilterRule):
    """Drops pairs equal to a better-scoring kept pair after normalisation."""

    name = "dedup"
    fields = (Setting("dedup", bool, True),)

    def __init__(self, settings: Any, langs: tuple[str, str]) -> None:
        super().__init__(settings, langs)
        self._seen = np.zeros(0, dtype=np.uint64)  # sorted hashes of the kept pairs

    def keep(self, scores: np.ndarray, src: list[str], tgt: list[str]) -> np.ndarray:
        hashes = np.array([pair_hash(a, b) for a, b in zip(src, tgt, strict=True)], dtype=np.uint64)
        first = np.zeros(len(hashes), dtype=bool)
        first[np.unique(hashes, return_index=True)[1]] = True
        position = np.minimum(np.searchsorted(self._seen, hashes), max(len(self._seen) - 1, 0))
        earlier = (self._seen[position] == hashes) if len(self._seen) else np.zeros(len(hashes), bool)
        keep = first & ~earlier
        self._seen = np.sort(np.concatenate([self._seen, hashes[keep]]), kind="stable")
        return keep


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
