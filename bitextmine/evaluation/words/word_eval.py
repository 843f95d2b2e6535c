"""Word-level (and sentence-level) alignment of an encoder's layers, after Gaschi et al. 2022.

- Word level (§III, §IV): translated-in-context pairs (evaluation/words/alignment.py) from a pool of parallel
  lines; each sampling draws N pairs with distinct (source word, target word) types (occurrences are
  shuffled and the first occurrence of each type is kept, so frequent pairs are likelier, and a pair
  never appears twice in one sample). A word's vector at a layer is the mean of its subword vectors
  (bitextmine.hidden_states), and weak and strong alignment with CSLS (k = 10) are computed at every
  layer (bitextmine.csls); mean and empirical standard deviation over the samplings (10 in the paper).
- Sentence level (§V-A, Table I): the same nearest-neighbour score, Eq. 1 with CSLS, on sentence
  vectors, not centred: the first token (CLS, <s>) or the mean of the sentence's tokens (special and
  prefix tokens excluded, as the authors' averaging excludes special tokens), at every layer, on N
  sentence pairs per sampling; reported at the first, best and last layer.

The pool is a seeded random subset of the parallel lines (10 000 by default, the number of WMT19
sentences of §V-B); only the lines some sampling uses are encoded, once. Every score is given in both
directions (x -> y and y -> x).

`WordAlignmentEvaluator` runs this on the model of a `SentenceEncoder`, under the evaluator contract
(evaluation/evaluator.py): `eval words` and a script or `train` alike.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bitextmine.encoder.encoder import SentenceEncoder
from bitextmine.errors import BitextmineError
from bitextmine.evaluation.evaluator import Evaluator
from bitextmine.evaluation.words.alignment import (
    Dictionary,
    WordPair,
    extract_pairs,
    read_dictionary,
    read_parallel,
)
from bitextmine.evaluation.words.csls import Directions, weak_alignment, word_alignment
from bitextmine.evaluation.words.hidden_states import HiddenStates, TokenizedSentence

WORD_METRICS = ("weak", "strong")
SENTENCE_POOLINGS = ("cls", "mean")


@dataclass(frozen=True)
class WordEvalSettings:
    pairs: int = 5000  # word pairs per sampling (N)
    sentence_pairs: int = 5000  # sentence pairs per sampling
    samplings: int = 10
    k: int = 10  # CSLS neighbourhood
    seed: int = 0
    pool: int = 10000  # parallel lines drawn from the files (all when fewer)


@dataclass(frozen=True)
class Stat:
    mean: float
    std: float  # empirical (n - 1), 0 for a single sampling

    @classmethod
    def of(cls, values: Sequence[float]) -> Stat:
        return cls(statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0)


@dataclass
class WordSources:
    """Where the lines and the dictionary were read from, which the report gives ahead of the figures
    (empty where they were given in memory)."""

    parallel: list[str] = field(default_factory=list)  # the PREFIXes of PREFIX.X and PREFIX.Y
    dictionary: str | None = None
    keep_identical: bool = False  # dictionary entries whose two words are the same string were kept


@dataclass
class WordAlignmentData:
    """What the words benchmark measures on: line-aligned sentences of a pair and a bilingual dictionary."""

    langs: tuple[str, str]
    src: list[str]
    tgt: list[str]
    dictionary: Dictionary
    sources: WordSources = field(default_factory=WordSources)

    @classmethod
    def read(
        cls, langs: tuple[str, str], parallel: Sequence[Path], dictionary: Path, keep_identical: bool = False
    ) -> WordAlignmentData:
        """PREFIX.X and PREFIX.Y of every prefix, one after another, and the dictionary (MUSE format)."""
        src: list[str] = []
        tgt: list[str] = []
        for prefix in parallel:
            more_src, more_tgt = read_parallel(prefix, *langs)
            src += more_src
            tgt += more_tgt
        words = read_dictionary(dictionary, keep_identical)
        return cls(
            langs, src, tgt, words, WordSources([str(p) for p in parallel], str(dictionary), keep_identical)
        )


@dataclass
class WordEvalResult:
    model: str  # the name the model was loaded by
    sources: WordSources
    langs: tuple[str, str]
    settings: WordEvalSettings
    pool: int  # parallel lines in the pool
    extracted: int  # translated-in-context pairs found in the pool
    distinct: int  # distinct (x word, y word) types among them
    encoded: int  # sentences encoded (both sides)
    scores: dict[str, np.ndarray]  # metric -> [samplings, layers, 2 directions], percent

    @property
    def pair(self) -> str:
        return "-".join(self.langs)

    @property
    def directions(self) -> tuple[str, str]:
        x, y = self.langs
        return f"{x}->{y}", f"{y}->{x}"

    def stat(self, metric: str, layer: int, direction: int) -> Stat:
        return Stat.of(self.scores[metric][:, layer, direction].tolist())

    def best_layer(self, metric: str) -> int:
        """The layer with the highest score averaged over samplings and both directions."""
        return int(self.scores[metric].mean(axis=(0, 2)).argmax())

    def summary(self, metric: str) -> dict[str, int]:
        """First, best and last layer (Table I rows; Tables III-IV give best and last)."""
        return {"first": 0, "best": self.best_layer(metric), "last": self.scores[metric].shape[1] - 1}

    def best(self, metric: str) -> float:
        """The score at the best layer, the mean of both directions' means over the samplings."""
        layer = self.best_layer(metric)
        return statistics.fmean(self.stat(metric, layer, direction).mean for direction in (0, 1))

    def metrics(self) -> dict[str, float]:
        """`words/PAIR/weak`, `/strong`, `/cls` and `/mean`: each metric and pooling at its best layer."""
        names = WORD_METRICS + SENTENCE_POOLINGS
        return {f"words/{self.pair}/{name}": round(self.best(name), 2) for name in names}

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            **asdict(self.sources),
            "benchmark": "words",
            "pair": self.pair,
            "settings": asdict(self.settings),
            "pool_lines": self.pool,
            "extracted_pairs": self.extracted,
            "distinct_pairs": self.distinct,
            "encoded_sentences": self.encoded,
            "words": {m: self._metric_json(m) for m in WORD_METRICS},
            "sentences": {p: self._metric_json(p) for p in SENTENCE_POOLINGS},
        }

    def _metric_json(self, metric: str) -> dict[str, Any]:
        layers = range(self.scores[metric].shape[1])
        return {
            "layers": [
                {
                    "layer": layer,
                    **{d: asdict(self.stat(metric, layer, i)) for i, d in enumerate(self.directions)},
                }
                for layer in layers
            ],
            **{f"{which}_layer": layer for which, layer in self.summary(metric).items()},
        }


