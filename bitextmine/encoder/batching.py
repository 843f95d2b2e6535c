"""Token-budget batches from length-sorted windows.

Sentences are taken in windows of ``window`` consecutive inputs, sorted by length inside each window
and cut into batches whose token count stays within ``max_tokens``. Sorting only inside a window
keeps memory and latency bounded on a stream while most of the length-sorting benefit remains; a
sentence longer than the budget gets a batch of its own.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

# On a CPU a batch of 2048-4096 tokens keeps activations in cache, and larger ones are slower; a GPU wants
# larger batches (examples/benchmarks/results/constants.md, token budget; gpu_check.md).
DEFAULT_MAX_TOKENS = 4096
CUDA_MAX_TOKENS = 32768


def default_max_tokens(device_type: str) -> int:
    """The token budget of a packed batch on a device of this type (cpu, cuda)."""
    return CUDA_MAX_TOKENS if device_type == "cuda" else DEFAULT_MAX_TOKENS


def token_budget_batches(
    lengths: Sequence[int], max_tokens: int, window: int = 4096, max_sentences: int | None = None
) -> Iterator[list[int]]:
    """Yield lists of input positions, at most `max_sentences` a list; every position appears exactly once."""
    if max_tokens < 1:
        raise ValueError("max_tokens must be positive")
    for start in range(0, len(lengths), window):
        order = sorted(range(start, min(start + window, len(lengths))), key=lengths.__getitem__)
        batch: list[int] = []
        tokens = 0
        for i in order:
            if batch and (tokens + lengths[i] > max_tokens or len(batch) == max_sentences):
                yield batch
                batch, tokens = [], 0
            batch.append(i)
            tokens += lengths[i]
        if batch:
            yield batch
