"""Training pairs: discovery, aligned streaming reading, held-out exclusion, shuffling and batching.

A source is a pair of line-aligned files ``X.xx`` / ``X.en`` (or ``X.eng``, as Tatoeba names it), a
file ``xx.SPLIT`` of an N-way parallel folder holding ``eng.SPLIT`` (FLORES: ``amh.dev`` with
``eng.dev``), a TSV of ``xx<TAB>en`` lines with the pair in its file name (e.g. ``pairs.de-en.tsv``), or
`mine`'s output named after its pair (e.g. ``de-en.tsv.zst``; `bitextmine.train.mined`), whose pairs may
carry weights. Every pair has an English side: the file names say which it is. Sources are read lazily
and interleaved line by line, passed through a seeded shuffle buffer and cut into batches by a token
budget. The stream is a pure function of (sources, seed), so a run resumes exactly by skipping the
number of pairs it had drawn.
"""

from __future__ import annotations

import hashlib
import itertools
import random
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bitextmine.errors import BitextmineError, Warn, warn_user
from bitextmine.mining.mined_file import FORMATS, mined_format
from bitextmine.text.cleaning import clean_line
from bitextmine.text.reader import CorpusCounts, iter_rows, read_lines
from bitextmine.train.mined import (
    NO_SCORE_USE,
    MinedSelection,
    ScoreUse,
    describe,
    is_mined,
    read_mined,
    select_mined,
)

ENGLISH = "en"
ENGLISH_SUFFIXES = (ENGLISH, "eng")  # X.xx next to X.en or X.eng (Tatoeba)
NWAY_ENGLISH = ("eng", "eng_Latn")  # xx.SPLIT next to eng.SPLIT (FLORES-101, FLORES-200)
_LANG = r"[a-z]{2,3}(?:_[A-Za-z]+)?"
_PAIR_IN_NAME = re.compile(rf"(?<![^._-])(?=({_LANG})-({_LANG})(?![^._-]))")  # every LANG-LANG in a name
_NOT_TRAINING_DATA = (
    "not training data: expected X.xx next to X.en, NAME.xx-en.tsv, or mine's output named after its "
    f"pair ({', '.join('.' + fmt for fmt in FORMATS)}), or xx.SPLIT next to eng.SPLIT (N-way, as FLORES)"
)


@dataclass(frozen=True)
class PairSource:
    lang: str  # the non-English side
    paths: tuple[str, ...]  # (xx file, English file) or (tsv,) or (mined file,)
    mined: MinedSelection | None = None  # for mine's output: how it is read, kept and weighted


@dataclass(frozen=True)
class Pair:
    lang: str
    src: str  # non-English sentence
    tgt: str  # English sentence
    weight: float | None = None  # its weight in the loss (mined pairs with --weight-by-score)


def find_sources(
    paths: Sequence[str], scores: ScoreUse = NO_SCORE_USE, note: Callable[[str], None] | None = None
) -> list[PairSource]:
    """Pair sources from files (an ``X.xx`` whose ``X.en`` or ``X.eng`` exists, an English file with one
    ``X.xx`` sibling, an ``xx.SPLIT`` next to ``eng.SPLIT``, a TSV, mine's output) and directories (every
    such source below them), in a stable order.

    Mined files are read through once here (checked, their pairs kept by `scores` counted, weights
    fitted), and `note` gets a line about each.
    """
    sources: list[PairSource] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = _pairs_in_dir(path, scores)
            if not found:
                raise BitextmineError(f"{path}: no line-aligned X.xx / X.en file pairs or .tsv files in it")
            sources += found
        elif path.is_file():
            sources.append(_source_of_file(path, scores))
        else:
            raise BitextmineError(f"{path}: no such file or directory")
    sources = list(dict.fromkeys(sources))
    mined = [s for s in sources if s.mined is not None]
    if scores != NO_SCORE_USE and not mined:
        raise BitextmineError(
            "--min-score and --weight-by-score apply to mine's output; none of the --data files is"
        )
    if note is not None:
        for source in mined:
            note(describe(source.paths[0], source.mined))
    return sources