@dataclass
class _Plan:
    """What to encode: word pairs and sentence lines of every sampling, and their vector rows."""

    word_samples: list[np.ndarray]  # per sampling: indices into the extracted pairs
    sentence_samples: list[np.ndarray]  # per sampling: pool lines
    word_rows: dict[int, int]  # pair index -> row of the word vectors
    sentence_rows: dict[int, int]  # line -> row of the sentence vectors
    word_lines: set[int]  # lines of the sampled word pairs

    @property
    def lines(self) -> list[int]:
        """Every line to encode, sorted."""
        return sorted({*self.sentence_rows, *self.word_lines})


def evaluate_words(
    data: WordAlignmentData,
    model: HiddenStates,
    settings: WordEvalSettings = WordEvalSettings(),
    progress: Callable[[int], None] | None = None,
    on_plan: Callable[[int], None] | None = None,
) -> WordEvalResult:
    """Scores of every layer; `on_plan` gets the number of sentences to encode before encoding."""
    src_lines, tgt_lines, langs = data.src, data.tgt, data.langs
    rng = np.random.default_rng(settings.seed)
    pool = pool_lines(len(src_lines), settings.pool, rng)
    pairs = extract_pairs(src_lines, tgt_lines, langs, data.dictionary, pool)
    src_tok = dict(zip(pool, model.tokenize([src_lines[i] for i in pool]), strict=True))
    tgt_tok = dict(zip(pool, model.tokenize([tgt_lines[i] for i in pool]), strict=True))
    pairs = [p for p in pairs if src_tok[p.line].tokens_of(p.src.start, p.src.end)]
    pairs = [p for p in pairs if tgt_tok[p.line].tokens_of(p.tgt.start, p.tgt.end)]
    sentences = [i for i in pool if src_tok[i].content_positions() and tgt_tok[i].content_positions()]
    plan = _plan(pairs, sentences, settings, rng)
    lines = plan.lines
    if on_plan:
        on_plan(2 * len(lines))
    src_words, src_sents = _vectors(model, src_tok, lines, pairs, plan, "src", progress)
    tgt_words, tgt_sents = _vectors(model, tgt_tok, lines, pairs, plan, "tgt", progress)
    scores = _score(src_words, tgt_words, src_sents, tgt_sents, plan, settings.k)
    distinct = len({p.types for p in pairs})
    encoded = 2 * len(lines)
    return WordEvalResult(
        model.loaded.name, data.sources, langs, settings, len(pool), len(pairs), distinct, encoded, scores
    )


@dataclass
class WordAlignmentEvaluator(Evaluator):
    """`evaluate_words` on the hidden states of every layer of the encoder's model (`HiddenStates.of`).

    The primary metric is strong alignment at the best layer. Strong: the paper's stricter criterion
    (§III-D), a word's translation nearer than every other word of either language, where weak alignment
    asks only for the other language's, which a model keeping each language in a region of its own can
    pass; translations that meet whatever the language are what ranking across languages needs. At the
    best layer, not the last: the paper finds the last layers less aligned than middle ones and models
    differ in depth, so the figure ranks models by the alignment they reach, wherever it is (the table
    marks the layer).
    """

    data: WordAlignmentData
    settings: WordEvalSettings = WordEvalSettings()
    progress: Callable[[int], None] | None = None  # sentences encoded
    on_plan: Callable[[int], None] | None = None  # sentences to encode, once the samplings are drawn

    @property
    def primary_metric(self) -> str:
        return f"words/{'-'.join(self.data.langs)}/strong"

    def __call__(self, encoder: SentenceEncoder) -> WordEvalResult:
        states = HiddenStates.of(encoder)
        return evaluate_words(self.data, states, self.settings, self.progress, self.on_plan)


