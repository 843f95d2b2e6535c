"""Objectives by name, built with their options: what `train --objectives` refers to."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import nn

from bitextmine.errors import BitextmineError
from bitextmine.train.model import TrainContext, TrainEncoder
from bitextmine.train.objectives.names import OBJECTIVES

if TYPE_CHECKING:
    from bitextmine.train.objectives.distill import TeacherVectors

_BERT_HEADS = ("mexma", "rtl", "vmsst")  # their heads are BERT layers, run by the packer
PAIR_WEIGHTED = ("contrastive",)  # objectives whose forward takes `pair_weights` (train --weight-by-score)
READS_ENGLISH = ("distill",)  # objectives whose forward takes `english`, the batch's English sentences
TAKES_NEGATIVES = (
    "contrastive",
)  # objectives whose forward takes `extra_negatives` (train --hard-negatives)


def check_pair_weighting(weights: dict[str, float]) -> None:
    """Refuse --weight-by-score with an objective that has no per-pair term to weight."""
    others = [name for name in weights if name not in PAIR_WEIGHTED]
    if others:
        raise BitextmineError(
            f"--weight-by-score weights the pairs of {', '.join(PAIR_WEIGHTED)} only; "
            f"drop {', '.join(others)} from --objectives or drop --weight-by-score"
        )


def build_objectives(
    weights: dict[str, float],
    encoder: TrainEncoder,
    ctx: TrainContext,
    options: dict[str, Any],
    teacher: TeacherVectors | None = None,
    normalize: bool = True,
) -> nn.ModuleDict:
    """The objectives of `weights`. `distill` needs `teacher`, and compares the student's vectors
    normalised when `normalize` (the model's settings normalise its vectors)."""
    return nn.ModuleDict(
        {name: _build(name, encoder, ctx, options, (teacher, normalize)) for name in weights}
    )


def _build(
    name: str,
    encoder: TrainEncoder,
    ctx: TrainContext,
    options: dict[str, Any],
    distill: tuple[TeacherVectors | None, bool],
) -> nn.Module:
    config = encoder.config
    if name in _BERT_HEADS and encoder.packer is None:
        others = ", ".join(o for o in OBJECTIVES if o not in _BERT_HEADS)
        raise BitextmineError(
            f"objective {name} needs a BERT-family encoder (its heads are BERT layers), not a "
            f"{config.model_type!r} model: use {others}"
        )
    if name == "contrastive":
        from bitextmine.train.objectives.contrastive import Contrastive

        return Contrastive(
            config.hidden_size,
            temperature=options.get("temperature", 0.05),
            margin=options.get("margin", 0.0),
            projection=options.get("projection", False),
        )
    if name == "distill":
        from bitextmine.train.objectives.distill import Distill

        teacher, normalize = distill
        if teacher is None:
            raise ValueError("the distill objective needs its teacher's vectors")
        return Distill(teacher, config.hidden_size, normalize=normalize)
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
