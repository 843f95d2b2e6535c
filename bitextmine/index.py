"""FAISS inner-product indexes over one language's embedding shards: choose, build, measure, save, load.

An index is trained on a random sample, populated shard block by shard block (memory bounded by the
block size plus the index itself), and checked against exact search on a sample of its own rows.
``WORK/index/L.faiss`` holds the index and ``WORK/index/L.json`` its `IndexInfo`.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from bitextmine.errors import BitextmineError
from bitextmine.fsutil import atomic_path, read_json, write_json
from bitextmine.store import ShardedVectors

# Up to FLAT_MAX vectors exact search is affordable: a full kNN of 200k x 384 float32 (300 MB) against
# itself is ~3e13 flops, minutes on a CPU and seconds on a GPU, with nothing to train. Up to IVF_FLAT_MAX
# the uncompressed vectors of an IVF-Flat index still fit in RAM (4M x 384 x 4 B = 6 GB); beyond that
# OPQ+PQ stores dim/8 bytes per vector (48 B instead of 1536 B at dim 384: 1e9 vectors in ~48 GB).
# That compression costs recall on low-contrast e5 neighbourhoods: on the 200k covariance-noise set of
# at default_nprobe, IVF2048,PQ48 found 0.19 of the en->de exact top-4 at any nprobe (0.63 after exact
# re-ranking of its top 64), where IVF2048,SQ8 (384 B) found 0.933 at 256 probes and 0.963 at 512.
FLAT_MAX = 200_000
IVF_FLAT_MAX = 4_000_000
MIN_LISTS, MAX_LISTS = 16, 262_144
POINTS_PER_LIST = 39  # FAISS warns below 39 training points per centroid
PQ_TRAIN_MIN = 256 * POINTS_PER_LIST  # 8-bit PQ codebooks have 256 centroids each
RECALL_TOLERANCE = 1e-6


@dataclass
class IndexInfo:
    lang: str
    factory: str
    dim: int
    count: int
    nprobe: int | None
    fingerprint: str
    train_rows: int
    recall_k: int
    recall_queries: int
    recall: float | None
    build_seconds: float
    gpu: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> IndexInfo:
        return cls(**data)


def choose_factory(n: int, dim: int) -> str:
    """The index for `n` vectors of `dim` dimensions: exact, IVF-Flat, or OPQ+IVF-PQ (see FLAT_MAX)."""
    if n <= FLAT_MAX:
        return "Flat"
    if n <= IVF_FLAT_MAX:
        return f"IVF{_lists(n, 4)},Flat"
    m = max(d for d in range(1, max(1, dim // 8) + 1) if dim % d == 0)
    # "np": no polysemous training, which only serves Hamming-filtered search and cost ~3 s per sub-quantizer
    return f"OPQ{m},IVF{_lists(n, 16)},PQ{m}np"


def _lists(n: int, per_sqrt: int) -> int:
    """A power of two near per_sqrt * sqrt(n), within [MIN_LISTS, MAX_LISTS] and n / POINTS_PER_LIST."""
    nlist = 2 ** round(math.log2(max(per_sqrt * math.sqrt(n), 1)))
    nlist = min(max(nlist, MIN_LISTS), MAX_LISTS)
    return min(nlist, _floor_pow2(max(n // POINTS_PER_LIST, 1)))


def _floor_pow2(x: int) -> int:
    return 1 << (x.bit_length() - 1)


def _nlist(factory: str) -> int | None:
    match = re.search(r"IVF(\d+)", factory)
    return int(match.group(1)) if match else None


# nlist / 8 (at least 64) is the fewest probes that kept recall@4 >= 0.95 for queries from the other
# language, as in mining. Measured 2026-11-22 with IVF-Flat over the demo's 384-d multilingual-e5-small
# embeddings (exact top-4 = truth, 1000 queries unless said otherwise):
# - real rows only (8400 de, 8400 en queries), IVF256: en->de 0.876 at 32 probes, 0.958 at 64;
#   de->en 0.870 and 0.953.
# - de grown by noisy copies (gaussian with the data's covariance, cosine 0.90 to the original), real en
#   queries: 200k rows, IVF2048: 0.895 at 128 probes, 0.955 at 256;
#   1M rows, IVF4096: 0.911 at 256, 0.969 at 512.
# - de grown with isotropic noise (cosine 0.97), 200k rows, IVF2048: 0.952 at 128, 0.990 at 256.
# Queries drawn from the indexed rows themselves (what build_index reports) need far fewer probes: 0.954 at
# 64 of 2048 lists where en queries got 0.792, so the reported recall is an upper bound for mining.
def default_nprobe(factory: str) -> int | None:
    """Lists probed per query: None for non-IVF indexes, else nlist / 8 and at least 64."""
    nlist = _nlist(factory)
    return None if nlist is None else min(nlist, max(64, nlist // 8))


def training_rows(factory: str, n: int) -> int:
    """Rows to sample when the index needs training: 64 per IVF list, at least 100k (and PQ's 9984)."""
    nlist = _nlist(factory) or 0
    return min(n, max(64 * nlist, 100_000, PQ_TRAIN_MIN))


def build_index(
    vectors: ShardedVectors,
    lang: str,
    *,
    factory: str | None = None,
    nprobe: int | None = None,
    gpu: bool = False,
    seed: int = 0,
    chunk_rows: int = 100_000,
    recall_k: int = 4,
    recall_queries: int = 1000,
    progress: Callable[[int], None] | None = None,
) -> tuple[faiss.Index, IndexInfo]:
    """Train on a sample, add every row chunk by chunk (progress(rows) after each), measure recall@k."""
    n, dim = len(vectors), vectors.dim
    factory = factory or choose_factory(n, dim)
    index = _new_index(factory, dim)
    if gpu:
        _check_gpu()
    rng = np.random.default_rng(seed)
    started = time.perf_counter()
    work = faiss.index_cpu_to_all_gpus(index) if gpu else index
    train_rows = 0 if work.is_trained else _train(work, vectors, factory, rng)
    _populate(work, vectors, chunk_rows, progress)
    index = faiss.index_gpu_to_cpu(work) if gpu else work
    build_seconds = time.perf_counter() - started
    if faiss.try_extract_index_ivf(index) is None:
        nprobe = None
    elif nprobe is None:
        nprobe = default_nprobe(factory)
    if nprobe is not None:
        set_nprobe(index, nprobe)
    queries = min(recall_queries, n)
    info = IndexInfo(
        lang=lang,
        factory=factory,
        dim=dim,
        count=n,
        nprobe=nprobe,
        fingerprint=vectors.model.fingerprint,
        train_rows=train_rows,
        recall_k=recall_k,
        recall_queries=queries,
        recall=_measure_recall(index, vectors, recall_k, queries, rng, chunk_rows),
        build_seconds=round(build_seconds, 3),
        gpu=gpu,
    )
    return index, info


def _populate(
    index: faiss.Index, vectors: ShardedVectors, chunk_rows: int, progress: Callable[[int], None] | None
) -> None:
    for _, block in vectors.blocks(chunk_rows):
        index.add(block)
        if progress:
            progress(len(block))


def _new_index(factory: str, dim: int) -> faiss.Index:
    try:
        return faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as exc:
        raise BitextmineError(f"invalid FAISS factory '{factory}': {_faiss_message(exc)}") from None


def _faiss_message(exc: Exception) -> str:
    """The first line of a FAISS error without its 'Error in <C++ signature> at <file>:<line>: ' prefix."""
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return re.sub(r"^Error in .*? at \S+:\d+: ", "", first)


def _check_gpu() -> None:
    if not hasattr(faiss, "index_gpu_to_cpu"):
        raise BitextmineError("cannot build on GPU: this FAISS build has no GPU support (install faiss-gpu)")
    if faiss.get_num_gpus() == 0:
        raise BitextmineError("cannot build on GPU: FAISS sees no GPU")


def _train(index: faiss.Index, vectors: ShardedVectors, factory: str, rng: np.random.Generator) -> int:
    rows = np.sort(rng.choice(len(vectors), size=training_rows(factory, len(vectors)), replace=False))
    try:
        index.train(vectors.take(rows))
    except RuntimeError as exc:
        raise BitextmineError(
            f"cannot train FAISS index '{factory}' on {len(rows):,} rows: {_faiss_message(exc)}"
        ) from None
    return len(rows)


def _measure_recall(
    index: faiss.Index,
    vectors: ShardedVectors,
    k: int,
    queries: int,
    rng: np.random.Generator,
    chunk_rows: int,
) -> float | None:
    """Share of the exact top-k of `queries` random rows that the index returns.

    A returned row counts when its exact cosine reaches the exact k-th best, so among tied rows
    (duplicate sentences) any one will do.
    """
    if isinstance(index, faiss.IndexFlat):
        return 1.0
    if queries == 0:
        return None
    k = min(k, len(vectors))
    rows = np.sort(rng.choice(len(vectors), size=queries, replace=False))
    x = vectors.take(rows)
    _, found = search(index, x, k)
    kth_best = _exact_search(x, vectors, k, chunk_rows)[:, -1]
    cos = np.full(found.shape, -np.inf, dtype=np.float32)
    valid = found >= 0
    cos[valid] = np.einsum("nd,nd->n", x[np.nonzero(valid)[0]], vectors.take(found[valid]))
    return float((cos >= kth_best[:, None] - RECALL_TOLERANCE).sum() / found.size)


def _exact_search(queries: np.ndarray, vectors: ShardedVectors, k: int, chunk_rows: int) -> np.ndarray:
    """Exact top-k similarities of `queries` over all rows, streamed block by block."""
    heap = faiss.ResultHeap(len(queries), k, keep_max=True)
    for start, block in vectors.blocks(chunk_rows):
        sims, ids = faiss.knn(queries, block, min(k, len(block)), metric=faiss.METRIC_INNER_PRODUCT)
        heap.add_result(sims, ids + start)
    heap.finalize()
    return heap.D


def set_nprobe(index: faiss.Index, nprobe: int) -> None:
    """Lists to probe per query, also inside an OPQ pre-transform; no-op for non-IVF indexes."""
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        ivf.nprobe = nprobe


def save_index(index: faiss.Index, info: IndexInfo, index_dir: Path) -> None:
    """Write ``LANG.faiss`` then ``LANG.json``, each atomically.

    The old json goes first, so a crash part way leaves no index rather than a mismatched pair.
    """
    index_dir = Path(index_dir)
    (index_dir / f"{info.lang}.json").unlink(missing_ok=True)
    with atomic_path(index_dir / f"{info.lang}.faiss") as tmp:
        faiss.write_index(index, str(tmp))
    write_json(index_dir / f"{info.lang}.json", info.to_json())


def load_index(
    index_dir: Path, lang: str, vectors: ShardedVectors, *, nprobe: int | None = None
) -> tuple[faiss.Index, IndexInfo]:
    """The saved index of `lang`, checked against the embeddings it must cover; `nprobe` overrides."""
    index_dir = Path(index_dir)
    index_path, info_path = index_dir / f"{lang}.faiss", index_dir / f"{lang}.json"
    if not (index_path.is_file() and info_path.is_file()):
        raise BitextmineError(f"no index for '{lang}' in {index_dir}: run `bitextmine index {lang}`")
    info = IndexInfo.from_json(read_json(info_path))
    if info.fingerprint != vectors.model.fingerprint or info.count != len(vectors):
        raise _stale(lang)
    index = faiss.read_index(str(index_path))
    if index.ntotal != len(vectors):
        raise _stale(lang)
    if nprobe is not None and info.nprobe is not None:
        info = replace(info, nprobe=nprobe)
    if info.nprobe is not None:
        set_nprobe(index, info.nprobe)
    return index, info


def _stale(lang: str) -> BitextmineError:
    return BitextmineError(
        f"index of '{lang}' is stale (built from other embeddings): rerun `bitextmine index {lang}`"
    )


def search(index: faiss.Index, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(sims float32, ids int64), each [len(queries), min(k, ntotal)], best first; ids -1 where none."""
    k = min(k, index.ntotal)
    if k == 0:
        return np.zeros((len(queries), 0), np.float32), np.zeros((len(queries), 0), np.int64)
    sims, ids = index.search(np.ascontiguousarray(queries, dtype=np.float32), k)
    return sims, ids