def pool_lines(total: int, size: int, rng: np.random.Generator) -> list[int]:
    """A sorted random subset of `size` line numbers (all lines when there are not more)."""
    if size >= total:
        return list(range(total))
    return sorted(rng.choice(total, size=size, replace=False).tolist())


def sample_distinct(type_ids: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of `n` items with pairwise different types: the first occurrence of each type in a
    random order of all items, for the first `n` types met."""
    order = rng.permutation(len(type_ids))
    _, first = np.unique(type_ids[order], return_index=True)
    if len(first) < n:
        raise BitextmineError(
            f"only {len(first)} distinct word pairs found, fewer than the {n} asked for; "
            "lower --pairs or give more parallel lines (--parallel, --sentences)"
        )
    return order[np.sort(first)[:n]]


def _plan(
    pairs: list[WordPair], sentences: list[int], settings: WordEvalSettings, rng: np.random.Generator
) -> _Plan:
    """Samplings of word pairs (indices into `pairs`) and of sentence pairs (from `sentences`)."""
    if len(sentences) < settings.sentence_pairs:
        raise BitextmineError(
            f"only {len(sentences)} non-empty parallel lines in the pool, fewer than the "
            f"{settings.sentence_pairs} sentence pairs asked for; lower --sentence-pairs or raise --sentences"
        )
    ids: dict[tuple[str, str], int] = {}
    type_ids = np.array([ids.setdefault(p.types, len(ids)) for p in pairs], dtype=np.int64)
    word_samples, sentence_samples = [], []
    for _ in range(settings.samplings):
        word_samples.append(sample_distinct(type_ids, settings.pairs, rng))
        sentence_samples.append(rng.choice(np.array(sentences), size=settings.sentence_pairs, replace=False))
    word_rows = _rows(np.concatenate(word_samples))
    sentence_rows = _rows(np.concatenate(sentence_samples))
    return _Plan(word_samples, sentence_samples, word_rows, sentence_rows, {pairs[i].line for i in word_rows})


def _rows(items: np.ndarray) -> dict[int, int]:
    return {int(item): row for row, item in enumerate(np.unique(items))}


def _vectors(
    model: HiddenStates,
    tokenized: dict[int, TokenizedSentence],
    lines: list[int],
    pairs: list[WordPair],
    plan: _Plan,
    side: str,
    progress: Callable[[int], None] | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Word vectors [layers, word rows, dim] and sentence vectors [2 poolings, layers, rows, dim]."""
    words_of: dict[int, list[int]] = {}
    for index in plan.word_rows:
        words_of.setdefault(pairs[index].line, []).append(index)
    words = torch.zeros(model.layers, len(plan.word_rows), model.dim)
    sentences = torch.zeros(len(SENTENCE_POOLINGS), model.layers, len(plan.sentence_rows), model.dim)
    for position, states in model.run([tokenized[line] for line in lines], progress=progress):
        line, sentence = lines[position], tokenized[lines[position]]
        for index in words_of.get(line, ()):
            word = getattr(pairs[index], side)
            words[:, plan.word_rows[index]] = states[:, sentence.tokens_of(word.start, word.end)].mean(dim=1)
        if line in plan.sentence_rows:
            row = plan.sentence_rows[line]
            sentences[0, :, row] = states[:, 0]
            sentences[1, :, row] = states[:, sentence.content_positions()].mean(dim=1)
    return words, sentences


def _score(
    src_words: torch.Tensor,
    tgt_words: torch.Tensor,
    src_sents: torch.Tensor,
    tgt_sents: torch.Tensor,
    plan: _Plan,
    k: int,
) -> dict[str, np.ndarray]:
    layers = src_words.shape[0]
    scores = {
        name: np.zeros((len(plan.word_samples), layers, 2)) for name in WORD_METRICS + SENTENCE_POOLINGS
    }
    for s, (word_sample, sentence_sample) in enumerate(
        zip(plan.word_samples, plan.sentence_samples, strict=True)
    ):
        w = torch.tensor([plan.word_rows[int(i)] for i in word_sample])
        r = torch.tensor([plan.sentence_rows[int(i)] for i in sentence_sample])
        for layer in range(layers):
            weak, strong = word_alignment(src_words[layer, w], tgt_words[layer, w], k)
            scores["weak"][s, layer] = _pair(weak)
            scores["strong"][s, layer] = _pair(strong)
            for p, pooling in enumerate(SENTENCE_POOLINGS):
                scores[pooling][s, layer] = _pair(
                    weak_alignment(src_sents[p, layer, r], tgt_sents[p, layer, r], k)
                )
    return scores


def _pair(directions: Directions) -> tuple[float, float]:
    return directions.forward, directions.backward