def _pairs_in_dir(directory: Path, scores: ScoreUse) -> list[PairSource]:
    tables = [
        p
        for p in sorted(directory.rglob("*"))
        if p.is_file() and (p.suffix == ".tsv" or (mined_format(p) and _pair_in_name(p)))
    ]
    found = [_source_of_file(p, scores) for p in tables]
    for suffix in ENGLISH_SUFFIXES:
        for english in sorted(directory.rglob(f"*.{suffix}")):
            found += [PairSource(lang, (str(other), str(english))) for lang, other in _siblings(english)]
    for stem in NWAY_ENGLISH:
        for english in sorted(directory.rglob(f"{stem}.*")):
            found += [PairSource(lang, (str(other), str(english))) for lang, other in _nway_siblings(english)]
    return found


def _siblings(english: Path) -> list[tuple[str, Path]]:
    """(lang, path) of the files next to ``X.en`` (or ``X.eng``) named ``X.lang``."""
    stem = english.stem
    return [
        (lang, p)
        for p in sorted(english.parent.glob(f"{stem}.*"))
        if p.is_file()
        and re.fullmatch(_LANG, lang := p.name[len(stem) + 1 :])
        and lang not in ENGLISH_SUFFIXES
    ]


def _nway_siblings(english: Path) -> list[tuple[str, Path]]:
    """(lang, path) of the files next to ``eng.SPLIT`` named ``lang.SPLIT`` (an N-way parallel folder)."""
    return [
        (p.stem, p)
        for p in sorted(english.parent.glob(f"*{english.suffix}"))
        if p.is_file() and re.fullmatch(_LANG, p.stem) and p.stem not in NWAY_ENGLISH
    ]


def _nway_english(path: Path) -> Path | None:
    """The ``eng.SPLIT`` next to a non-English ``xx.SPLIT``: the file is then part of an N-way folder."""
    if not path.suffix or path.stem in NWAY_ENGLISH or not re.fullmatch(_LANG, path.stem):
        return None
    return next((e for stem in NWAY_ENGLISH if (e := path.with_name(stem + path.suffix)).is_file()), None)


def _source_of_file(path: Path, scores: ScoreUse) -> PairSource:
    fmt = mined_format(path)
    if fmt is not None:
        return _source_of_table(path, fmt, scores)
    if nway := _nway_english(path):
        return PairSource(path.stem, (str(path), str(nway)))
    if path.suffix[1:] in ENGLISH_SUFFIXES:
        siblings = _siblings(path)
        if len(siblings) != 1:
            raise BitextmineError(f"{path}: expected exactly one X.xx file next to it, found {len(siblings)}")
        return PairSource(siblings[0][0], (str(siblings[0][1]), str(path)))
    if not re.fullmatch(_LANG, path.suffix[1:]):
        raise BitextmineError(f"{path}: {_NOT_TRAINING_DATA}")
    english = next((e for s in ENGLISH_SUFFIXES if (e := path.with_suffix(f".{s}")).is_file()), None)
    if english is None:
        missing = path.with_suffix(f".{ENGLISH}")
        raise BitextmineError(f"{path}: its English side {missing} does not exist (nor {missing.stem}.eng)")
    return PairSource(path.suffix[1:], (str(path), str(english)))


def _source_of_table(path: Path, fmt: str, scores: ScoreUse) -> PairSource:
    """A TSV of pairs (``xx<TAB>en``, compressed or not) or mine's output, told apart by `is_mined`."""
    pair = _pair_in_name(path)
    if not is_mined(path, fmt):
        if not pair or pair[1] != ENGLISH:
            raise BitextmineError(f"{path}: name a TSV of pairs after its languages, e.g. pairs.de-en.tsv")
        return PairSource(pair[0], (str(path),))
    if not pair:
        raise BitextmineError(f"{path}: name mine's output after its language pair, e.g. de-en.tsv.zst")
    src, tgt = pair
    if ENGLISH not in pair or src == tgt:
        raise BitextmineError(f"{path}: train learns (xx, en) pairs; this file pairs {src} with {tgt}")
    swapped = src == ENGLISH
    return PairSource(tgt if swapped else src, (str(path),), select_mined(path, fmt, swapped, scores))


def _pair_in_name(path: Path) -> tuple[str, str] | None:
    """The first ``xx-en`` or ``en-xx`` in the file's name, else its first ``xx-yy``, else None."""
    pairs = [(m.group(1), m.group(2)) for m in _PAIR_IN_NAME.finditer(path.name)]
    return next((p for p in pairs if ENGLISH in p), pairs[0] if pairs else None)


