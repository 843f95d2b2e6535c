"""Self-attention confined to each sentence of a packed token stream.

Packed tensors are [tokens, heads, head_dim] with sentences back to back; ``seqlens`` gives each
sentence's length in stream order. Two exact backends:

* ``xformers``: memory-efficient attention with a ``BlockDiagonalMask`` (CUDA only). Chosen only
  after a tiny probe runs in fp32 and bf16 at the model's head size: an xFormers wheel built for
  another torch or CUDA imports fine but has no kernels, and must not take the encoder down with it.
* ``sdpa``: dense ``scaled_dot_product_attention`` calls over groups of sentences, on any device.
  In a length-sorted batch (what the encoder builds) consecutive sentences of equal length form runs
  that are plain views of the stream: one unmasked call per run, no copies. Otherwise sentences are
  grouped into buckets of similar length, each gathered into a padded [n, heads, L, head_dim] batch
  with padded keys masked out; a bucket never spans lengths whose ratio exceeds ``BUCKET_RATIO``. Either
  way the cost stays within BUCKET_RATIO^2 of sum(len_i^2) instead of growing with the square of the
  packed length.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from bitextmine.errors import BitextmineError, BitextmineWarning

BUCKET_RATIO = 1.25


class PackedAttention(Protocol):
    name: str

    def __call__(self, qkv: torch.Tensor, seqlens: Sequence[int], dropout_p: float) -> torch.Tensor:
        """qkv: [tokens, 3, heads, head_dim] -> context [tokens, heads, head_dim]."""
        ...


def length_buckets(seqlens: Sequence[int], ratio: float = BUCKET_RATIO) -> list[list[int]]:
    """Group sentence positions so that within a group max(len) <= ratio * min(len)."""
    order = sorted(range(len(seqlens)), key=seqlens.__getitem__)
    buckets: list[list[int]] = []
    floor = 0.0
    for i in order:
        if not buckets or seqlens[i] > floor * ratio:
            buckets.append([])
            floor = seqlens[i]
        buckets[-1].append(i)
    return buckets


@dataclass(frozen=True)
class _Bucket:
    rows: int
    width: int
    gather: torch.Tensor  # [rows * width] packed token feeding each padded slot
    key_mask: torch.Tensor | None  # [rows, 1, 1, width], True where the key is a real token


@dataclass(frozen=True)
class _BucketPlan:
    buckets: list[_Bucket]
    scatter: torch.Tensor  # [tokens] slot of each packed token in the concatenated bucket outputs


def equal_length_runs(seqlens: Sequence[int]) -> list[tuple[int, int, int]]:
    """(first token, sentences, length) of each run of consecutive sentences with equal length."""
    runs, start = [], 0
    for length, group in itertools.groupby(seqlens):
        count = sum(1 for _ in group)
        runs.append((start, count, length))
        start += count * length
    return runs


def without_cudnn_attention() -> contextlib.AbstractContextManager:
    """SDPA restricted to its flash, memory-efficient and math kernels.

    On Hopper GPUs PyTorch prefers cuDNN attention for bf16, which builds a cuDNN graph for every new
    shape: ~3 ms of CPU per call against ~6 us of GPU work. Packed batches bring a new (sentences,
    length) shape almost every call, which made bf16 encoding 10-13x slower than fp32 on an H100."""
    return sdpa_kernel(_SDPA_BACKENDS)


_SDPA_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


class BlockDiagonalSDPA:
    """Exact block-diagonal attention built from dense SDPA calls (any device)."""

    name = "sdpa"

    def __call__(self, qkv: torch.Tensor, seqlens: Sequence[int], dropout_p: float) -> torch.Tensor:
        runs = equal_length_runs(seqlens)
        with without_cudnn_attention():
            if 2 * len(runs) <= len(seqlens):
                return self._by_runs(qkv, runs, dropout_p)
            return self._by_buckets(qkv, seqlens, dropout_p)

    @staticmethod
    def _by_runs(qkv: torch.Tensor, runs: list[tuple[int, int, int]], dropout_p: float) -> torch.Tensor:
        tokens, _, heads, dim = qkv.shape
        out = qkv.new_empty(tokens, heads, dim)
        for start, count, length in runs:
            span = slice(start, start + count * length)
            q, k, v = qkv[span].view(count, length, 3, heads, dim).permute(2, 0, 3, 1, 4)
            attended = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
            out[span] = attended.transpose(1, 2).reshape(count * length, heads, dim)
        return out

    @staticmethod
    def _by_buckets(qkv: torch.Tensor, seqlens: Sequence[int], dropout_p: float) -> torch.Tensor:
        plan = _bucket_plan(tuple(seqlens), qkv.device)
        heads, dim = qkv.shape[2:]
        outputs = []
        for b in plan.buckets:
            q, k, v = qkv[b.gather].view(b.rows, b.width, 3, heads, dim).permute(2, 0, 3, 1, 4)
            attended = F.scaled_dot_product_attention(q, k, v, attn_mask=b.key_mask, dropout_p=dropout_p)
            outputs.append(attended.transpose(1, 2).reshape(b.rows * b.width, heads, dim))
        return torch.cat(outputs)[plan.scatter]


@functools.lru_cache(maxsize=64)
def _bucket_plan(seqlens: tuple[int, ...], device: torch.device) -> _BucketPlan:
    # Padded slots read the sentence's own last token: their keys are masked out and their outputs
    # are never scattered back, so any real token will do and no zero-filled copy is needed.
    lengths = torch.tensor(seqlens)
    starts = torch.cumsum(lengths, 0) - lengths
    buckets, scatter = [], torch.empty(int(lengths.sum()), dtype=torch.long)
    offset = 0
    for members in length_buckets(seqlens):
        idx = torch.tensor(members)
        width = int(lengths[idx].max())
        slot = torch.arange(width)
        real = slot[None, :] < lengths[idx, None]
        gather = starts[idx, None] + torch.minimum(slot[None, :], lengths[idx, None] - 1)
        slots = offset + torch.arange(len(members) * width).view(len(members), width)
        scatter[gather[real]] = slots[real]
        key_mask = None if bool(real.all()) else real[:, None, None, :].to(device)
        buckets.append(_Bucket(len(members), width, gather.flatten().to(device), key_mask))
        offset += len(members) * width
    return _BucketPlan(buckets, scatter.to(device))


class XFormersBlockDiagonal:
    """xFormers memory-efficient attention with a BlockDiagonalMask (the MEXMA setup); CUDA only."""

    name = "xformers"
    PROBE_DTYPES = (torch.float32, torch.bfloat16)  # what the encoder and trainer run attention in

    def __init__(self, fmha=None) -> None:
        if fmha is None:
            from xformers.ops import fmha
        self._fmha = fmha

    def probe(self, device: torch.device, head_dim: int) -> str | None:
        """None when xFormers runs block-diagonal attention here in every PROBE_DTYPE, else why not."""
        for dtype in self.PROBE_DTYPES:
            qkv = torch.zeros(3, 3, 1, head_dim, device=device, dtype=dtype)
            # NotImplementedError: its dispatcher found no kernel for these inputs; RuntimeError: a kernel
            # that cannot run on this GPU (built for other architectures)
            try:
                self(qkv, [1, 2], 0.0)
            except (NotImplementedError, RuntimeError) as exc:
                return (
                    f"xFormers has no {str(dtype).removeprefix('torch.')} kernel here ({_first_reason(exc)})"
                )
        return None

    def __call__(self, qkv: torch.Tensor, seqlens: Sequence[int], dropout_p: float) -> torch.Tensor:
        bias = self._fmha.attn_bias.BlockDiagonalMask.from_seqlens(list(seqlens))
        q, k, v = qkv[None].unbind(2)
        return self._fmha.memory_efficient_attention(q, k, v, attn_bias=bias, p=dropout_p)[0]


def _first_reason(exc: Exception) -> str:
    """The first operator's first reason in xFormers' "No operator found" message."""
    lines = [line.strip() for line in str(exc).splitlines()]
    reasons = [after for before, after in itertools.pairwise(lines) if before.endswith("because:")]
    return reasons[0] if reasons else (lines[0] if lines else type(exc).__name__)


def select_attention(device: torch.device, head_dim: int, prefer: str = "auto") -> PackedAttention:
    """xFormers on CUDA when installed and working (or when asked for), else the SDPA path.

    `auto` falls back to SDPA with a warning when xFormers is installed but cannot run here;
    `xformers` raises BitextmineError instead."""
    if prefer not in {"auto", "xformers", "sdpa"}:
        raise ValueError(f"unknown attention backend {prefer!r}")
    if prefer == "sdpa" or (prefer == "auto" and device.type != "cuda"):
        return BlockDiagonalSDPA()
    try:
        backend = XFormersBlockDiagonal()
    except ImportError:
        if prefer == "xformers":
            raise BitextmineError("attention backend xformers: xFormers is not installed") from None
        return BlockDiagonalSDPA()
    return checked_xformers(backend, device, head_dim, strict=prefer == "xformers")


def checked_xformers(
    backend: XFormersBlockDiagonal, device: torch.device, head_dim: int, strict: bool
) -> PackedAttention:
    """`backend` if its probe passes; else an error (strict) or SDPA with a warning."""
    problem = backend.probe(device, head_dim)
    if problem is None:
        return backend
    if strict:
        raise BitextmineError(f"attention backend xformers: {problem}")
    warnings.warn(f"{problem}; using PyTorch SDPA attention instead", BitextmineWarning, stacklevel=3)
    return BlockDiagonalSDPA()
