"""Training an index: how many rows its training sample takes (held in memory, at most
TRAIN_SAMPLE_BYTES), the sample drawn and trained on (on the GPUs: search/faiss_gpu.py)."""

from __future__ import annotations

import re

import faiss
import numpy as np

from bitextmine.errors import BitextmineError
from bitextmine.search.factory import faiss_message, ivf_lists
from bitextmine.workspace.embeddings import ShardedVectors

POINTS_PER_LIST = 39  # FAISS warns below 39 training points per centroid
PQ_TRAIN_MIN = 256 * POINTS_PER_LIST  # 8-bit PQ codebooks have 256 centroids each
# k-means trained on few points per list leaves the lists unequal, and a query's scan grows with that
# imbalance (list_imbalance). 256 training rows a list is the most FAISS's k-means keeps (it subsamples
# above max_points_per_centroid), and left the lists more equal than 64 a list, for about twice the
# indexing time (examples/benchmarks/results/constants.md, on copies).
TRAIN_PER_LIST = 256
# The float32 training sample is held in RAM, and never exceeds this (2,796,202 rows at 384-d, 1,048,576
# at 1024-d). The library's own list count is lowered (a power of two) until the sample still gives
# MIN_TRAIN_PER_LIST rows a list: at most 32,768 lists at 384-d and 16,384 at 1024-d, whatever N. An
# explicit factory or --list-size trains on the capped sample, and is refused when that gives fewer than
# FAISS's POINTS_PER_LIST a list (`check_training_sample`).
TRAIN_SAMPLE_BYTES = 4 * 2**30
MIN_TRAIN_PER_LIST = 64


def sample_cap(dim: int) -> int:
    """Rows of `dim` float32 components that TRAIN_SAMPLE_BYTES holds."""
    return TRAIN_SAMPLE_BYTES // (4 * dim)


def training_rows(factory: str, n: int, dim: int) -> int:
    """Rows to sample when the index needs training: TRAIN_PER_LIST per IVF list, at least 100k or PQ's
    9984, at most n and `sample_cap(dim)`."""
    nlist = ivf_lists(factory) or 0
    return min(n, sample_cap(dim), max(nlist * TRAIN_PER_LIST, 100_000, PQ_TRAIN_MIN))


def check_training_sample(factory: str, n: int, dim: int) -> None:
    """Refuse, in one line, an IVF index whose capped training sample gives fewer than POINTS_PER_LIST
    rows a list although the vectors would give them (fewer vectors are FAISS's own error or warning),
    and an OPQ rotation trained on fewer rows than dimensions (FAISS crashes on 256 to dim - 1 rows)."""
    if re.match(r"OPQ\d", factory) and training_rows(factory, n, dim) < dim:
        raise BitextmineError(
            f"cannot train FAISS index '{factory}': its OPQ rotation needs at least {dim:,} training rows "
            f"(one a dimension), not {training_rows(factory, n, dim):,}; use a factory without OPQ"
        )
    nlist = ivf_lists(factory)
    if nlist is None or training_rows(factory, n, dim) >= min(n, nlist * POINTS_PER_LIST):
        return
    cap = sample_cap(dim)
    raise BitextmineError(
        f"cannot train FAISS index '{factory}': its {nlist:,} lists need {nlist * POINTS_PER_LIST:,} "
        f"training rows ({POINTS_PER_LIST} a list), more than the {cap:,} that the "
        f"{TRAIN_SAMPLE_BYTES / 2**30:g} GiB sample holds at {dim}-d: use at most "
        f"{cap // POINTS_PER_LIST:,} lists"
    )


def sample_and_train(
    index: faiss.Index, vectors: ShardedVectors, factory: str, rng: np.random.Generator
) -> int:
    """Train `index` on `training_rows` random rows of `vectors`; returns how many."""
    size = training_rows(factory, len(vectors), vectors.dim)
    rows = np.sort(rng.choice(len(vectors), size=size, replace=False))
    train_on(index, vectors.take(rows), factory)
    return len(rows)


def train_on(index: faiss.Index, sample: np.ndarray, factory: str) -> None:
    """Train `index` on `sample` (which a rotation may overwrite: see `_train_rotated`)."""
    try:
        typed = faiss.downcast_index(index)  # a view: `index` still owns the C++ object
        if isinstance(typed, faiss.IndexPreTransform) and not typed.is_trained:
            _train_rotated(typed, sample)
        else:
            index.train(sample)
    except RuntimeError as exc:
        raise BitextmineError(
            f"cannot train FAISS index '{factory}' on {len(sample):,} rows: {faiss_message(exc)}"
        ) from None


def _train_rotated(index: faiss.IndexPreTransform, sample: np.ndarray, chunk_rows: int = 100_000) -> None:
    """What IndexPreTransform.train does for one transform that keeps the dimension (OPQ), without its
    transformed copy of the sample: the sample is rotated in place, so training holds one sample (at most
    TRAIN_SAMPLE_BYTES) in memory, not two."""
    transform = faiss.downcast_VectorTransform(index.chain.at(0))
    if index.chain.size() != 1 or transform.d_in != transform.d_out:
        index.train(sample)
        return
    transform.train(sample)  # OPQ trains on a subsample of its own
    for first in range(0, len(sample), chunk_rows):
        sample[first : first + chunk_rows] = transform.apply(sample[first : first + chunk_rows])
    index.index.train(sample)
    index.is_trained = True