def read_source(source: PairSource, max_chars: int = 2000, warn: Warn = warn_user) -> Iterator[Pair]:
    """The non-empty aligned pairs of one source (lines empty on either side are skipped together).

    Invalid UTF-8 (replaced), cut lines and empty files are reported through `warn` once a file has
    been read to its end; a NUL byte is an error naming the file and line.
    """
    if source.mined is not None:
        mined = read_mined(source.paths[0], source.mined, max_chars, warn)
        yield from _warn_if_none(source, (Pair(source.lang, *pair) for pair in mined), warn)
        return
    if len(source.paths) == 1:
        yield from _warn_if_none(source, _read_tsv(source, max_chars, warn), warn)
        return
    xx_path, en_path = source.paths
    xx_counts, en_counts = CorpusCounts(), CorpusCounts()
    xx_rows = iter_rows(xx_path, 0, xx_counts, max_chars=max_chars, warn=warn)
    en_rows = iter_rows(en_path, 1, en_counts, max_chars=max_chars, warn=warn)
    xx, en = next(xx_rows, None), next(en_rows, None)
    while xx is not None and en is not None:
        if xx.line == en.line:
            yield Pair(source.lang, xx.text, en.text)
            xx, en = next(xx_rows, None), next(en_rows, None)
        elif xx.line < en.line:
            xx = next(xx_rows, None)
        else:
            en = next(en_rows, None)
    for _ in itertools.chain(xx_rows, en_rows):  # count the rest, to compare the files' line counts
        pass
    if xx_counts.lines != en_counts.lines:
        longer, lines = max((xx_counts.lines, xx_path), (en_counts.lines, en_path))[::-1]
        raise BitextmineError(
            f"{longer}: {lines} lines but its counterpart has {min(xx_counts.lines, en_counts.lines)}; "
            "the files are not aligned"
        )


def _read_tsv(source: PairSource, max_chars: int, warn: Warn = warn_user) -> Iterator[Pair]:
    (path,) = source.paths
    for number, line in read_lines(path, warn):
        fields = line.split("\t")
        if len(fields) != 2:
            raise BitextmineError(
                f"{path}:{number}: expected 'xx<TAB>en' (one tab), got {len(fields)} fields"
            )
        src, tgt = (clean_line(f)[:max_chars] for f in fields)
        if src and tgt:
            yield Pair(source.lang, src, tgt)


def _warn_if_none(source: PairSource, pairs: Iterator[Pair], warn: Warn) -> Iterator[Pair]:
    """`pairs`, and a warning once they are read if there were none."""
    kept = 0
    for pair in pairs:
        kept += 1
        yield pair
    if not kept:
        warn(f"{source.paths[0]}: no pairs (the file is empty or every line has an empty side)")


def sentence_key(text: str) -> bytes:
    """What held-out sentences are matched by: the cleaned, case-folded text's digest."""
    return hashlib.blake2b(clean_line(text).casefold().encode(), digest_size=12).digest()


def read_excluded(paths: Sequence[str], warn: Warn = warn_user) -> set[bytes]:
    """Keys of every sentence in `paths` (plain lines, BUCC ``id<TAB>sentence`` lines, directories)."""
    keys: set[bytes] = set()
    for raw in paths:
        path = Path(raw)
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            for _, line in read_lines(str(file), warn):
                if line.strip():
                    keys.add(sentence_key(line.split("\t")[-1]))
    return keys


def pair_stream(
    sources: Sequence[PairSource],
    seed: int,
    *,
    buffer: int = 50_000,
    excluded: set[bytes] | None = None,
    on_excluded: Callable[[Pair], None] | None = None,
    warn: Warn = warn_user,
) -> Iterator[Pair]:
    """Endless shuffled stream of pairs: epoch e interleaves all sources line by line and shuffles the
    result through a buffer of `buffer` pairs with a generator seeded by (seed, e).

    Problems in the files (invalid UTF-8, cut lines, empty files) go to `warn` in the first epoch only.
    """
    epoch = 0
    dropped = [0]

    def count_excluded(pair: Pair) -> None:
        dropped[0] += 1
        if on_excluded:
            on_excluded(pair)

    while True:
        rng = random.Random(f"{seed}:{epoch}")
        drawn = 0
        pairs = interleave(sources, excluded, count_excluded, warn=warn if epoch == 0 else _warned_before)
        for pair in _shuffled(pairs, buffer, rng):
            drawn += 1
            yield pair
        if drawn == 0:
            raise _no_pairs(sources, dropped[0])
        epoch += 1


