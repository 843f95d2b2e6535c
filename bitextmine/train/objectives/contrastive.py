"""Symmetric in-batch contrastive loss (translation ranking), as in DAP, LaBSE (AMS) and EMS.

For a batch of B pairs with sentence vectors u_i (non-English) and v_i (English), the similarity
matrix S_ij = cos(h(u_i), h(v_j)) is scaled by 1/temperature; the loss is the mean over the batch of
the cross-entropy of each row and of each column against its diagonal, averaged over the two
directions (EMS eq. 8 sums them; halving keeps its scale comparable to one direction). ``margin`` > 0
subtracts an additive margin from the diagonal before scaling (LaBSE's AMS, m = 0.3 in EMS's
LaBSE-EMS runs). ``projection`` puts EMS's two-layer MLP h(x) = W1 ReLU(W2 x + b2) + b1 (eq. 10-11,
d_cntrs = PROJECTION_DIM < d) before the cosine; without it h is the identity. ``pair_weights`` w_i
(mined pairs weighted by score) scale pair i's row and column terms: the loss is the batch mean of
w_i (row_i + column_i) / 2. ``negatives`` (hard negatives, train/hard_negatives.py) are M more
English vectors appended to every row as columns; their ``allowed`` [B, M] leaves out, per row, those that
may translate its source. The column terms stay over the in-batch non-English vectors. A copy of a row's
English sentence elsewhere in the batch (same token ids) is no negative of that row, nor a copy of a
column's source of that column: a batch of small or repetitive data would otherwise push a pair away
from itself.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bitextmine.train.model import same_sentences
from bitextmine.train.objectives.base import Objective, ObjectiveInputs, ObjectiveOutput, ObjectiveSetup
from bitextmine.train.objectives.settings import ContrastiveSettings

PROJECTION_DIM = 128


class Contrastive(Objective):
    Settings = ContrastiveSettings
    weighs_pairs = True
    takes_negatives = True

    def __init__(self, hidden_size: int, settings: ContrastiveSettings) -> None:
        super().__init__()
        self.temperature = settings.temperature
        self.margin = settings.margin
        self.projection = (
            nn.Sequential(
                nn.Linear(hidden_size, hidden_size),
                nn.ReLU(),
                nn.Linear(hidden_size, min(PROJECTION_DIM, hidden_size)),
            )
            if settings.projection
            else None
        )

    @classmethod
    def build(cls, settings: ContrastiveSettings, setup: ObjectiveSetup) -> Contrastive:
        return cls(setup.encoder.config.hidden_size, settings)

    def forward(self, inputs: ObjectiveInputs) -> ObjectiveOutput:
        src, tgt, negatives = inputs.src, inputs.tgt, inputs.negatives
        loss, accuracy = self.loss(
            src.pooled,
            tgt.pooled,
            inputs.pair_weights,
            negatives.pooled if negatives else None,
            negatives.allowed if negatives else None,
            copies=(same_sentences(src), same_sentences(tgt)),
        )
        return ObjectiveOutput(loss, {"contrastive": loss.item(), "in_batch_accuracy": accuracy})

    def loss(
        self,
        u: torch.Tensor,
        v: torch.Tensor,
        pair_weights: torch.Tensor | None = None,
        extra_negatives: torch.Tensor | None = None,
        extra_allowed: torch.Tensor | None = None,
        copies: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, float]:
        """(loss, share of rows and columns whose best match is their own pair). `extra_negatives` [M, dim]
        are more columns of every row, where `extra_allowed` (bool [B, M]; None: everywhere) allows them.
        `copies` (bool [B, B] each: source i equals source j, target i equals target j) leaves out the
        copies of a row's target from its negatives and of a column's source from the column's."""
        if self.projection is not None:
            u, v = self.projection(u), self.projection(v)
        sims = F.normalize(u.float(), dim=-1) @ F.normalize(v.float(), dim=-1).T
        eye = torch.eye(len(sims), device=sims.device)
        logits = (sims - self.margin * eye) / self.temperature
        target = torch.arange(len(sims), device=sims.device)
        col_sims, col_logits = sims.T, logits.T
        if copies is not None:
            same_src, same_tgt = (same & ~eye.bool() for same in copies)
            sims, logits = (m.masked_fill(same_tgt, -torch.inf) for m in (sims, logits))
            col_sims, col_logits = (m.masked_fill(same_src, -torch.inf) for m in (col_sims, col_logits))
        row_sims, row_logits = sims, logits
        if extra_negatives is not None:
            extra = self._extra_sims(u, extra_negatives, extra_allowed)
            row_sims = torch.cat([sims, extra], 1)
            row_logits = torch.cat([logits, extra / self.temperature], 1)
        if pair_weights is None:
            loss = (F.cross_entropy(row_logits, target) + F.cross_entropy(col_logits, target)) / 2
        else:
            per_pair = F.cross_entropy(row_logits, target, reduction="none") + F.cross_entropy(
                col_logits, target, reduction="none"
            )
            loss = (pair_weights.float() * per_pair).mean() / 2
        with torch.no_grad():
            accuracy = (
                (row_sims.argmax(1) == target).float().mean() + (col_sims.argmax(1) == target).float().mean()
            ) / 2
        return loss, float(accuracy)

    def _extra_sims(
        self, u: torch.Tensor, negatives: torch.Tensor, allowed: torch.Tensor | None
    ) -> torch.Tensor:
        """Cosines [B, M] of the (projected) rows to the negatives, -inf where a negative is not allowed."""
        if self.projection is not None:
            negatives = self.projection(negatives)
        sims = F.normalize(u.float(), dim=-1) @ F.normalize(negatives.float(), dim=-1).T
        return sims if allowed is None else sims.masked_fill(~allowed, -torch.inf)
