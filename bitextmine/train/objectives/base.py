"""The contract of a training objective: an `nn.Module` that names its settings class, says what it
needs, builds itself from its settings and turns one encoded batch into a loss (docs/training.md, Adding
an objective). Defining a subclass registers it under its settings' objective name (registry.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch
from torch import nn

from bitextmine.train.model import EncodedSide, TrainContext, TrainEncoder
from bitextmine.train.objectives.registry import register
from bitextmine.train.objectives.settings import ObjectiveSettings

if TYPE_CHECKING:
    from bitextmine.train.objectives.distill import TeacherVectors


@dataclass(frozen=True)
class HardNegatives:
    pooled: torch.Tensor  # [M, hidden]: mined English sentences, encoded in the targets' forward
    allowed: torch.Tensor  # bool [pairs, M]: the negatives each pair may use (not its likely translations)


@dataclass(frozen=True)
class ObjectiveInputs:
    """One batch, as every objective sees it."""

    src: EncodedSide  # the non-English sentences
    tgt: EncodedSide  # their English translations
    ctx: TrainContext
    english: Sequence[str] = ()  # the English sentences as text
    pair_weights: torch.Tensor | None = None  # --weight-by-score: a weight per pair, or None
    negatives: HardNegatives | None = None  # --hard-negatives, or None


@dataclass(frozen=True)
class ObjectiveSetup:
    """What an objective is built from besides its settings."""

    encoder: TrainEncoder
    ctx: TrainContext
    teacher: TeacherVectors | None = None  # distill's, loaded by the loop before any head is initialised
    normalize: bool = True  # the model's settings normalise its vectors


@dataclass
class ObjectiveOutput:
    loss: torch.Tensor  # scalar, the objective's own weighting of its terms applied
    terms: dict[str, float]  # detached components for the log


class Objective(nn.Module):
    """Subclasses set `Settings` (their name is its objective's) and the capabilities they have."""

    Settings: ClassVar[type[ObjectiveSettings]]
    name: ClassVar[str]
    needs_bert_heads: ClassVar[bool] = False  # its heads are BERT layers, which the packer runs
    weighs_pairs: ClassVar[bool] = False  # applies `pair_weights` (train --weight-by-score)
    takes_negatives: ClassVar[bool] = False  # uses `negatives` (train --hard-negatives)

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls.name = cls.Settings.objective
        register(cls)

    @classmethod
    def build(cls, settings: ObjectiveSettings, setup: ObjectiveSetup) -> Objective:
        raise NotImplementedError

    def forward(self, inputs: ObjectiveInputs) -> ObjectiveOutput:
        raise NotImplementedError
