"""The real-text scale set (shared/data/scale/de-en) cut into nested, seeded subsamples.

Each size keeps the set's gold proportion (50,592 pairs in 1,050,592 sentences a side): a subsample of N
sentences a side holds round(N * 50,592 / 1,050,592) gold pairs, both sides of each, and distractors for
the rest. Subsamples are nested (the 100k one inside the 300k one inside the whole set), so one encoding
of each side in *tier order* (the 100k sentences, then the 200k that the 300k subsample adds, then the
rest; shuffled within a tier) serves every size: size N is the first N rows.

A lower gold density is made from a subsample by dropping one side of a seeded share of its gold pairs (the
English side of half of them, the German side of the other half): the other side stays, as a sentence
whose translation is absent, the hard case in a dense region. Each gold pair comes from one source:
Multi30k image captions or WMT news (shared/data/parallel/de-en), told apart by its German sentence.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import zstandard

SEED = 0
LANGS = ("de", "en")
SOURCES = {"captions": "multi30k.de", "news": "news.de"}  # gold source: the German file it comes from


def read_zst_lines(path: Path) -> list[str]:
    """The file's lines, split at \n alone (U+2028 and U+0085, which str.splitlines splits at, occur)."""
    with open(path, "rb") as fh, zstandard.ZstdDecompressor().stream_reader(fh) as reader:
        return io.TextIOWrapper(reader, encoding="utf-8").read().split("\n")[:-1]


@dataclass
class ScaleSet:
    """The BUCC-format scale split: sentences by id per side and the gold pairs."""

    sentences: dict[str, dict[str, str]]  # lang -> id -> sentence
    gold: list[tuple[str, str]]  # (de id, en id)

    @classmethod
    def read(cls, folder: Path) -> ScaleSet:
        sentences = {}
        for lang in LANGS:
            rows = (line.split("\t", 1) for line in read_zst_lines(folder / f"de-en.scale.{lang}.zst"))
            sentences[lang] = dict(rows)
        pairs = [tuple(line.split("\t")) for line in read_zst_lines(folder / "de-en.scale.gold.zst")]
        return cls(sentences, pairs)

    def gold_count(self, size: int) -> int:
        total = len(self.sentences["de"])
        return round(size * len(self.gold) / total)

    def tier_order(self, sizes: list[int]) -> dict[str, list[str]]:
        """Each side's ids in tier order: the first N are the subsample of size N, for each N in `sizes`
        (ascending; the last no larger than the set)."""
        rng = np.random.default_rng(SEED)
        gold = [self.gold[i] for i in rng.permutation(len(self.gold))]
        in_gold = [{pair[side] for pair in self.gold} for side in range(2)]
        distractors = [
            [i for i in sorted(self.sentences[lang]) if i not in in_gold[side]]
            for side, lang in enumerate(LANGS)
        ]
        distractors = [[ids[i] for i in rng.permutation(len(ids))] for ids in distractors]
        order: dict[str, list[str]] = {lang: [] for lang in LANGS}
        done_gold, done = 0, 0
        for size in sizes:
            gold_to = self.gold_count(size)
            for side, lang in enumerate(LANGS):
                tier = [pair[side] for pair in gold[done_gold:gold_to]]
                tier += distractors[side][done - done_gold : size - gold_to]
                order[lang] += [tier[i] for i in rng.permutation(len(tier))]
            done_gold, done = gold_to, size
        return order

    def subsample_gold(self, size: int, order: dict[str, list[str]]) -> list[tuple[str, str]]:
        """The gold pairs of the size-N subsample (both sides among its first N rows)."""
        de, en = set(order["de"][:size]), set(order["en"][:size])
        return [(a, b) for a, b in self.gold if a in de and b in en]


def write_tier_files(scale_dir: Path, sizes: list[int], out: Path) -> dict[str, Path]:
    """OUT/LANG.txt (sentences in tier order) and OUT/LANG.ids (their ids), and OUT/gold.tsv."""
    data = ScaleSet.read(scale_dir)
    order = data.tier_order(sizes)
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for lang in LANGS:
        (out / f"{lang}.ids").write_text("".join(f"{i}\n" for i in order[lang]))
        files[lang] = out / f"{lang}.txt"
        files[lang].write_text("".join(f"{data.sentences[lang][i]}\n" for i in order[lang]), "utf-8")
    (out / "gold.tsv").write_text("".join(f"{a}\t{b}\n" for a, b in data.gold))
    return files


def gold_sources(parallel_dir: Path, de_sentences: dict[str, str], gold: list[tuple[str, str]]) -> list[str]:
    """The source of each gold pair ("captions" or "news"), by the file of parallel/de-en that holds its
    German sentence; a sentence in neither is an error (the set's README says every gold pair is in one)."""
    files = {
        name: set((parallel_dir / file).read_text(encoding="utf-8").split("\n"))
        for name, file in SOURCES.items()
    }
    sources = []
    for de_id, _ in gold:
        sentence = de_sentences[de_id]
        found = [name for name, lines in files.items() if sentence in lines]
        if not found:
            raise ValueError(f"{de_id}: gold sentence in none of {', '.join(SOURCES.values())}")
        sources.append(found[0])
    return sources


def density_rows(size: int, gold_rows: np.ndarray, density: float | None) -> dict[str, np.ndarray]:
    """The rows of each side of the size-N subsample kept for a gold density (gold pairs per sentence)
    of about `density`: all N rows for None, else every row but one side of each dropped gold pair.
    `gold_rows` is [pairs, 2] (de row, en row) of the subsample's gold pairs."""
    keep = {lang: np.ones(size, bool) for lang in LANGS}
    if density is not None:
        kept_pairs = round(density * size)
        if kept_pairs > len(gold_rows):
            raise ValueError(
                f"density {density}: {kept_pairs:,} gold pairs wanted, the subsample has {len(gold_rows):,}"
            )
        rng = np.random.default_rng(SEED)
        dropped = rng.permutation(len(gold_rows))[kept_pairs:]
        for side, lang in enumerate(LANGS):
            keep[lang][gold_rows[dropped[1 - side :: 2], side]] = False
    return {lang: np.flatnonzero(keep[lang]) for lang in LANGS}
