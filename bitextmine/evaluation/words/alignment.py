"""Translated-in-context word pairs from parallel sentences and a bilingual dictionary.

Gaschi et al. 2022, "Multilingual Transformer Encoders: a Word-Level Task-Agnostic Evaluation",
§III-A: for each word of one sentence, every dictionary translation of it found in the other sentence
is a candidate; the pair is kept, with its context, only when there is exactly one candidate. Here a
candidate is an *occurrence*, so a translation that occurs twice is two candidates. The rule is
applied in both directions (the target word's dictionary translations must also occur exactly once in
the source sentence), as in the authors' implementation: otherwise the two occurrences of a repeated
word would both be paired with the same translation, one of them wrongly, while the paper keeps
"only those that we are certain of".

Dictionaries are MUSE-style, one ``x_word y_word`` pair per line (x and y in the order of the language
pair), matched case-insensitively. Entries whose two sides are the same string (names, numbers,
loanwords: about half of MUSE de-en) are dropped unless asked otherwise, as in the authors'
implementation; the paper does not discuss them, and such pairs share their subwords, so they are
trivially "aligned" at the embedding layer.

Word segmentation: maximal runs of word characters (``\\w``), i.e. splitting at whitespace and
punctuation, for languages written with spaces. Chinese has no spaces: runs of Han characters are
segmented by forward maximum matching against the Chinese words of the dictionary (the longest
dictionary word starting at each point, else a single character); other runs (digits, Latin words)
stay whole. A dictionary-based segmenter is simple, deterministic and cannot produce words the
dictionary does not know anyway; the paper does not say which segmenter it used.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bitextmine.errors import BitextmineError
from bitextmine.evaluation.retrieval import check_aligned
from bitextmine.text.reader import read_all_lines

NO_SPACE_LANGUAGES = frozenset({"zh", "zho", "cmn"})
_WORD = re.compile(r"\w+")
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]+")


@dataclass(frozen=True)
class Word:
    text: str
    start: int  # character span in the sentence
    end: int

    @property
    def key(self) -> str:
        """The form looked up in the dictionary."""
        return self.text.lower()


@dataclass(frozen=True)
class Dictionary:
    forward: dict[str, frozenset[str]]  # x word -> its y translations
    backward: dict[str, frozenset[str]]  # y word -> its x translations


@dataclass(frozen=True)
class WordPair:
    line: int  # index into the parallel sentences
    src: Word
    tgt: Word

    @property
    def types(self) -> tuple[str, str]:
        return self.src.key, self.tgt.key


def read_dictionary(path: Path, keep_identical: bool = False) -> Dictionary:
    """A MUSE dictionary, ``x_word<SPACE>y_word`` per line; a malformed line names file and line."""
    forward: dict[str, set[str]] = defaultdict(set)
    backward: dict[str, set[str]] = defaultdict(set)
    for number, line in enumerate(read_all_lines(path), start=1):
        fields = line.split()
        if len(fields) != 2:
            raise BitextmineError(
                f"{path}:{number}: expected 2 fields (word<SPACE>translation), got {len(fields)}"
            )
        x, y = fields[0].lower(), fields[1].lower()
        if x != y or keep_identical:
            forward[x].add(y)
            backward[y].add(x)
    if not forward:
        raise BitextmineError(f"{path}: no usable dictionary entries")
    return Dictionary(
        {w: frozenset(t) for w, t in forward.items()}, {w: frozenset(t) for w, t in backward.items()}
    )


def read_parallel(prefix: Path, src_lang: str, tgt_lang: str) -> tuple[list[str], list[str]]:
    """PREFIX.src_lang and PREFIX.tgt_lang, line-aligned (mismatched counts name both files)."""
    src_path = prefix.parent / f"{prefix.name}.{src_lang}"
    tgt_path = prefix.parent / f"{prefix.name}.{tgt_lang}"
    src, tgt = read_all_lines(src_path), read_all_lines(tgt_path)
    check_aligned(src_path, len(src), tgt_path, len(tgt))
    return src, tgt


class Segmenter:
    """Words of a sentence in one language; Chinese Han runs by forward maximum matching."""

    def __init__(self, lang: str, vocabulary: Iterable[str] = ()) -> None:
        self.matching = lang in NO_SPACE_LANGUAGES
        self.vocabulary = frozenset(vocabulary) if self.matching else frozenset()
        self.longest = max(map(len, self.vocabulary), default=1)

    def __call__(self, text: str) -> list[Word]:
        words = [Word(m.group(), m.start(), m.end()) for m in _WORD.finditer(text)]
        if not self.matching:
            return words
        return [piece for word in words for piece in self._split_han(word)]

    def _split_han(self, word: Word) -> Iterable[Word]:
        position = 0
        for run in _HAN.finditer(word.text):
            if run.start() > position:
                yield Word(word.text[position : run.start()], word.start + position, word.start + run.start())
            offset = word.start + run.start()
            for start, end in forward_maximum_matching(run.group(), self.vocabulary, self.longest):
                yield Word(run.group()[start:end], offset + start, offset + end)
            position = run.end()
        if position < len(word.text):
            yield Word(word.text[position:], word.start + position, word.end)


def forward_maximum_matching(text: str, vocabulary: frozenset[str], longest: int) -> list[tuple[int, int]]:
    """Spans of the longest vocabulary word at each position, left to right; else one character."""
    spans, start = [], 0
    while start < len(text):
        end = next(
            (e for e in range(min(len(text), start + longest), start + 1, -1) if text[start:e] in vocabulary),
            start + 1,
        )
        spans.append((start, end))
        start = end
    return spans


def unique_candidate_pairs(
    src: Sequence[Word], tgt: Sequence[Word], dictionary: Dictionary
) -> list[tuple[int, int]]:
    """(i, j) such that tgt[j] is the only occurrence in `tgt` of a translation of src[i], and src[i]
    the only occurrence in `src` of a translation of tgt[j]."""
    src_at, tgt_at = _positions(src), _positions(tgt)
    pairs = []
    for i, word in enumerate(src):
        candidates = _occurrences(dictionary.forward.get(word.key, ()), tgt_at)
        if len(candidates) == 1:
            j = candidates[0]
            if len(_occurrences(dictionary.backward.get(tgt[j].key, ()), src_at)) == 1:
                pairs.append((i, j))
    return pairs


def _positions(words: Sequence[Word]) -> dict[str, list[int]]:
    at: dict[str, list[int]] = defaultdict(list)
    for i, word in enumerate(words):
        at[word.key].append(i)
    return at


def _occurrences(translations: Iterable[str], at: dict[str, list[int]]) -> list[int]:
    return [i for t in translations for i in at.get(t, ())]


def extract_pairs(
    src_lines: Sequence[str],
    tgt_lines: Sequence[str],
    langs: tuple[str, str],
    dictionary: Dictionary,
    lines: Iterable[int] | None = None,
) -> list[WordPair]:
    """Every translated-in-context pair of the given lines (all by default), in line order."""
    src_words, tgt_words = Segmenter(langs[0], dictionary.forward), Segmenter(langs[1], dictionary.backward)
    pairs = []
    for line in range(len(src_lines)) if lines is None else lines:
        src, tgt = src_words(src_lines[line]), tgt_words(tgt_lines[line])
        pairs += [WordPair(line, src[i], tgt[j]) for i, j in unique_candidate_pairs(src, tgt, dictionary)]
    return pairs