def _no_pairs(sources: Sequence[PairSource], excluded: int) -> BitextmineError:
    files = data_files(sources)
    why = "they are empty or every line has an empty side"
    if excluded:
        why = f"they are empty or excluded ({excluded:,} pairs excluded by --exclude)"
    return BitextmineError(f"no training pairs in {files}: {why}")


def interleave(
    sources: Sequence[PairSource],
    excluded: set[bytes] | None = None,
    on_excluded: Callable[[Pair], None] | None = None,
    *,
    warn: Warn = warn_user,
) -> Iterator[Pair]:
    """One pass over all sources, line by line in turn, without the excluded pairs."""
    readers = [read_source(s, warn=warn) for s in sources]
    while readers:
        for reader in list(readers):
            pair = next(reader, None)
            if pair is None:
                readers.remove(reader)
            elif excluded and (sentence_key(pair.src) in excluded or sentence_key(pair.tgt) in excluded):
                if on_excluded:
                    on_excluded(pair)
            else:
                yield pair


def distinct_pairs(
    sources: Sequence[PairSource], excluded: set[bytes] | None, limit: int, warn: Warn = warn_user
) -> list[Pair]:
    """The first `limit` distinct (source, English) pairs of one pass over `sources`, or all there are."""
    seen: dict[tuple[str, str], Pair] = {}
    for pair in interleave(sources, excluded, warn=warn):
        seen.setdefault((pair.src, pair.tgt), pair)
        if len(seen) >= limit:
            break
    return list(seen.values())


def data_files(sources: Sequence[PairSource]) -> str:
    """The sources' files, for a message."""
    return ", ".join(path for source in sources for path in source.paths)


def _shuffled(pairs: Iterable[Pair], size: int, rng: random.Random) -> Iterator[Pair]:
    pool: list[Pair] = []
    for pair in pairs:
        if len(pool) < size:
            pool.append(pair)
            continue
        i = rng.randrange(size)
        yield pool[i]
        pool[i] = pair
    rng.shuffle(pool)
    yield from pool


@dataclass
class PairBatch:
    src_ids: list[list[int]]
    tgt_ids: list[list[int]]
    langs: list[str]
    pairs_drawn: int  # position in the stream after this batch (what a resume skips)
    weights: list[float | None] = field(default_factory=list)  # Pair.weight of each pair
    english: list[str] = field(default_factory=list)  # each pair's English sentence (for distill)

    @property
    def tokens(self) -> int:
        return sum(map(len, self.src_ids)) + sum(map(len, self.tgt_ids))

    @property
    def pair_weights(self) -> list[float] | None:
        """Each pair's weight in the loss (1 for pairs without one), or None if no pair has one."""
        if all(w is None for w in self.weights):
            return None
        return [1.0 if w is None else w for w in self.weights]


def token_batches(
    pairs: Iterator[Pair],
    tokenize: Callable[[list[str]], list[list[int]]],
    *,
    max_tokens: int,
    max_pairs: int = 512,
    skip: int = 0,
    chunk: int = 256,
) -> Iterator[PairBatch]:
    """Batches whose two sides hold at most `max_tokens` tokens together (and `max_pairs` pairs),
    after skipping the first `skip` pairs of the stream. Pairs are tokenized `chunk` at a time."""
    for _ in range(skip):
        next(pairs)
    drawn = skip
    batch = PairBatch([], [], [], drawn)
    while True:
        chunk_pairs = [next(pairs) for _ in range(chunk)]
        src_ids, tgt_ids = tokenize([p.src for p in chunk_pairs]), tokenize([p.tgt for p in chunk_pairs])
        for pair, s, t in zip(chunk_pairs, src_ids, tgt_ids, strict=True):
            drawn += 1
            if batch.src_ids and (
                batch.tokens + len(s) + len(t) > max_tokens or len(batch.src_ids) >= max_pairs
            ):
                yield batch
                batch = PairBatch([], [], [], drawn - 1)
            batch.src_ids.append(s)
            batch.tgt_ids.append(t)
            batch.langs.append(pair.lang)
            batch.weights.append(pair.weight)
            batch.english.append(pair.tgt)
            batch.pairs_drawn = drawn


def _warned_before(message: str) -> None:
    """Later epochs read the same files: their warnings were given in the first."""
