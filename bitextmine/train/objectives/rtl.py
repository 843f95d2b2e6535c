"""DAP's representation translation learning (RTL; Li et al., ACL 2023, sections 3.2 and 3.3.2).

A head g of K transformer blocks (K = 2, section 3.2), initialised as deep copies of the encoder's last K
layers (section 4.2), reconstructs each English sentence y from the last-layer token states of its
non-English translation x. Following eq. 4, the head's input for a pair is

    g^0(h, y) = (h_1^L, ..., h_{S_x}^L, [MASK] x S_y)

i.e. every token state of x except CLS (eq. 6: "all hidden vectors of x except CLS", so SEP stays),
followed by one [MASK] slot per English token to reconstruct. The two parts form one sequence that
attends only within the pair (block-diagonal packing, like the encoder). Lengths and positions:
the head predicts the English tokens position-wise at their own English length S_y (no padding,
no truncation beyond the encoder's); each [MASK] slot is embedded by the encoder's embedding layer
(word embedding of [MASK] + the position embedding of that token's position in the English sentence
+ LayerNorm), which is the only thing that tells the slots apart. The source states enter as they
are (they already carry their positions).

Targets are y_1 .. y_S: the English tokens that are not special (CLS, SEP, PAD, ... are neither
given a slot nor predicted). The output is pi(W^T g^K(...)) (eq. 4): a bias-free vocabulary
projection W owned by the head, *not* tied to the encoder's input embeddings (the paper calls it the
weight matrix of the head's vocabulary prediction layer), initialised from a copy of those
embeddings, as the head is initialised from the encoder. The loss is eq. 6: the cross-entropy
averaged over the S tokens of each English sentence, then averaged over the pairs of the batch
(pairs whose English side has no token to predict are skipped). The direction is always
non-English -> English (section 3.3.2): `src` is the non-English side, `tgt` the English one.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from bitextmine.train.model import EncodedSide, TrainContext, TrainEncoder, is_special
from bitextmine.train.objectives.base import Objective, ObjectiveInputs, ObjectiveOutput, ObjectiveSetup
from bitextmine.train.objectives.settings import RtlSettings


class RepresentationTranslation(Objective):
    Settings = RtlSettings
    needs_bert_heads = True

    def __init__(self, encoder_model: nn.Module, settings: RtlSettings) -> None:
        super().__init__()
        model = encoder_model.model if isinstance(encoder_model, TrainEncoder) else encoder_model
        layers = model.encoder.layer[-settings.rtl_layers :]
        self.layers = nn.ModuleList(copy.deepcopy(layer) for layer in layers)
        embeddings = model.get_input_embeddings().weight
        self.vocab = nn.Linear(embeddings.shape[1], embeddings.shape[0], bias=False)
        with torch.no_grad():
            self.vocab.weight.copy_(embeddings)

    @classmethod
    def build(cls, settings: RtlSettings, setup: ObjectiveSetup) -> RepresentationTranslation:
        return cls(setup.encoder.model, settings)

    def forward(self, inputs: ObjectiveInputs) -> ObjectiveOutput:
        src, tgt = inputs.src, inputs.tgt
        logits, targets, owner = self.predict(src, tgt, inputs.ctx)
        per_token = F.cross_entropy(logits.float(), targets, reduction="none")
        loss = _mean_of_sentence_means(per_token, owner, len(tgt.seqlens))
        with torch.no_grad():
            accuracy = (logits.argmax(-1) == targets).float().mean() if len(targets) else torch.zeros(())
        return ObjectiveOutput(loss, {"rtl": float(loss.detach()), "rtl_accuracy": float(accuracy)})

    def predict(
        self, src: EncodedSide, tgt: EncodedSide, ctx: TrainContext
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(logits [targets, vocab], target ids [targets], English sentence of each target)."""
        if len(src.seqlens) != len(tgt.seqlens):
            raise ValueError(f"{len(src.seqlens)} source sentences but {len(tgt.seqlens)} English ones")
        predicted = ~is_special(tgt.input_ids, ctx.special_ids)
        targets, owner = tgt.input_ids[predicted], tgt.owner[predicted]
        memory_rows = ~_first_tokens(src.seqlens, src.hidden.device)
        memory, memory_owner = src.hidden[memory_rows], src.owner[memory_rows]
        slots = self._mask_slots(tgt, ctx)[predicted].to(memory.dtype)
        stream, seqlens, slot_rows = _pair_sequences(memory, memory_owner, slots, owner, len(tgt.seqlens))
        out = ctx.encoder.packer.run_layers(self.layers, stream, seqlens)
        return self.vocab(out[slot_rows]), targets, owner

    @staticmethod
    def _mask_slots(tgt: EncodedSide, ctx: TrainContext) -> torch.Tensor:
        """[MASK] embedded at every English position (the encoder's embedding layer, so positions count)."""
        masks = torch.full_like(tgt.input_ids, ctx.mask_token_id)
        return ctx.encoder.packer.embed(masks, tgt.seqlens)


def _first_tokens(seqlens: list[int], device: torch.device) -> torch.Tensor:
    """bool [tokens]: True at each sentence's first token (CLS / <s>)."""
    lengths = torch.as_tensor(seqlens, device=device)
    first = torch.zeros(int(lengths.sum()), dtype=torch.bool, device=device)
    first[torch.cumsum(lengths, 0) - lengths] = True
    return first


def _pair_sequences(
    memory: torch.Tensor,
    memory_owner: torch.Tensor,
    slots: torch.Tensor,
    slot_owner: torch.Tensor,
    pairs: int,
) -> tuple[torch.Tensor, list[int], torch.Tensor]:
    """Pack pair i as (its source states, then its [MASK] slots); returns the stream, its lengths and
    the stream row of each slot, in the order `slots` came in."""
    rows = torch.cat([memory, slots])
    part = torch.cat([torch.zeros_like(memory_owner), torch.ones_like(slot_owner)])
    pair = torch.cat([memory_owner, slot_owner])
    order = torch.argsort(pair * 2 + part, stable=True)
    position = torch.empty_like(order)
    position[order] = torch.arange(len(order), device=order.device)
    lengths = torch.bincount(pair, minlength=pairs)
    seqlens = [int(n) for n in lengths.tolist() if n > 0]
    return rows[order], seqlens, position[len(memory) :]


def _mean_of_sentence_means(per_token: torch.Tensor, owner: torch.Tensor, sentences: int) -> torch.Tensor:
    sums = per_token.new_zeros(sentences).index_add(0, owner, per_token)
    counts = torch.bincount(owner, minlength=sentences)
    present = counts > 0
    if not bool(present.any()):
        return per_token.sum() * 0.0
    return (sums[present] / counts[present]).mean()
