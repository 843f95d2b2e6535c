"""Token-budget batches from length-sorted windows.

Sentences are taken in windows of ``window`` consecutive inputs, sorted by length inside each window
and cut into batches whose token count stays within ``max_tokens``. Sorting only inside a window
keeps memory and latency bounded on a stream while most of the length-sorting benefit remains; a
sentence longer than the budget gets a batch of its own.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

# Measured on a 2-core AVX-512 CPU with e5-small: 2048-4096 tokens keep activations in cache, 8192 is
# about 10% slower. GPUs want more (--max-tokens).
DEFAULT_MAX_TOKENS = 4096


def token_budget_batches(lengths: Sequence[int], max_tokens: int, window: int = 4096) -> Iterator[list[int]]:
    """Yield lists of input positions; every position appears exactly once."""
    if max_tokens < 1:
        raise ValueError("max_tokens must be positive")
    for start in range(0, len(lengths), window):
        order = sorted(range(start, min(start + window, len(lengths))), key=lengths.__getitem__)
        batch: list[int] = []
        tokens = 0
        for i in order:
            if batch and tokens + lengths[i] > max_tokens:
                yield batch
                batch, tokens = [], 0
            batch.append(i)
            tokens += lengths[i]
        if batch:
            yield batch
