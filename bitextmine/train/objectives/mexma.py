"""MEXMA (Janeiro et al., 2024): cross-lingual unmasking + sentence alignment + KoLeo.

Each side of a pair batch is encoded twice: clean (given by the loop) and heavily masked (here). The
masked tokens of one language are predicted by an unmasking head that sees, in place of the masked
view's first (CLS) state, the OTHER language's clean sentence vector: the paper's CE([S_B, Â], A)
where Â is the masked encoder output "without the CLS embedding" (a sentence that does not start
with a special token keeps all its states and grows by one). The clean sentence vectors are
aligned with MSE (or, paper §5.2, with a contrastive loss) and spread with KoLeo.

Choices, with their sources (paper = "MEXMA: Token-level objectives improve sentence representations",
arXiv:2409.12737, see docs/references.md; code = the authors'
facebookresearch/mexma release):
- weights: the paper's loss is 1 * MSE + 1/2 * (CE_A + CE_B) + 0.01/2 * (KoLeo_A + KoLeo_B) (§3, A.4).
  Here ``alpha`` weighs the unmasking sum and ``beta`` the alignment, so the defaults are
  alpha=0.5, beta=1.0, gamma=0.005 to reproduce those weights;
- head: 6 transformer layers (A.2), built like the encoder's own layers from its config;
- vocabulary projection tied to the encoder's input word embeddings, with a fresh bias (as in the
  code: ``vocab_head.weight = encoder.embeddings.word_embeddings.weight``);
- masking: 40% (§5.4, A.5) of each sentence's non-special tokens, exactly round(0.4 n) and at least
  one (the code draws each token independently), with BERT's 80/10/10 replacement ([MASK] / random
  token / unchanged) as in the code's collator; loss on every selected token, averaged over the side;
- KoLeo exactly as the code (DINOv2's): L2-normalise, nearest other vector by inner product,
  -mean log(||x_i - x_nn|| + 1e-8).
- ``token_gradients=False`` reproduces the ablation of §5.1 (model (1)): "the gradients from the
  unmasking task are only back propagating through the sentence representations", so the masked
  view's token states are computed without gradients and the tied projection uses a detached copy
  of the embedding matrix; the prepended clean sentence vectors keep theirs. The head still learns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from bitextmine.train.model import EncodedSide, TrainContext, is_special, sentence_of_tokens
from bitextmine.train.objectives.base import Objective, ObjectiveInputs, ObjectiveOutput, ObjectiveSetup
from bitextmine.train.objectives.contrastive import Contrastive
from bitextmine.train.objectives.settings import ContrastiveSettings, MexmaSettings

if TYPE_CHECKING:
    from transformers import PretrainedConfig

KOLEO_EPS = 1e-8


def koleo(vectors: torch.Tensor, eps: float = KOLEO_EPS) -> torch.Tensor:
    """Kozachenko-Leonenko loss: -mean_i log(distance from x_i to its nearest other x_j), on unit vectors."""
    if len(vectors) < 2:
        return vectors.sum() * 0.0
    x = F.normalize(vectors.float(), p=2, dim=-1, eps=eps)
    with torch.no_grad():
        dots = x @ x.T
        dots.fill_diagonal_(-2.0)  # below any cosine, so a vector is never its own neighbour
        nearest = dots.argmax(dim=1)
    distances = F.pairwise_distance(x, x[nearest], p=2, eps=eps)
    return -torch.log(distances + eps).mean()


def mse_alignment(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Mean squared error over every coordinate of the two [sentences, hidden] matrices (nn.MSELoss)."""
    return F.mse_loss(a.float(), b.float())


