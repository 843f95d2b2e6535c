"""BUCC 2018 files and precision/recall/F1 of mined pairs against their gold (the threshold sweep over a
split's candidates: sweep.py).

A split of pair ``de-en`` in a directory is three files: ``de-en.dev.de`` and ``de-en.dev.en`` with
lines ``ID<TAB>SENTENCE``, and ``de-en.dev.gold`` with lines ``DE-ID<TAB>EN-ID`` (one-to-one); each may
be compressed (``de-en.scale.de.zst``, ``.gz``, ``.xz``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bitextmine.errors import BitextmineError, Warn, warn_user, whole_number
from bitextmine.text.languages import parse_pair
from bitextmine.text.reader import read_lines


class BuccError(BitextmineError):
    """Bad BUCC input; a one-line message naming the file and, when it applies, ``path:LINE:``."""


COMPRESSED_SUFFIXES = (".zst", ".gz", ".xz")
_BOM = "\ufeff"


@dataclass
class BuccSide:
    lang: str
    ids: list[str]
    sentences: list[str]


@dataclass
class BuccSplit:
    pair: str
    split: str
    src: BuccSide  # the non-English side, DIR/{pair}.{split}.{x}
    tgt: BuccSide  # English, DIR/{pair}.{split}.en
    gold: set[tuple[str, str]] | None  # (x-id, en-id); None when the gold file is absent and not required

    @property
    def sentences(self) -> int:
        """Sentences on both sides."""
        return len(self.src.sentences) + len(self.tgt.sentences)


@dataclass(frozen=True)
class Scores:
    """Precision, recall and F1 as fractions; 0.0 where undefined (nothing predicted, no gold)."""

    precision: float
    recall: float
    f1: float
    true_positives: int
    predicted: int
    gold: int

    @classmethod
    def of(cls, true_positives: int, predicted: int, gold: int) -> Scores:
        """F1 is computed as 2·TP / (predicted + gold): equal to 2PR/(P+R), with one rounding."""
        return cls(
            precision=true_positives / predicted if predicted else 0.0,
            recall=true_positives / gold if gold else 0.0,
            f1=2 * true_positives / (predicted + gold) if predicted + gold else 0.0,
            true_positives=true_positives,
            predicted=predicted,
            gold=gold,
        )

    def as_percent(self) -> dict[str, float]:
        return {"precision": 100 * self.precision, "recall": 100 * self.recall, "f1": 100 * self.f1}


def read_bucc(
    directory: Path, pair: str, split: str, *, require_gold: bool = True, warn: Warn = warn_user
) -> BuccSplit:
    """Read ``DIR/PAIR.SPLIT.{x,en,gold}``, each plain or compressed (`bucc_file`); gold is None when
    its file is absent and not required. Invalid UTF-8 is replaced and reported through `warn`
    (text/reader.py)."""
    src_lang, tgt_lang = parse_pair(pair)
    names = [f"{pair}.{split}.{ext}" for ext in (src_lang, tgt_lang, "gold")]
    src_path, tgt_path, gold_path = (bucc_file(Path(directory), name) for name in names)
    required = [src_path, tgt_path] + ([gold_path] if require_gold else [])
    for name, path in zip(names, required, strict=False):
        if path is None:
            expected = f"{', '.join(names)}, each plain or {'/'.join(COMPRESSED_SUFFIXES)}"
            raise BuccError(f"{Path(directory) / name}: no such file (expected BUCC 2018 files {expected})")
    src = _read_side(src_path, src_lang, warn)
    tgt = _read_side(tgt_path, tgt_lang, warn)
    gold = _read_gold(gold_path, src, tgt, warn) if gold_path is not None else None
    if require_gold and not gold:
        raise BuccError(f"{gold_path}: empty gold file, no pairs to score against")
    return BuccSplit(pair=pair, split=split, src=src, tgt=tgt, gold=gold)


def bucc_file(directory: Path, name: str) -> Path | None:
    """``DIR/NAME`` or ``DIR/NAME.zst``, ``.gz`` or ``.xz`` (read by content, text/reader.py); None when
    none exists, a one-line error when two do (they may differ)."""
    found = [path for suffix in ("", *COMPRESSED_SUFFIXES) if (path := directory / (name + suffix)).is_file()]
    if len(found) > 1:
        raise BuccError(f"{found[0]} and {found[1].name} both exist: keep one")
    return found[0] if found else None


def _lines(path: Path, warn: Warn) -> Iterator[tuple[int, str]]:
    """The file's lines, without a UTF-8 byte order mark at its start (Windows editors write one; it
    would become part of the first id)."""
    for number, line in read_lines(path, warn):
        yield number, line.removeprefix(_BOM) if number == 1 else line


def _read_side(path: Path, lang: str, warn: Warn) -> BuccSide:
    first_line: dict[str, int] = {}
    sentences: list[str] = []
    for number, line in _lines(path, warn):
        ident, tab, sentence = line.partition("\t")
        if not (tab and ident and sentence):
            raise BuccError(f"{path}:{number}: expected ID<TAB>SENTENCE")
        if ident in first_line:
            raise BuccError(f"{path}:{number}: duplicate id {ident} (first on line {first_line[ident]})")
        first_line[ident] = number
        sentences.append(sentence)
    if not sentences:
        raise BuccError(f"{path}: empty split, no sentences")
    return BuccSide(lang=lang, ids=list(first_line), sentences=sentences)


def _read_gold(path: Path, src: BuccSide, tgt: BuccSide, warn: Warn) -> set[tuple[str, str]]:
    sides = [(src.lang, set(src.ids), {}), (tgt.lang, set(tgt.ids), {})]
    pairs: dict[tuple[str, str], int] = {}
    for number, line in _lines(path, warn):
        where = f"{path}:{number}:"
        fields = tuple(line.split("\t"))
        if len(fields) != 2 or not all(fields):
            raise BuccError(f"{where} expected X-ID<TAB>EN-ID")
        if fields in pairs:
            raise BuccError(f"{where} duplicate pair {' '.join(fields)} (first on line {pairs[fields]})")
        for (lang, known, paired), ident in zip(sides, fields, strict=True):
            if ident not in known:
                raise BuccError(f"{where} unknown {lang} id {ident}")
            if ident in paired:
                raise BuccError(f"{where} {lang} id {ident} is already paired (line {paired[ident]})")
            paired[ident] = number
        pairs[fields] = number
    return set(pairs)


def score_pairs(predicted: Iterable[tuple[str, str]], gold: set[tuple[str, str]]) -> Scores:
    """Precision, recall and F1 of the (de-duplicated) predicted pairs against the gold pairs."""
    unique = set(predicted)
    return Scores.of(len(unique & gold), len(unique), len(gold))


def sample_split(split: BuccSplit, max_sentences: int, seed: int = 0) -> BuccSplit:
    """A split of at most about `max_sentences` per side with the same share of gold pairs: the same
    seeded random fraction of the gold pairs and of each side's other sentences, in file order."""
    whole_number("max_sentences", max_sentences)
    fraction = min(1.0, max_sentences / max(len(split.src.ids), len(split.tgt.ids), 1))
    if fraction >= 1.0:
        return split
    rng = np.random.default_rng(seed)
    gold = sorted(split.gold or ())
    kept_gold = [gold[i] for i in np.sort(rng.permutation(len(gold))[: round(fraction * len(gold))])]
    in_gold = (
        {s for s, _ in gold},
        {t for _, t in gold},
    )
    keep = ({s for s, _ in kept_gold}, {t for _, t in kept_gold})
    sides = []
    for side, gold_ids, kept in zip((split.src, split.tgt), in_gold, keep, strict=True):
        others = [i for i in side.ids if i not in gold_ids]
        chosen = kept | {others[i] for i in rng.permutation(len(others))[: round(fraction * len(others))]}
        rows = [k for k, i in enumerate(side.ids) if i in chosen]
        sides.append(BuccSide(side.lang, [side.ids[k] for k in rows], [side.sentences[k] for k in rows]))
    return BuccSplit(split.pair, split.split, sides[0], sides[1], set(kept_gold))
