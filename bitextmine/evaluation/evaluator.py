"""The one contract of every benchmark, after sentence-transformers' `SentenceEvaluator`.

An `Evaluator` is built with what it measures on (a split, a folder, languages, settings) and called with
the encoder to measure; it returns an `Evaluation`, whose `to_json()` is what `eval --json` writes and
whose `metrics()` are the figures `train` logs. A new benchmark is one class of this contract: `train`
and `eval` run whatever evaluators they are given (`run_evaluators`), with no list of names to edit.

The encoder is the one input, for the analyses of a model's layers too (`words/`: word alignment, token
matching), which read hidden states rather than sentence vectors: a `SentenceEncoder` holds the model,
its tokenizer, prefix and max length, all that they need (`HiddenStates.of`), so no evaluator needs a
second kind of input and train's model is measured as it is, in whatever precision it runs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any, ClassVar, Protocol

from bitextmine.encoder.encoder import SentenceEncoder


class Evaluation(Protocol):
    """What an evaluator returns: its full result, and the figures to compare models by."""

    def metrics(self) -> dict[str, float]:
        """Named figures, each name starting with the benchmark's (`bucc/de-en`, `tatoeba/avg`), in
        percent to two decimals as train's eval rows log them; the evaluator's `primary_metric` among them."""
        ...

    def to_json(self) -> dict[str, Any]:
        """Everything measured, as `eval --json` writes it."""
        ...


class Evaluator(ABC):
    """One benchmark, configured at construction, run on an encoder by calling it."""

    greater_is_better: ClassVar[bool] = True  # of the primary metric (an error rate is lower-is-better)

    @property
    @abstractmethod
    def primary_metric(self) -> str:
        """The key of `metrics()` that ranks models on this benchmark."""

    @abstractmethod
    def __call__(self, encoder: SentenceEncoder) -> Evaluation:
        """Measure `encoder` on this benchmark."""


def run_evaluators(evaluators: Iterable[Evaluator], encoder: SentenceEncoder) -> dict[str, float]:
    """The metrics of every evaluator on `encoder`, in the evaluators' order, as one row."""
    row: dict[str, float] = {}
    for evaluator in evaluators:
        row |= evaluator(encoder).metrics()
    return row