def mask_tokens(
    input_ids: torch.Tensor,
    seqlens: list[int],
    *,
    ratio: float,
    mask_token_id: int,
    special_ids: frozenset[int],
    vocab_size: int,
    generator: torch.Generator,
    replace_prob: float = 0.8,
    random_prob: float = 0.1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(corrupted ids, bool [tokens] selected for prediction).

    Each sentence gets round(ratio * n) of its n non-special tokens selected (at least one when n > 0),
    uniformly without replacement; a selected token becomes [MASK] with `replace_prob`, a random
    non-special token with `random_prob`, and stays as it is otherwise.
    """
    ids = input_ids.cpu()
    owner = sentence_of_tokens(seqlens, ids.device)
    eligible = ~is_special(ids, special_ids)
    counts = torch.zeros(len(seqlens), dtype=torch.long).index_add_(0, owner, eligible.long())
    quota = torch.where(counts > 0, torch.clamp(torch.floor(counts * ratio + 0.5).long(), min=1), 0)
    selected = eligible & (_random_rank(owner, eligible, seqlens, generator) < quota[owner])

    draw = torch.rand(len(ids), generator=generator)
    allowed = torch.arange(vocab_size)
    allowed = allowed[~is_special(allowed, special_ids)]
    random_ids = allowed[torch.randint(len(allowed), (len(ids),), generator=generator)]
    corrupted = torch.where(selected & (draw < replace_prob), mask_token_id, ids)
    to_random = selected & (draw >= replace_prob) & (draw < replace_prob + random_prob)
    corrupted = torch.where(to_random, random_ids, corrupted)
    return corrupted.to(input_ids.device), selected.to(input_ids.device)


def _random_rank(
    owner: torch.Tensor, eligible: torch.Tensor, seqlens: list[int], generator: torch.Generator
) -> torch.Tensor:
    """Per token, its rank in a random order of its sentence in which eligible tokens come first."""
    score = torch.rand(len(owner), generator=generator, dtype=torch.float64) + (~eligible).double()
    order = torch.argsort(owner.double() * 4 + score)  # sentence-major, then eligible by random score
    lengths = torch.as_tensor(seqlens)
    starts = torch.cumsum(lengths, 0) - lengths
    rank = torch.empty_like(owner)
    rank[order] = torch.arange(len(owner)) - starts[owner[order]]
    return rank


def _head_layer_class(model_type: str) -> type[nn.Module]:
    # The classes differ only in their names; all have BERT's layout, which the packer runs.
    from transformers.models.bert.modeling_bert import BertLayer

    if model_type == "xlm-roberta":
        from transformers.models.xlm_roberta.modeling_xlm_roberta import XLMRobertaLayer

        return XLMRobertaLayer
    if model_type == "roberta":
        from transformers.models.roberta.modeling_roberta import RobertaLayer

        return RobertaLayer
    return BertLayer


def with_sentence_vector(
    hidden: torch.Tensor, seqlens: list[int], first_is_cls: torch.Tensor, vectors: torch.Tensor
) -> tuple[torch.Tensor, list[int], torch.Tensor]:
    """Put vectors[i] at the head of sentence i, replacing its first state where first_is_cls[i].

    Returns the new packed stream, its seqlens and, for each new position, the old token index
    (-1 at the sentence vectors).
    """
    device = hidden.device
    lengths = torch.as_tensor(seqlens, device=device)
    starts = torch.cumsum(lengths, 0) - lengths
    owner = sentence_of_tokens(seqlens, device)
    drop = first_is_cls.long().to(device)
    keep = torch.ones(len(owner), dtype=torch.bool, device=device)
    keep[starts[drop.bool()]] = False

    new_lengths = lengths - drop + 1
    new_starts = torch.cumsum(new_lengths, 0) - new_lengths
    kept = torch.nonzero(keep).squeeze(1)
    kept_owner = owner[kept]
    kept_pos = new_starts[kept_owner] + 1 + (kept - starts[kept_owner]) - drop[kept_owner]
    positions = torch.cat([new_starts, kept_pos])
    sources = torch.cat([torch.full_like(new_starts, -1), kept])
    perm = torch.empty_like(positions)
    perm[positions] = torch.arange(len(positions), device=device)
    stream = torch.cat([vectors.to(hidden.dtype), hidden[kept]])[perm]
    return stream, new_lengths.tolist(), sources[perm]


class Mexma(Objective):
    Settings = MexmaSettings
    needs_bert_heads = True

    def __init__(
        self,
        config: PretrainedConfig,
        settings: MexmaSettings,
        *,
        head_layers: int = 6,  # paper, appendix A.2
        alpha: float = 0.5,  # unmasking (CE_src + CE_tgt); the paper's beta = 1/2
        beta: float = 1.0,  # alignment; the paper's alpha = 1
        gamma: float = 0.005,  # KoLeo_src + KoLeo_tgt; the paper's gamma = 0.01/2 (§5.2 uses 0)
    ) -> None:
        super().__init__()
        self.mask_ratio = settings.mask_ratio
        self.alpha, self.beta, self.gamma = alpha, beta, gamma
        self.token_gradients = settings.token_gradients
        layer_class = _head_layer_class(config.model_type)
        self.head = nn.ModuleList(layer_class(config) for _ in range(head_layers))
        self.vocab_bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.contrastive = None
        if settings.mexma_alignment == "contrastive":
            self.contrastive = Contrastive(config.hidden_size, ContrastiveSettings())

    @classmethod
    def build(cls, settings: MexmaSettings, setup: ObjectiveSetup) -> Mexma:
        return cls(setup.encoder.config, settings)

    def forward(self, inputs: ObjectiveInputs) -> ObjectiveOutput:
        src, tgt, ctx = inputs.src, inputs.tgt, inputs.ctx
        mlm_src, mlm_tgt = self.unmasking_losses(src, tgt, ctx)
        if self.contrastive is not None:
            align = self.contrastive(ObjectiveInputs(src, tgt, ctx)).loss  # the clean pairs only
        else:
            align = mse_alignment(src.pooled, tgt.pooled)
        spread = koleo(src.pooled) + koleo(tgt.pooled)
        loss = self.alpha * (mlm_src + mlm_tgt) + self.beta * align + self.gamma * spread
        terms = {"mlm_src": mlm_src, "mlm_tgt": mlm_tgt, "align": align, "koleo": spread}
        return ObjectiveOutput(loss, {k: float(v.detach()) for k, v in terms.items()})

    def unmasking_losses(
        self, src: EncodedSide, tgt: EncodedSide, ctx: TrainContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """CE([S_tgt, masked src], src) and CE([S_src, masked tgt], tgt), each a mean over its masked tokens.

        Both masked views share one encoder forward and both sides one head forward (the packed
        attention keeps every sentence to itself).
        """
        (src_ids, src_sel), (tgt_ids, tgt_sel) = self._mask(src, ctx), self._mask(tgt, ctx)
        with torch.set_grad_enabled(self.token_gradients and torch.is_grad_enabled()):
            both = ctx.encoder.encode(
                torch.cat([src_ids, tgt_ids]), src.seqlens + tgt.seqlens, torch.cat([src.langs, tgt.langs])
            )
        hidden_src, hidden_tgt = both.hidden[: len(src_ids)], both.hidden[len(src_ids) :]
        views = [
            with_sentence_vector(hidden_src, src.seqlens, self._first_is_special(src, ctx), tgt.pooled),
            with_sentence_vector(hidden_tgt, tgt.seqlens, self._first_is_special(tgt, ctx), src.pooled),
        ]
        stream = torch.cat([view[0] for view in views])
        predicted = ctx.encoder.packer.run_layers(self.head, stream, views[0][1] + views[1][1])
        cut = len(views[0][0])
        return (
            self._cross_entropy(predicted[:cut], views[0][2], src_sel, src.input_ids, ctx),
            self._cross_entropy(predicted[cut:], views[1][2], tgt_sel, tgt.input_ids, ctx),
        )

    def _mask(self, side: EncodedSide, ctx: TrainContext) -> tuple[torch.Tensor, torch.Tensor]:
        return mask_tokens(
            side.input_ids,
            side.seqlens,
            ratio=self.mask_ratio,
            mask_token_id=ctx.mask_token_id,
            special_ids=ctx.special_ids,
            vocab_size=ctx.vocab_size,
            generator=ctx.generator,
        )

    def _cross_entropy(
        self,
        predicted: torch.Tensor,
        sources: torch.Tensor,
        selected: torch.Tensor,
        input_ids: torch.Tensor,
        ctx: TrainContext,
    ) -> torch.Tensor:
        real = sources >= 0
        token_of = sources[real]
        hit = selected[token_of]
        if not bool(hit.any()):
            return predicted.sum() * 0.0
        rows = predicted[real][hit]  # only the masked positions are projected onto the vocabulary
        logits = F.linear(rows, self._vocab_weight(ctx).to(rows.dtype), self.vocab_bias.to(rows.dtype))
        return F.cross_entropy(logits.float(), input_ids[token_of[hit]])

    def _vocab_weight(self, ctx: TrainContext) -> torch.Tensor:
        weight = ctx.encoder.model.embeddings.word_embeddings.weight
        return weight if self.token_gradients else weight.detach()

    @staticmethod
    def _first_is_special(side: EncodedSide, ctx: TrainContext) -> torch.Tensor:
        lengths = torch.as_tensor(side.seqlens, device=side.input_ids.device)
        firsts = side.input_ids[torch.cumsum(lengths, 0) - lengths]
        return is_special(firsts, ctx.special_ids)
