"""Tiny random sentence-transformers models built offline with its own classes and save(), shared by the
tests that compare bitextmine's encoder with `SentenceTransformer.encode`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import Dense, Normalize, Pooling, Transformer
from transformers import AutoModel

from tests.helpers import build_tiny_model

HIDDEN = 32  # build_tiny_model's hidden size


@dataclass(frozen=True)
class Shape:
    kind: str  # build_tiny_model's architecture
    pooling: str
    dense: int = 0  # output size of a Dense layer with tanh (0: none)
    normalize: bool = True
    prompt: str = ""  # the default prompt
    include_prompt: bool = True
    max_seq_length: int | None = None


SHAPES = {
    "labse": Shape("bert", "cls", dense=24, max_seq_length=40),
    "bge-m3": Shape("xlm-roberta", "cls"),
    "e5": Shape("xlm-roberta", "mean", prompt="query: "),
    "max": Shape("bert", "max", normalize=False),
}


def spread_weights(model_dir: Path, std: float = 0.3) -> Path:
    """Redraw a tiny model's matrices with a larger spread. At the usual initialisation (std 0.02) the
    first token's state is the same for every sentence to 4 decimals, so a CLS model would match any
    reference; at 0.3 two sentences' vectors have a cosine of 0.7-0.9."""
    model = AutoModel.from_pretrained(model_dir)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() > 1:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * std)
    model.save_pretrained(model_dir)
    return model_dir


def build_st_model(shape: Shape, directory: Path) -> Path:
    """A tiny random sentence-transformers model of `shape`, saved with its own save()."""
    hf_dir = spread_weights(build_tiny_model(shape.kind, directory / "hf"))
    transformer = Transformer(str(hf_dir), max_seq_length=shape.max_seq_length)
    modules = [transformer, Pooling(HIDDEN, pooling_mode=shape.pooling, include_prompt=shape.include_prompt)]
    if shape.dense:
        torch.manual_seed(1)
        modules.append(Dense(HIDDEN, shape.dense, activation_function=torch.nn.Tanh()))
    if shape.normalize:
        modules.append(Normalize())
    prompts = {"query": shape.prompt, "passage": "passage: "} if shape.prompt else None
    model = SentenceTransformer(
        modules=modules, device="cpu", prompts=prompts, default_prompt_name="query" if prompts else None
    )
    model.save(str(directory / "st"))
    return directory / "st"


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
