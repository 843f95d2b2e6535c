"""Benchmarks for sentence encoders, one section each: Tatoeba retrieval and xsim on FLORES.

- Tatoeba (LASER's protocol, Artetxe & Schwenk 2019): for each language, the percentage of sentences
  whose nearest neighbour by cosine among the other side is their translation, in both directions.
- xsim (LASER): on N-way parallel FLORES files, the number of xx sentences whose best-scoring English
  candidate (plain cosine, or a margin over the k nearest neighbours) is not their translation.

The functions take an `EncodeFn`, sentences -> float32 [n, dim] unit vectors; gold for source i is target
i. `TatoebaEvaluator` and `XsimEvaluator` run them on a `SentenceEncoder` (evaluation/evaluator.py).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bitextmine.encoder.cache import embed
from bitextmine.encoder.encoder import SentenceEncoder
from bitextmine.errors import BitextmineError
from bitextmine.evaluation.evaluator import Evaluator
from bitextmine.mining.margin import check_margin, margin_scores
from bitextmine.search.knn import exact_knn
from bitextmine.text.reader import read_all_lines
from bitextmine.workspace.layout import Workspace

EncodeFn = Callable[[Sequence[str]], np.ndarray]
Progress = Callable[[str], None] | None

# ---------------------------------------------------------------------------------------------------
# Shared: reading line-aligned files, encoding, nearest-neighbour predictions


def check_aligned(path: Path, count: int, other: Path, other_count: int) -> None:
    if count != other_count:
        raise BitextmineError(f"{path}: {count} lines but {other} has {other_count}")


def check_known(benchmark: str, directory: Path, langs: Sequence[str], available: list[str]) -> None:
    if not langs:
        raise BitextmineError(f"{benchmark}: no languages given")
    unknown = [lang for lang in langs if lang not in available]
    if unknown:
        raise BitextmineError(
            f"{directory}: no {benchmark} data for {', '.join(unknown)}; "
            f"available ({len(available)}): {', '.join(available)}"
        )


def _list_languages(directory: Path, pattern: str) -> list[str]:
    """Sorted group 1 of the file names in `directory` that fully match `pattern`."""
    if not directory.is_dir():
        raise BitextmineError(f"{directory}: no such directory")
    names = (re.fullmatch(pattern, p.name) for p in directory.iterdir() if p.is_file())
    return sorted(m.group(1) for m in names if m)


def _encode(encode: EncodeFn, sentences: Sequence[str]) -> np.ndarray:
    vectors = np.asarray(encode(sentences), dtype=np.float32)
    if vectors.ndim != 2 or len(vectors) != len(sentences):
        raise ValueError(f"encoder returned shape {vectors.shape} for {len(sentences)} sentences")
    return vectors


def encode_fn(encoder: SentenceEncoder, workspace: Workspace | None) -> EncodeFn:
    """The encoder's vectors as `encode` stores them, cached in `workspace` (`eval`), or with no workspace
    as the model gives them (train's evaluation)."""
    if workspace is None:
        return lambda sentences: encoder.encode(sentences).vectors
    return lambda sentences: embed(encoder, sentences, workspace.embedding_cache_dir())


def _check_pair(src: np.ndarray, tgt: np.ndarray) -> None:
    if len(src) == 0 or src.shape != tgt.shape:
        raise ValueError(f"need two non-empty aligned sets of vectors, got {src.shape} and {tgt.shape}")


def _gold_misses(src: np.ndarray, predicted: np.ndarray) -> int:
    return int(np.count_nonzero(predicted != np.arange(len(src))))


# ---------------------------------------------------------------------------------------------------
# Tatoeba


def tatoeba_languages(directory: Path) -> list[str]:
    """Languages XXX with a `tatoeba.XXX-eng.XXX` file in `directory`, sorted."""
    return _list_languages(directory, r"tatoeba\.([^.]+)-eng\.\1")


def read_tatoeba(directory: Path, lang: str) -> tuple[list[str], list[str]]:
    """(xx sentences, English sentences), line-aligned."""
    xx_path = directory / f"tatoeba.{lang}-eng.{lang}"
    eng_path = directory / f"tatoeba.{lang}-eng.eng"
    xx, eng = read_all_lines(xx_path), read_all_lines(eng_path)
    check_aligned(xx_path, len(xx), eng_path, len(eng))
    return xx, eng


@dataclass
class TatoebaRow:
    lang: str
    pairs: int
    xx_to_eng: float  # accuracy in percent
    eng_to_xx: float


@dataclass
class TatoebaResult:
    rows: list[TatoebaRow]

    @property
    def average_xx_to_eng(self) -> float:
        return statistics.fmean(row.xx_to_eng for row in self.rows)

    @property
    def average_eng_to_xx(self) -> float:
        return statistics.fmean(row.eng_to_xx for row in self.rows)

    @property
    def average(self) -> float:
        return (self.average_xx_to_eng + self.average_eng_to_xx) / 2

    def metrics(self) -> dict[str, float]:
        """Each language's accuracy, the mean of both directions, and "avg" the mean of those."""
        each = {f"tatoeba/{row.lang}": round((row.xx_to_eng + row.eng_to_xx) / 2, 2) for row in self.rows}
        average = sum(each[f"tatoeba/{row.lang}"] for row in self.rows) / len(self.rows)
        return each | {"tatoeba/avg": round(average, 2)}

    def to_json(self) -> dict[str, Any]:
        return {
            "benchmark": "tatoeba",
            "rows": [asdict(row) for row in self.rows],
            "average_xx_to_eng": self.average_xx_to_eng,
            "average_eng_to_xx": self.average_eng_to_xx,
            "average": self.average,
        }


def retrieval_accuracy(src: np.ndarray, tgt: np.ndarray) -> float:
    """Percent of i whose nearest neighbour by inner product among `tgt` is tgt[i] (no margin)."""
    _check_pair(src, tgt)
    predicted = exact_knn(src, tgt, 1)[1][:, 0]
    return 100.0 * (len(src) - _gold_misses(src, predicted)) / len(src)


def evaluate_tatoeba(
    directory: Path, langs: Sequence[str], encode: EncodeFn, progress: Progress = None
) -> TatoebaResult:
    """Accuracy both ways for each language; every file is read before anything is encoded."""
    check_known("Tatoeba", directory, langs, tatoeba_languages(directory))
    texts = {lang: read_tatoeba(directory, lang) for lang in langs}
    rows = []
    for lang, (xx_text, eng_text) in texts.items():
        xx, eng = _encode(encode, xx_text), _encode(encode, eng_text)
        row = TatoebaRow(lang, len(xx), retrieval_accuracy(xx, eng), retrieval_accuracy(eng, xx))
        rows.append(row)
        if progress:
            progress(
                f"tatoeba {lang}: {row.pairs} pairs, {lang}->eng {row.xx_to_eng:.2f}%, "
                f"eng->{lang} {row.eng_to_xx:.2f}%"
            )
    return TatoebaResult(rows)


@dataclass
class TatoebaEvaluator(Evaluator):
    """`evaluate_tatoeba` on an encoder's vectors (`encode_fn`)."""

    directory: Path
    langs: Sequence[str]
    workspace: Workspace | None = None
    progress: Progress = None

    primary_metric = "tatoeba/avg"

    def __call__(self, encoder: SentenceEncoder) -> TatoebaResult:
        encode = encode_fn(encoder, self.workspace)
        return evaluate_tatoeba(self.directory, self.langs, encode, self.progress)


# ---------------------------------------------------------------------------------------------------
# xsim on FLORES


def flores_languages(directory: Path, split: str = "dev") -> list[str]:
    """Languages LANG with a `LANG.{split}` file in `directory`, sorted."""
    return _list_languages(directory, rf"(.+)\.{re.escape(split)}")


def read_flores(directory: Path, lang: str, split: str = "dev") -> list[str]:
    return read_all_lines(directory / f"{lang}.{split}")


def xsim_errors(src: np.ndarray, tgt: np.ndarray, margin: str = "ratio", k: int = 4) -> int:
    """Number of src[i] whose prediction is not tgt[i] (LASER's xsim).

    `absolute`: the nearest target by cosine. Otherwise each source's k nearest targets are scored with
    the margin, from the mean cosine of the source to its k nearest targets and of each candidate to its
    k nearest sources, and the best-scoring candidate wins. k is clamped to the set size.
    """
    check_margin(margin)
    _check_pair(src, tgt)
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if margin == "absolute":
        return _gold_misses(src, exact_knn(src, tgt, 1)[1][:, 0])
    x2y_sims, x2y_ids = exact_knn(src, tgt, k)
    fwd_mean = x2y_sims.mean(axis=1)
    bwd_mean = exact_knn(tgt, src, k)[0].mean(axis=1)
    scores = margin_scores(x2y_sims, fwd_mean[:, None], bwd_mean[x2y_ids], margin)
    return _gold_misses(src, x2y_ids[np.arange(len(src)), scores.argmax(axis=1)])


@dataclass
class XsimRow:
    lang: str
    sentences: int
    errors: int
    error_rate: float  # percent


@dataclass
class XsimResult:
    rows: list[XsimRow]
    target: str
    margin: str
    k: int = 4

    @property
    def average(self) -> float:
        """Mean error rate over languages, in percent."""
        return statistics.fmean(row.error_rate for row in self.rows)

    def metrics(self) -> dict[str, float]:
        """Each language's error rate, and "avg" their mean."""
        each = {f"xsim/{row.lang}": round(row.error_rate, 2) for row in self.rows}
        return each | {"xsim/avg": round(self.average, 2)}

    def to_json(self) -> dict[str, Any]:
        return {
            "benchmark": "xsim",
            "target": self.target,
            "margin": self.margin,
            "k": self.k,
            "rows": [asdict(row) for row in self.rows],
            "average": self.average,
        }


def evaluate_xsim(
    directory: Path,
    langs: Sequence[str],
    encode: EncodeFn,
    *,
    target: str = "eng",
    split: str = "dev",
    margin: str = "ratio",
    k: int = 4,
    progress: Progress = None,
) -> XsimResult:
    """xsim errors of xx -> target for each xx in `langs`; the target is encoded once."""
    check_margin(margin)
    available = flores_languages(directory, split)
    check_known("FLORES", directory, langs, available)
    check_known("FLORES", directory, [target], available)
    target_path = directory / f"{target}.{split}"
    texts = {lang: read_flores(directory, lang, split) for lang in langs}
    target_text = read_flores(directory, target, split)
    for lang, text in texts.items():
        check_aligned(directory / f"{lang}.{split}", len(text), target_path, len(target_text))
    target_vectors = _encode(encode, target_text)
    rows = []
    for lang, text in texts.items():
        errors = xsim_errors(_encode(encode, text), target_vectors, margin, k)
        rows.append(XsimRow(lang, len(text), errors, 100.0 * errors / len(text)))
        if progress:
            progress(f"xsim {lang}->{target}: {errors}/{len(text)} errors ({rows[-1].error_rate:.2f}%)")
    return XsimResult(rows, target, margin, k)


@dataclass
class XsimEvaluator(Evaluator):
    """`evaluate_xsim` on an encoder's vectors (`encode_fn`)."""

    directory: Path
    langs: Sequence[str]
    target: str = "eng"
    split: str = "dev"
    margin: str = "ratio"
    k: int = 4
    workspace: Workspace | None = None
    progress: Progress = None

    primary_metric = "xsim/avg"
    greater_is_better = False

    def __call__(self, encoder: SentenceEncoder) -> XsimResult:
        encode = encode_fn(encoder, self.workspace)
        settings = {"target": self.target, "split": self.split, "margin": self.margin, "k": self.k}
        return evaluate_xsim(self.directory, self.langs, encode, **settings, progress=self.progress)
