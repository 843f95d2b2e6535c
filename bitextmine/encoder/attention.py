"""Self-attention confined to each sentence of a packed token stream.

Packed tensors are [tokens, heads, head_dim] with sentences back to back; ``seqlens`` gives each
sentence's length in stream order. Three exact backends:

* ``varlen``: PyTorch's own variable-length flash attention (``torch.nn.attention.varlen``, CUDA only,
  bf16/fp16, no dropout) over cumulative sentence offsets. Calls it has no kernel for (fp32 inputs,
  attention dropout while training) go through ``sdpa``.
* ``xformers``: memory-efficient attention with a ``BlockDiagonalMask`` (CUDA only).
* ``sdpa``: dense ``scaled_dot_product_attention`` calls over groups of sentences, on any device.
  In a length-sorted batch (what the encoder builds) consecutive sentences of equal length form runs
  that are plain views of the stream: one unmasked call per run, no copies. Otherwise sentences are
  grouped into buckets of similar length, each gathered into a padded [n, heads, L, head_dim] batch
  with padded keys masked out; a bucket never spans lengths whose ratio exceeds ``BUCKET_RATIO``. Either
  way the cost stays within BUCKET_RATIO^2 of sum(len_i^2) instead of growing with the square of the
  packed length.

The GPU backends are chosen only after a tiny probe runs at the model's head size in the dtypes they
will see: a wheel built for another torch or CUDA, or a GPU its kernels were not built for, imports fine
but cannot run, and must not take the encoder down with it.
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
    shape, milliseconds of CPU for microseconds of GPU work. Packed batches bring a new (sentences,
    length) shape almost every call, which made bf16 encoding many times slower than fp32
    (examples/benchmarks/results/constants.md)."""
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


HALF_DTYPES = (torch.float16, torch.bfloat16)


class TorchVarlen:
    """PyTorch's variable-length flash attention over cumulative sentence offsets; CUDA only. Inputs it has
    no kernel for (fp32, or dropout: its kernel runs none) go through `fallback`."""

    name = "varlen"
    MISSING = "this torch has no torch.nn.attention.varlen"
    PROBE_DTYPES = (torch.bfloat16,)  # what `select_attention` chooses it for: bf16 without dropout

    def __init__(self, varlen_attn=None) -> None:
        if varlen_attn is None:
            from torch.nn.attention.varlen import varlen_attn
        self._varlen_attn = varlen_attn
        self._fallback = BlockDiagonalSDPA()

    def probe(self, device: torch.device, head_dim: int) -> str | None:
        return _probe(self, device, head_dim, "PyTorch's varlen attention")

    def __call__(self, qkv: torch.Tensor, seqlens: Sequence[int], dropout_p: float) -> torch.Tensor:
        if dropout_p > 0 or qkv.dtype not in HALF_DTYPES:
            return self._fallback(qkv, seqlens, dropout_p)
        offsets = _offsets(tuple(seqlens), qkv.device)
        longest = max(seqlens)
        q, k, v = qkv.unbind(1)
        return self._varlen_attn(q, k, v, offsets, offsets, longest, longest)


@functools.lru_cache(maxsize=64)
def _offsets(seqlens: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """[0, len_0, len_0 + len_1, ...] as int32, the cumulative offsets the flash kernels take."""
    return torch.tensor([0, *itertools.accumulate(seqlens)], dtype=torch.int32, device=device)


class XFormersBlockDiagonal:
    """xFormers memory-efficient attention with a BlockDiagonalMask (the MEXMA setup); CUDA only."""

    name = "xformers"
    MISSING = "xFormers is not installed"
    PROBE_DTYPES = (torch.float32, torch.bfloat16)  # what the encoder and trainer run attention in

    def __init__(self, fmha=None) -> None:
        if fmha is None:
            from xformers.ops import fmha
        self._fmha = fmha

    def probe(self, device: torch.device, head_dim: int) -> str | None:
        return _probe(self, device, head_dim, "xFormers")

    def __call__(self, qkv: torch.Tensor, seqlens: Sequence[int], dropout_p: float) -> torch.Tensor:
        bias = self._fmha.attn_bias.BlockDiagonalMask.from_seqlens(list(seqlens))
        q, k, v = qkv[None].unbind(2)
        return self._fmha.memory_efficient_attention(q, k, v, attn_bias=bias, p=dropout_p)[0]


def _probe(backend, device: torch.device, head_dim: int, library: str) -> str | None:
    """None when `backend` attends within two sentences here in each of its PROBE_DTYPES, else why not."""
    for dtype in backend.PROBE_DTYPES:
        qkv = torch.zeros(3, 3, 1, head_dim, device=device, dtype=dtype)
        # NotImplementedError: no kernel for these inputs on this device; RuntimeError: a kernel that
        # cannot run on this GPU (built for other architectures)
        try:
            backend(qkv, [1, 2], 0.0)
        except (NotImplementedError, RuntimeError) as exc:
            return f"{library} has no {str(dtype).removeprefix('torch.')} kernel here ({_first_reason(exc)})"
    return None


def _first_reason(exc: Exception) -> str:
    """The first operator's first reason in xFormers' "No operator found" message, else the message's
    first sentence (PyTorch's dispatcher errors go on for lines)."""
    lines = [line.strip() for line in str(exc).splitlines()]
    reasons = [after for before, after in itertools.pairwise(lines) if before.endswith("because:")]
    if reasons:
        return reasons[0]
    return lines[0].split(". ")[0] if lines else type(exc).__name__


ATTENTION_BACKENDS = ("auto", "varlen", "xformers", "sdpa")


def select_attention(
    device: torch.device,
    head_dim: int,
    prefer: str = "auto",
    *,
    dtype: torch.dtype = torch.float32,
    dropout: float = 0.0,
) -> PackedAttention:
    """The packed attention for a model on `device` whose attention runs in `dtype` with `dropout`.

    `auto` on CUDA: PyTorch's varlen attention where this torch has it and the inputs suit it (bf16 or
    fp16, no dropout), else xFormers when installed, else SDPA; a GPU backend that is installed but
    fails its probe is passed over with a warning. Naming `varlen` or `xformers` makes that an error."""
    if prefer not in ATTENTION_BACKENDS:
        raise BitextmineError(
            f"unknown attention backend {prefer!r}: choose from {', '.join(ATTENTION_BACKENDS)}"
        )
    if prefer == "sdpa" or (prefer == "auto" and device.type != "cuda"):
        return BlockDiagonalSDPA()
    suits = {"varlen": dtype in HALF_DTYPES and dropout == 0, "xformers": True}
    problems: list[str] = []
    for candidate in (TorchVarlen, XFormersBlockDiagonal):
        if prefer != candidate.name and not (prefer == "auto" and suits[candidate.name]):
            continue
        try:
            backend = candidate()
        except ImportError:
            if prefer == candidate.name:
                raise BitextmineError(f"attention backend {prefer}: {candidate.MISSING}") from None
            continue
        problem = backend.probe(device, head_dim)
        if problem is None:
            _warn_passed_over(problems, backend.name)
            return backend
        if prefer == candidate.name:
            raise BitextmineError(f"attention backend {prefer}: {problem}")
        problems.append(problem)
    _warn_passed_over(problems, "PyTorch SDPA")
    return BlockDiagonalSDPA()


def _warn_passed_over(problems: list[str], chosen: str) -> None:
    if problems:
        message = f"{'; '.join(problems)}; using {chosen} attention instead"
        warnings.warn(message, BitextmineWarning, stacklevel=3)
