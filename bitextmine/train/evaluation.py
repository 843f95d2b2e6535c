"""Evaluation of the model being trained: BUCC-format dev F1 (oracle threshold) and Tatoeba accuracy."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from bitextmine.calibration.bucc import read_bucc, sample_split
from bitextmine.calibration.split_mining import calibrate_threshold, mine_split
from bitextmine.encoder.encoder import SentenceEncoder
from bitextmine.encoder.loading import LoadedModel
from bitextmine.encoder.settings import EncoderSettings
from bitextmine.evaluation.retrieval import evaluate_tatoeba
from bitextmine.mining.settings import MiningSettings


@dataclass
class EvalSets:
    bucc: list[Path] = field(default_factory=list)  # BUCC-format pair dirs, e.g. bucc-like/de-en (dev split)
    tatoeba: Path | None = None
    tatoeba_langs: list[str] = field(default_factory=list)
    max_sentences: int | None = None  # per BUCC side (a sample keeping the gold share); None: all

    @property
    def empty(self) -> bool:
        return not self.bucc and not (self.tatoeba and self.tatoeba_langs)


def evaluate_model(
    model: nn.Module, tokenizer, settings: EncoderSettings, model_dir: Path, sets: EvalSets
) -> dict[str, float]:
    """{"bucc/de-en": F1 %, "tatoeba/deu": mean of both directions %, "tatoeba/avg": ...}."""
    encoder = sentence_encoder(model, tokenizer, settings, model_dir)
    results: dict[str, float] = {}
    with torch.inference_mode():
        for directory in sets.bucc:
            pair = Path(directory).name
            split = read_bucc(Path(directory), pair, "dev")
            if sets.max_sentences:
                split = sample_split(split, sets.max_sentences)
            sweep = calibrate_threshold(mine_split(split, encoder, MiningSettings()))
            results[f"bucc/{pair}"] = round(100 * sweep.scores.f1, 2)
        if sets.tatoeba and sets.tatoeba_langs:
            tatoeba = evaluate_tatoeba(sets.tatoeba, sets.tatoeba_langs, lambda s: encoder.encode(s).vectors)
            for row in tatoeba.rows:
                results[f"tatoeba/{row.lang}"] = round((row.xx_to_eng + row.eng_to_xx) / 2, 2)
            results["tatoeba/avg"] = round(
                sum(results[f"tatoeba/{r.lang}"] for r in tatoeba.rows) / len(tatoeba.rows), 2
            )
    return results


def sentence_encoder(
    model: nn.Module, tokenizer, settings: EncoderSettings, model_dir: Path
) -> SentenceEncoder:
    """The model being trained as `encode` runs it (its weights as they are when it encodes)."""
    return SentenceEncoder(LoadedModel(model, tokenizer, model_dir, str(model_dir)), settings)
