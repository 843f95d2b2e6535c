"""Indexes split by rows into shards that are populated, stored and searched one at a time.

When one language's index would not fit in the memory allowed (`--max-memory`), `index` trains a
single template on a sample, then populates one copy of it per row range (a job: in this
process, or on a cluster through the launcher) and saves each as ``L.PLAN.NNN.faiss``. Searching
loads one shard at a time and merges the per-shard top-k, so memory stays at the largest shard.
PLAN is a digest of what the shards depend on (the vectors' digest, rows, factory, ranges, seed):
a rerun keeps the shard files of the same plan, so an interrupted build resumes shard by shard.
An unsharded build goes the same way with parts of at most CHECKPOINT_ROWS rows (index_build.py), which
`merge_shards` then joins into one index.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np

from bitextmine.search.factory import add_vectors
from bitextmine.search.index_io import IndexCache, read_index, write_index
from bitextmine.search.ivf_scan import list_sizes, search
from bitextmine.search.knn import SearchShard, merge_top_k
from bitextmine.workspace.embeddings import EmbeddingStore

ID_BYTES = 8  # IVF lists store an int64 id per vector


def bytes_per_vector(factory: str, dim: int) -> int:
    """Memory one indexed vector takes: float32 for Flat, 1 byte a component for SQ8, m bytes for PQm."""
    pq = re.search(r"PQ(\d+)", factory)
    ivf = ID_BYTES if "IVF" in factory else 0
    if pq:
        return int(pq.group(1)) + ivf
    if "SQ8" in factory:
        return dim + ivf
    if "SQfp16" in factory:
        return 2 * dim + ivf
    return 4 * dim + ivf


def plan_ranges(n: int, factory: str, dim: int, max_bytes: float | None) -> list[tuple[int, int]]:
    """Row ranges of (nearly) equal size whose indexes each fit in `max_bytes` (None: one range)."""
    if not max_bytes:
        return [(0, n)]
    return even_ranges(n, math.ceil(n * bytes_per_vector(factory, dim) / max_bytes))


def even_ranges(n: int, count: int) -> list[tuple[int, int]]:
    """`count` consecutive row ranges of (nearly) equal size covering [0, n); one where n is 0."""
    if n == 0:
        return [(0, 0)]
    cuts = np.linspace(0, n, max(1, count) + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in itertools.pairwise(cuts)]


def plan_id(vectors: str, n: int, factory: str, ranges: list[tuple[int, int]], seed: int) -> str:
    """What the shard files depend on: the indexed vectors (`ShardedVectors.digest`) and how."""
    key = json.dumps([vectors, n, factory, ranges, seed])
    return hashlib.sha256(key.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class ShardFile:
    file: str  # name in the index dir
    start: int
    stop: int


def populate_shard(
    template: Path,
    emb_dir: Path,
    lang: str,
    start: int,
    stop: int,
    out: Path,
    progress: Callable[[int], None] | None = None,
    chunk_rows: int = 100_000,
) -> int:
    """Job: add rows [start, stop) of the language's embeddings to a copy of the trained template and
    save it atomically as `out`; `progress(rows)` after each chunk. Returns the rows added."""
    index = read_index(template)
    vectors = EmbeddingStore(emb_dir, lang).vectors()
    for first in range(start, stop, chunk_rows):
        block = vectors.take(np.arange(first, min(first + chunk_rows, stop)))
        add_vectors(index, block, str(template))
        if progress:
            progress(len(block))
    write_index(index, out)
    return stop - start


def merge_shards(index_dir: Path, shards: list[ShardFile]) -> faiss.Index:
    """One index holding the shards' rows in order, as if they had been added to one copy of the template:
    each shard is read, merged and freed in turn (memory: the merged index plus one shard)."""
    merged = read_index(Path(index_dir) / shards[0].file)
    ivf = faiss.try_extract_index_ivf(merged) is not None  # IVF lists keep ids; flat codes are numbered
    for shard in shards[1:]:
        merged.merge_from(read_index(Path(index_dir) / shard.file), shard.start if ivf else 0)
    return merged


class ShardedIndex:
    """Row-range shards on disk searched one after another; the last one used stays loaded in `indexes`
    (default: a cache of its own, freed with it)."""

    def __init__(
        self,
        index_dir: Path,
        shards: list[ShardFile],
        template: faiss.Index,
        indexes: IndexCache | None = None,
    ) -> None:
        self.index_dir = Path(index_dir)
        self.shards = shards
        self.template = template  # trained, empty: what nlist and nprobe are read from
        self.nprobe: int | None = None
        self.max_codes = 0  # rows a query scans at most in each shard (0: no cap)
        self.ntotal = shards[-1].stop if shards else 0
        self._list_sizes: dict[str, np.ndarray] = {}  # per shard file, noted as shards load
        self._indexes = IndexCache() if indexes is None else indexes

    def load(self, shard: ShardFile) -> faiss.Index:
        index = self._indexes.read(self.index_dir / shard.file)
        ivf = faiss.try_extract_index_ivf(index)
        if ivf is not None:
            if shard.file not in self._list_sizes:
                self._list_sizes[shard.file] = list_sizes(ivf)
            if self.nprobe is not None:
                ivf.nprobe = self.nprobe
            ivf.max_codes = self.max_codes
        return index

    def list_sizes(self) -> np.ndarray | None:
        """Vectors per inverted list over all shards (None: not IVF); shards not searched yet are loaded."""
        if faiss.try_extract_index_ivf(self.template) is None:
            return None
        for shard in self.shards:
            if shard.file not in self._list_sizes:
                self.load(shard)
        return np.sum([self._list_sizes[s.file] for s in self.shards], axis=0)

    def search_shards(self) -> list[SearchShard]:
        """The shards as `find_neighbours` takes them: each searched in turn, ids offset to global rows."""
        return [
            SearchShard(lambda q, n, shard=shard: search(self.load(shard), q, n), offset=shard.start)
            for shard in self.shards
        ]

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """faiss.Index.search over all shards: the k best inner products, merged (ids -1 where none)."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        best = (np.full((len(queries), 0), np.nan, np.float32), np.full((len(queries), 0), -1, np.int64))
        for shard in self.search_shards():
            sims, ids = shard.search(queries, k)
            found = ids >= 0
            hits = (np.where(found, sims, np.nan), np.where(found, ids + shard.offset, -1))
            best = merge_top_k(best, hits, k)
        sims, ids = best
        return np.nan_to_num(sims, nan=-np.inf), ids
