"""Objectives by name, built with their options: what `train --objectives` refers to."""

from __future__ import annotations

from typing import Any

from torch import nn

from bitextmine.errors import BitextmineError
from bitextmine.train.model import TrainContext, TrainEncoder

OBJECTIVES = ("contrastive", "mexma", "rtl", "vmsst", "xtr")


def parse_objectives(spec: str) -> dict[str, float]:
    """'contrastive,mexma=0.5' -> {'contrastive': 1.0, 'mexma': 0.5}."""
    weights: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, weight = part.partition("=")
        name = name.strip()
        if name not in OBJECTIVES:
            raise BitextmineError(f"unknown objective {name!r}: choose from {', '.join(OBJECTIVES)}")
        try:
            weights[name] = float(weight) if weight else 1.0
        except ValueError:
            raise BitextmineError(f"objective weight must be a number: {part!r}") from None
    return weights


def build_objectives(
    weights: dict[str, float], encoder: TrainEncoder, ctx: TrainContext, options: dict[str, Any]
) -> nn.ModuleDict:
    return nn.ModuleDict({name: _build(name, encoder, ctx, options) for name in weights})


def _build(name: str, encoder: TrainEncoder, ctx: TrainContext, options: dict[str, Any]) -> nn.Module:
    config = encoder.config
    if name == "contrastive":
        from bitextmine.train.objectives.contrastive import Contrastive

        return Contrastive(
            config.hidden_size,
            temperature=options.get("temperature", 0.05),
            margin=options.get("margin", 0.0),
            projection=options.get("projection", False),
        )
    if name == "mexma":
        from bitextmine.train.objectives.mexma import Mexma

        return Mexma(
            config,
            mask_ratio=options.get("mask_ratio", 0.4),
            token_gradients=options.get("token_gradients", True),
            alignment=options.get("mexma_alignment", "mse"),
        )
    if name == "rtl":
        from bitextmine.train.objectives.rtl import RepresentationTranslation

        return RepresentationTranslation(encoder.model, layers=options.get("rtl_layers", 2))
    if name == "vmsst":
        from bitextmine.train.objectives.vmsst import VMSST

        return VMSST(
            encoder.model,
            ctx.languages,
            elbo_weight=options.get("vmsst_lambda", 0.025),
            kl_steps=options.get("vmsst_kl_steps", 1_000_000),
            latent_dim=options.get("vmsst_latent_dim"),
            language_layers=options.get("vmsst_language_layers", 2),
            decoder_layers=options.get("vmsst_decoder_layers", 1),
        )
    from bitextmine.train.objectives.xtr import CrossLingualTokenReconstruction

    return CrossLingualTokenReconstruction(config.hidden_size, ctx.vocab_size, ctx.languages, ctx.special_ids)
