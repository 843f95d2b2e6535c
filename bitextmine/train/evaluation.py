"""Evaluation of the model being trained: BUCC-format dev F1 (oracle threshold) and Tatoeba accuracy, through
the evaluators of bitextmine.evaluation."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from bitextmine.calibration.bucc import read_bucc, sample_split
from bitextmine.encoder.encoder import SentenceEncoder
from bitextmine.encoder.loading import LoadedModel
from bitextmine.encoder.settings import EncoderSettings
from bitextmine.evaluation.bucc import BuccEvaluator, EvaluateOptions
from bitextmine.evaluation.evaluator import Evaluator, run_evaluators
from bitextmine.evaluation.retrieval import TatoebaEvaluator


@dataclass
class EvalSets:
    bucc: list[Path] = field(default_factory=list)  # BUCC-format pair dirs, e.g. bucc-like/de-en (dev split)
    tatoeba: Path | None = None
    tatoeba_langs: list[str] = field(default_factory=list)
    max_sentences: int | None = None  # per BUCC side (a sample keeping the gold share); None: all
    extra: list[Evaluator] = field(default_factory=list)  # run after those above (the Python API's)

    @property
    def empty(self) -> bool:
        return not self.bucc and not (self.tatoeba and self.tatoeba_langs) and not self.extra


def evaluators(sets: EvalSets) -> list[Evaluator]:
    """Each BUCC pair's dev F1 at its best threshold, Tatoeba accuracy, then the extra evaluators."""
    found: list[Evaluator] = []
    for directory in sets.bucc:
        split = read_bucc(Path(directory), Path(directory).name, "dev")
        if sets.max_sentences:
            split = sample_split(split, sets.max_sentences)
        found.append(BuccEvaluator(split, EvaluateOptions(threshold="oracle")))
    if sets.tatoeba and sets.tatoeba_langs:
        found.append(TatoebaEvaluator(sets.tatoeba, sets.tatoeba_langs))
    return found + sets.extra


def evaluate_model(
    model: nn.Module, tokenizer, settings: EncoderSettings, model_dir: Path, sets: EvalSets
) -> dict[str, float]:
    """{"bucc/de-en": F1 %, "tatoeba/deu": mean of both directions %, "tatoeba/avg": ...}: the metrics of
    every evaluator (`evaluators`)."""
    encoder = sentence_encoder(model, tokenizer, settings, model_dir)
    with torch.inference_mode():
        return run_evaluators(evaluators(sets), encoder)


def sentence_encoder(
    model: nn.Module, tokenizer, settings: EncoderSettings, model_dir: Path
) -> SentenceEncoder:
    """The model being trained as `encode` runs it (its weights as they are when it encodes)."""
    return SentenceEncoder(LoadedModel(model, tokenizer, model_dir, str(model_dir)), settings)
