"""Exact deduplication of sentences in bounded memory: 64-bit hashes in an open-addressing table."""

from __future__ import annotations

import hashlib

import numpy as np


class Deduplicator:
    """Exact set membership of sentences through 64-bit BLAKE2b hashes in an open-addressing table.

    Only hashes are stored (never the strings): a numpy uint64 table with linear probing that doubles
    when half full, so 16 to 32 bytes per unique sentence. 0 marks an empty slot; a hash equal to 0 is
    stored as 1. Two different sentences are taken as equal only on a 64-bit hash collision.
    """

    EMPTY = 0

    def __init__(self, capacity: int = 1 << 16) -> None:
        size = 1 << max(4, (max(capacity, 1) - 1).bit_length())
        self._set_table(np.zeros(size, dtype=np.uint64))
        self._count = 0

    def _set_table(self, table: np.ndarray) -> None:
        self._table = table
        self._slots = memoryview(table)  # indexing a memoryview gives Python ints, much faster than numpy
        self._mask = len(table) - 1

    @staticmethod
    def hash(text: str) -> int:
        return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")

    def seen(self, text: str) -> bool:
        """True if `text` was seen before; otherwise record it and return False."""
        return self.seen_hash(self.hash(text))

    def seen_hash(self, value: int) -> bool:
        """Like `seen`, for a precomputed 64-bit hash."""
        value = value or 1
        slots, mask = self._slots, self._mask
        i = value & mask
        while (current := slots[i]) != self.EMPTY:
            if current == value:
                return True
            i = (i + 1) & mask
        if (self._count + 1) * 2 > len(slots):
            self._grow()
            _insert_unique(self._table, np.array([value], dtype=np.uint64))
        else:
            slots[i] = value
        self._count += 1
        return False

    def _grow(self) -> None:
        old = self._table[self._table != self.EMPTY]
        table = np.zeros(len(self._table) * 2, dtype=np.uint64)
        _insert_unique(table, old)
        self._set_table(table)

    def __len__(self) -> int:
        return self._count

    @property
    def capacity(self) -> int:
        return len(self._table)

    @property
    def nbytes(self) -> int:
        return int(self._table.nbytes)


def _insert_unique(table: np.ndarray, values: np.ndarray) -> None:
    """Insert distinct non-zero values absent from `table`, with linear probing, vectorized."""
    mask = np.uint64(len(table) - 1)
    pos = values & mask
    while values.size:
        free = np.flatnonzero(table[pos] == 0)
        # Several values may aim at the same free slot: the first one takes it, the others probe on.
        _, first = np.unique(pos[free], return_index=True)
        winners = free[first]
        table[pos[winners]] = values[winners]
        rest = np.ones(values.size, dtype=bool)
        rest[winners] = False
        values = values[rest]
        pos = (pos[rest] + np.uint64(1)) & mask
