"""EMS's cross-lingual token-level reconstruction (XTR; Mao et al., section III-B, eqs. 2-7).

For a pair (S_l, S_l') with sentence vectors u and v, a language embedding L_la gives the target
language's vector (eqs. 2-3: u_la = W_la h_l', the embedding of the *other* side's language token
<2l'>), and

    q_{S_l} = softmax(W_emb swish(W_fc (u_la ⊕ u) + b_fc))            (eq. 4, language vector first)

is compared with the bag of tokens of the translation: p_{S_l'}(w) = N_w / |S_l'| (eq. 7), N_w the
number of occurrences of w, so repeated tokens count as often as they occur, and |S_l'| the number
of tokens. Special tokens (CLS, SEP, PAD, ...) are left out of the bag and of |S_l'|. The loss of a
direction is KL(p_{S_l'} || q_{S_l}) (eq. 6), a true KL (the entropy of p included, so it is 0 when
q = p). Both directions are used: the non-English vector with the target language's embedding
(English) predicts the English bag, and the English vector with the source language's embedding
predicts the non-English bag. EMS sums the two directions and divides by the batch size (eqs. 6, 12);
here each direction is averaged over the pairs and the two directions are averaged, which keeps the
scale of one direction (as the contrastive objective does with eq. 8).

Sizes: d_la = 128 (section IV, "d, d_vcb, d_la ... are 1,024, 60,000, 128"); W_fc is square over
d_la + d with a bias; W_emb is a bias-free [vocab, d_la + d] matrix of its own, not tied to the
encoder's embeddings (section III-B and the ablation in V-G: separate parameters work better).
The paper's one-hot language tokens times W_la are an embedding table over `languages`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bitextmine.train.model import EncodedSide, is_special, sentence_of_tokens
from bitextmine.train.objectives.base import Objective, ObjectiveInputs, ObjectiveOutput, ObjectiveSetup
from bitextmine.train.objectives.settings import XtrSettings

LANGUAGE_DIM = 128


class CrossLingualTokenReconstruction(Objective):
    Settings = XtrSettings

    def __init__(
        self,
        hidden_size: int,
        vocab_size: int,
        languages: list[str],
        special_ids: frozenset[int] = frozenset(),
        language_dim: int = LANGUAGE_DIM,
    ) -> None:
        super().__init__()
        self.languages = list(languages)
        self.special_ids = frozenset(special_ids)
        width = language_dim + hidden_size
        self.language_embedding = nn.Embedding(len(self.languages), language_dim)
        self.fc = nn.Linear(width, width)
        self.vocab = nn.Linear(width, vocab_size, bias=False)

    @classmethod
    def build(cls, settings: XtrSettings, setup: ObjectiveSetup) -> CrossLingualTokenReconstruction:
        ctx = setup.ctx
        return cls(setup.encoder.config.hidden_size, ctx.vocab_size, ctx.languages, ctx.special_ids)

    def forward(self, inputs: ObjectiveInputs) -> ObjectiveOutput:
        src, tgt, ctx = inputs.src, inputs.tgt, inputs.ctx
        if list(ctx.languages) != self.languages:
            raise ValueError(f"XTR was built for languages {self.languages}, the batch uses {ctx.languages}")
        specials = self.special_ids | ctx.special_ids
        to_tgt = self.direction_loss(self.logits(src.pooled, tgt.langs), tgt, specials)
        to_src = self.direction_loss(self.logits(tgt.pooled, src.langs), src, specials)
        loss = (to_tgt + to_src) / 2
        terms = {"xtr": loss, "xtr_to_en": to_tgt, "xtr_from_en": to_src}
        return ObjectiveOutput(loss, {key: float(value.detach()) for key, value in terms.items()})

    def logits(self, vectors: torch.Tensor, target_langs: torch.Tensor) -> torch.Tensor:
        """[sentences, vocab] logits of q from sentence vectors and the language to reconstruct."""
        joint = torch.cat([self.language_embedding(target_langs).to(vectors.dtype), vectors], dim=-1)
        return self.vocab(F.silu(self.fc(joint)))

    def direction_loss(
        self, logits: torch.Tensor, side: EncodedSide, specials: frozenset[int]
    ) -> torch.Tensor:
        """Mean over sentences (with at least one non-special token) of KL(bag of `side` || softmax)."""
        kl, present = bag_kl(logits, side.input_ids, side.seqlens, specials)
        if not bool(present.any()):
            return logits.sum() * 0.0
        return kl[present].mean()


def bag_kl(
    logits: torch.Tensor, ids: torch.Tensor, seqlens: list[int], specials: frozenset[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per sentence KL(p || softmax(logits)), p the bag of its non-special tokens (eq. 7);
    returns (kl [sentences], whether the sentence has any such token)."""
    sentences, vocab = logits.shape
    log_q = F.log_softmax(logits.float(), dim=-1)
    owner = sentence_of_tokens(seqlens, ids.device)
    kept = ~is_special(ids, specials)
    ids, owner = ids[kept], owner[kept]
    length = torch.bincount(owner, minlength=sentences).to(log_q.dtype)
    # sum_w p(w) log q(w) = (1/|S|) * sum over the sentence's tokens of log q(token): repeats count N_w times
    cross = log_q.new_zeros(sentences).index_add(0, owner, log_q[owner, ids]) / length.clamp(min=1)
    pair, count = torch.unique(owner * vocab + ids, return_counts=True)
    sentence = pair // vocab
    p = count.to(log_q.dtype) / length[sentence]
    neg_entropy = log_q.new_zeros(sentences).index_add(0, sentence, p * torch.log(p))
    return neg_entropy - cross, length > 0
