"""Packed forward for BERT-family encoders: no padding, attention confined to each sentence.

The packed stream is a 1-D tensor of token ids with sentences back to back. Position ids restart at
every sentence (offset by ``padding_idx + 1`` for RoBERTa/XLM-R, whose positions start there). The
embedding, feed-forward and layer-norm modules of the Hugging Face model are reused as they are, on
the [tokens, hidden] tensor; only the attention core is replaced by a block-diagonal backend, so
dropout, gradients and weights behave exactly as in the original model.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from bitextmine.encoder.attention import PackedAttention

PACKABLE_MODEL_TYPES = {"bert", "xlm-roberta", "roberta", "camembert"}
_POSITIONS_AFTER_PADDING = {"xlm-roberta", "roberta", "camembert"}


def supports_packing(model: nn.Module) -> bool:
    """True for encoder-only BERT-family checkpoints with absolute positions."""
    config = model.config
    return (
        config.model_type in PACKABLE_MODEL_TYPES
        and getattr(config, "position_embedding_type", "absolute") == "absolute"
        and not getattr(config, "is_decoder", False)
        and hasattr(model, "embeddings")
        and hasattr(model, "encoder")
    )


def head_dim_of(config) -> int:
    """Size of one attention head of a BERT-family config."""
    return config.hidden_size // config.num_attention_heads


def packed_positions(seqlens: Sequence[int], offset: int, device: torch.device) -> torch.Tensor:
    """Positions 0..len-1 (plus offset) for every sentence of the stream."""
    lengths = torch.as_tensor(list(seqlens), device=device)
    starts = torch.cumsum(lengths, 0) - lengths
    stream = torch.arange(int(lengths.sum()), device=device)
    return stream - torch.repeat_interleave(starts, lengths) + offset


class PackedBertForward:
    """Runs a Hugging Face BERT/XLM-R model on a packed token stream."""

    def __init__(self, model: nn.Module, attention: PackedAttention) -> None:
        if not supports_packing(model):
            raise ValueError(f"model type {model.config.model_type!r} cannot be packed")
        self.model = model
        self.attention = attention
        config = model.config
        self.heads = config.num_attention_heads
        self.head_dim = head_dim_of(config)
        self.position_offset = config.pad_token_id + 1 if config.model_type in _POSITIONS_AFTER_PADDING else 0

    def __call__(self, input_ids: torch.Tensor, seqlens: Sequence[int]) -> torch.Tensor:
        """input_ids: [tokens] -> last hidden states [tokens, hidden]."""
        return self.run_layers(self.model.encoder.layer, self.embed(input_ids, seqlens), seqlens)

    def run_layers(
        self, layers: Iterable[nn.Module], hidden: torch.Tensor, seqlens: Sequence[int]
    ) -> torch.Tensor:
        """Run BERT-style `layers` (the model's own, or heads built like them) over a packed stream."""
        for layer in layers:
            hidden = self._layer(layer, hidden, seqlens)
        return hidden

    def embed(self, input_ids: torch.Tensor, seqlens: Sequence[int]) -> torch.Tensor:
        emb = self.model.embeddings
        positions = packed_positions(seqlens, self.position_offset, input_ids.device)
        hidden = emb.word_embeddings(input_ids) + emb.position_embeddings(positions)
        hidden = hidden + emb.token_type_embeddings.weight[0]
        return emb.dropout(emb.LayerNorm(hidden))

    def _layer(self, layer: nn.Module, hidden: torch.Tensor, seqlens: Sequence[int]) -> torch.Tensor:
        attn = layer.attention
        core = attn.self
        qkv = self._fused_qkv(core, hidden).view(hidden.shape[0], 3, self.heads, self.head_dim)
        dropout_p = core.dropout.p if layer.training else 0.0
        context = self.attention(qkv, seqlens, dropout_p)
        attended = attn.output(context.reshape(hidden.shape), hidden)
        return layer.output(layer.intermediate(attended), attended)

    @staticmethod
    def _fused_qkv(core: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
        # One GEMM instead of three; the weights are concatenated on every call (cheap next to the
        # GEMM) so that training sees the current parameters and gradients flow to each of them.
        projections = (core.query, core.key, core.value)
        if not all(isinstance(p, nn.Linear) for p in projections):  # int8: quantized modules
            return torch.cat([p(hidden) for p in projections], dim=-1)
        weight = torch.cat([p.weight for p in projections])
        bias = torch.cat([p.bias for p in projections])
        return F.linear(hidden, weight, bias)
