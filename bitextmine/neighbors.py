"""Exact k-nearest-neighbour search by inner product (cosine for unit vectors) with FAISS."""

from __future__ import annotations

import faiss
import numpy as np


def exact_knn(queries: np.ndarray, base: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(similarities, ids), each [len(queries), min(k, len(base))], best first."""
    k = min(k, len(base))
    index = faiss.IndexFlatIP(base.shape[1])
    index.add(np.ascontiguousarray(base, dtype=np.float32))
    sims, ids = index.search(np.ascontiguousarray(queries, dtype=np.float32), k)
    return sims, ids
