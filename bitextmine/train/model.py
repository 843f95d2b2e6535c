"""The encoder being trained, run with gradients on packed token streams (or padded: as a reference, and
for models the packer cannot run).

Objectives see every side of a batch as an `EncodedSide`: the packed token ids, the sentence lengths,
the last-layer token states [tokens, hidden] and the pooled sentence vectors [sentences, hidden].
The padded path returns the same packed layout, so the packed and padded steps can be compared.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from bitextmine.encoder.attention import PackedAttention, select_attention
from bitextmine.encoder.head import pool as pool_tokens
from bitextmine.encoder.packed import PACKABLE_MODEL_TYPES, PackedBertForward, head_dim_of, supports_packing
from bitextmine.encoder.precision import bf16_is_native
from bitextmine.errors import BitextmineError


@dataclass
class EncodedSide:
    input_ids: torch.Tensor  # long [tokens]: the sentences' ids back to back
    seqlens: list[int]  # tokens per sentence, in stream order
    hidden: torch.Tensor  # [tokens, hidden] last-layer states
    pooled: torch.Tensor  # [sentences, hidden] sentence vectors (not normalised)
    langs: torch.Tensor  # long [sentences]: language index of each sentence

    @property
    def owner(self) -> torch.Tensor:
        """long [tokens]: the sentence each token belongs to."""
        return sentence_of_tokens(self.seqlens, self.input_ids.device)


def sentence_of_tokens(seqlens: Sequence[int], device: torch.device) -> torch.Tensor:
    lengths = torch.as_tensor(list(seqlens), device=device)
    return torch.repeat_interleave(torch.arange(len(lengths), device=device), lengths)


def is_special(ids: torch.Tensor, special_ids: frozenset[int]) -> torch.Tensor:
    """bool, the shape of `ids`: whether each token is one of `special_ids` (CLS, SEP, PAD, ...)."""
    specials = torch.tensor(sorted(special_ids), dtype=ids.dtype, device=ids.device)
    return torch.isin(ids, specials)


def pool(hidden: torch.Tensor, seqlens: Sequence[int], pooling: str) -> torch.Tensor:
    """Sentence vectors of packed token states, pooled as the encoder pools them (any of its modes)."""
    return pool_tokens(hidden, torch.as_tensor(list(seqlens), device=hidden.device), pooling)


def same_sentences(side: EncodedSide) -> torch.Tensor:
    """bool [sentences, sentences]: whether sentences i and j of `side` have the same token ids."""
    cuts = torch.cumsum(torch.as_tensor([0, *side.seqlens]), 0).tolist()
    ids = side.input_ids.tolist()
    groups: dict[tuple[int, ...], int] = {}
    group = [groups.setdefault(tuple(ids[a:b]), len(groups)) for a, b in itertools.pairwise(cuts)]
    labels = torch.tensor(group, device=side.pooled.device)
    return labels[:, None] == labels[None, :]


def split_side(side: EncodedSide, n: int) -> tuple[EncodedSide, EncodedSide]:
    """The first `n` sentences of `side`, and the rest."""
    cut = sum(side.seqlens[:n])
    first = EncodedSide(
        side.input_ids[:cut], side.seqlens[:n], side.hidden[:cut], side.pooled[:n], side.langs[:n]
    )
    rest = EncodedSide(
        side.input_ids[cut:], side.seqlens[n:], side.hidden[cut:], side.pooled[n:], side.langs[n:]
    )
    return first, rest


class TrainEncoder(nn.Module):
    """Wraps a Hugging Face encoder; `packed=False` runs the ordinary padded forward, the only one for
    models other than BERT-family ones (`packer` is then None)."""

    def __init__(self, model: nn.Module, pooling: str = "mean", packed: bool = True, attention: str = "auto"):
        super().__init__()
        self.model = model
        self.pooling = pooling
        self.packed = packed
        _check_runnable(model, packed)
        self.packer: PackedBertForward | None = None
        if supports_packing(model):
            self.packer = PackedBertForward(model, _training_attention(model, attention))

    @property
    def config(self):
        return self.model.config

    def encode(self, input_ids: torch.Tensor, seqlens: list[int], langs: torch.Tensor) -> EncodedSide:
        hidden = self.packer(input_ids, seqlens) if self.packed else self._padded(input_ids, seqlens)
        return EncodedSide(input_ids, seqlens, hidden, pool(hidden, seqlens, self.pooling), langs)

    def encode_pair(
        self,
        src_ids: list[list[int]],
        tgt_ids: list[list[int]],
        src_langs: torch.Tensor,
        tgt_langs: torch.Tensor,
    ) -> tuple[EncodedSide, EncodedSide]:
        """Both sides of a batch in one forward over their concatenated streams, split back."""
        device = next(self.model.parameters()).device
        seqlens = [len(x) for x in src_ids] + [len(x) for x in tgt_ids]
        stream = torch.tensor([t for x in (*src_ids, *tgt_ids) for t in x], device=device)
        return split_side(self.encode(stream, seqlens, torch.cat([src_langs, tgt_langs])), len(src_ids))

    def _padded(self, input_ids: torch.Tensor, seqlens: list[int]) -> torch.Tensor:
        width = max(seqlens)
        real = (
            torch.arange(width, device=input_ids.device)[None, :]
            < torch.tensor(seqlens, device=input_ids.device)[:, None]
        )
        pad = self.config.pad_token_id
        ids = input_ids.new_full((len(seqlens), width), 0 if pad is None else pad)  # masked out anyway
        ids[real] = input_ids
        hidden = self.model(input_ids=ids, attention_mask=real.long()).last_hidden_state
        return hidden[real]


def _training_attention(model: nn.Module, prefer: str) -> PackedAttention:
    """The packed attention for training `model` (under bf16 autocast where the device runs bf16)."""
    device = next(model.parameters()).device
    dtype = torch.bfloat16 if bf16_is_native(device) else torch.float32
    dropout = getattr(model.config, "attention_probs_dropout_prob", 0.0)
    return select_attention(device, head_dim_of(model.config), prefer, dtype=dtype, dropout=dropout)


def _check_runnable(model: nn.Module, packed: bool) -> None:
    """Refuse what neither forward can train: encoder-decoders (which AutoModel loads whole, decoder
    and all) and, packed, models that are not BERT-family encoders."""
    model_type = model.config.model_type
    if "decoder_input_ids" in inspect.signature(model.forward).parameters:
        raise BitextmineError(
            f"`train` runs encoders (BERT-family ones packed, others with --padded), not a {model_type!r} "
            "encoder-decoder"
        )
    if packed and not supports_packing(model):
        raise BitextmineError(
            f"the packed forward runs BERT-family encoders ({', '.join(sorted(PACKABLE_MODEL_TYPES))}), "
            f"not a {model_type!r} model: pass --padded"
        )


@dataclass
class TrainContext:
    """What objectives may use besides the encoded batch."""

    encoder: TrainEncoder  # encode() more views (e.g. masked) with gradients; .packer.run_layers for heads
    mask_token_id: int
    special_ids: frozenset[int]  # token ids never masked or predicted (CLS, SEP, PAD, ...)
    vocab_size: int
    languages: list[str]  # EncodedSide.langs index this list; "en" is always present
    generator: torch.Generator  # CPU generator for random masks; seeded and checkpointed by the loop
