"""FAISS inner-product indexes over one language's embedding shards: choose, build, measure, save, load.

An index is trained on a random sample, populated shard block by shard block (memory bounded by the
block size plus the index itself), and checked against exact search on a sample of queries: the other
language's vectors when given (what mining searches with), which also tune nprobe, else its own rows.
``WORK/index/L.faiss`` holds the index and ``WORK/index/L.json`` its `IndexInfo`.

`build_index` builds in memory in one pass. The index step builds through files so that a killed build
resumes: `start_sharded_build` saves the trained template, one job a row range populates a copy of it
(``L.PLAN.NNN.faiss``), and `finish_sharded_build` searches those shards as they are (`--max-memory`)
while `finish_merged_build` merges them, in row order, into the one index an unsharded build gives.
"""

from __future__ import annotations

import glob
import hashlib
import math
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from bitextmine.errors import BitextmineError
from bitextmine.files import json_record, read_json, remove_temporaries, write_json
from bitextmine.search.cost import EXACT_BUDGET_SECONDS, ExactCost
from bitextmine.search.ivf_scan import search
from bitextmine.search.knn import rerank
from bitextmine.search.sharded import (
    ShardedIndex,
    ShardFile,
    even_ranges,
    list_sizes,
    merge_shards,
    plan_id,
    read_index,
    read_index_cached,
    write_index,
)
from bitextmine.workspace.embeddings import ShardedVectors

# Up to FLAT_MAX vectors exact search is affordable: a full kNN of 200k x 384 float32 (300 MB) against
# itself is ~3e13 flops, minutes on a CPU and seconds on a GPU, with nothing to train. Up to IVF_FLAT_MAX
# the uncompressed vectors of an IVF-Flat index still fit in RAM (4M x 384 x 4 B = 6 GB); beyond that
# OPQ+PQ stores dim/8 bytes per vector (48 B instead of 1536 B at dim 384: 1e9 vectors in ~48 GB).
# That compression costs recall on low-contrast e5 neighbourhoods: on the 200k covariance-noise set of
# at default_nprobe, IVF2048,PQ48 found 0.19 of the en->de exact top-4 at any nprobe (0.63 after exact
# re-ranking of its top 64), where IVF2048,SQ8 (384 B) found 0.933 at 256 probes and 0.963 at 512.
FLAT_MAX = 200_000
EXACT = "Flat"  # searched by matrix products over the embedding shards (search/gemm.py): no FAISS file
IVF_FLAT_MAX = 4_000_000
MIN_LISTS, MAX_LISTS = 16, 262_144
POINTS_PER_LIST = 39  # FAISS warns below 39 training points per centroid
# `--list-size` indexes find a query's lists by a flat (exact, BLAS) search of the centroids up to this
# many lists, an HNSW graph above: on 2 cores, for blocks of 65,536 queries and nprobe 8, the flat
# search took 10.2 us a query over 820 centroids and 22.1 over 2,732, HNSW32 at FAISS's default efSearch
# 23.8 and 29.4 while missing 1.1% and 2.7% of the nearest lists (bench_ivf.py coarse-search).
# The library's own list count (no --list-size) takes the HNSW graph above this too.
FLAT_QUANTIZER_MAX_LISTS = 4096
PQ_TRAIN_MIN = 256 * POINTS_PER_LIST  # 8-bit PQ codebooks have 256 centroids each
# k-means trained on few points per list leaves the lists unequal, and a query's scan grows with that
# imbalance (list_imbalance). 256 training rows a list (the most FAISS's k-means keeps: it subsamples
# above max_points_per_centroid) gave imbalance 1.25 at 300k and 1.41 at 1M on copies of 72,401 e5
# sentences with 366 vectors a list (`bench_ivf.py scale`, results/bench_scale.json); the earlier rule,
# 64 a list, left them less equal (1.37 and 1.68), at about half the indexing time at 1M.
TRAIN_PER_LIST = 256
# The float32 training sample is held in RAM, and never exceeds this (2,796,202 rows at 384-d, 1,048,576
# at 1024-d). The library's own list count is lowered (a power of two) until the sample still gives
# MIN_TRAIN_PER_LIST rows a list: at most 32,768 lists at 384-d and 16,384 at 1024-d, whatever N. An
# explicit factory or --list-size trains on the capped sample, and is refused when that gives fewer than
# FAISS's POINTS_PER_LIST a list (`check_training_sample`).
TRAIN_SAMPLE_BYTES = 4 * 2**30
MIN_TRAIN_PER_LIST = 64
# The index step populates an unsharded index in parts of this many rows, each saved as a file that a
# rerun after a kill keeps (`checkpoint_ranges`): at most one part's work is lost (on 2 cores, roughly a
# minute of populating at 1M rows), and the parts take the final index's size again on disk until merged.
CHECKPOINT_ROWS = 1_000_000
RECALL_TOLERANCE = 1e-6
TARGET_RECALL = 0.95
RERANK_FETCH = 64  # PQ codes rank the top 4 poorly (bench_mine: recall 0.41, 1.0 after re-ranking 64)


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
    fetch: int | None = None  # hits fetched per query and re-ranked by exact cosine (None: k)
    recall_source: str = "self"  # the language whose vectors measured recall, or "self"
    search_ms_per_1000: float | None = None  # at nprobe and fetch, on the recall queries
    exact_ms_per_1000: float | None = None  # exact search of the same queries
    note: str = ""
    plan: str = ""  # sharded indexes: the digest in their file names (see search/sharded.py)
    shards: list[dict[str, Any]] = field(default_factory=list)  # [{file, start, stop}]; [] = LANG.faiss
    vectors: str = ""  # ShardedVectors.digest() of the embeddings indexed
    imbalance: float | None = None  # IVF lists: see list_imbalance
    # sha256 of each file, recorded by save_index and checked before FAISS reads them (FAISS trusts the
    # sizes and offsets in a file: damaged ones can crash it or silently return wrong neighbours). What
    # the files hold, not what the index is, so not compared.
    checksums: dict[str, str] = field(default_factory=dict, compare=False)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def nlist(self) -> int | None:
        """Inverted lists of the index (None: not IVF)."""
        return _nlist(self.factory)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> IndexInfo:
        return json_record(cls, data)


def choose_factory(
    n: int,
    dim: int,
    list_size: int | None = None,
    exact_seconds: float | None = None,
    budget: float = EXACT_BUDGET_SECONDS,
) -> str:
    """The index for `n` vectors of `dim` dimensions: exact, IVF-Flat, or OPQ+IVF-PQ (see FLAT_MAX).

    Exact where mining exactly takes at most `budget` seconds by the measured `exact_seconds`
    (search/cost.py); without a measurement, up to FLAT_MAX vectors.

    With `list_size`, always IVF: n / list_size lists, so that the lists a query scans at a given nprobe
    keep their length whatever n (with the default list count, which grows like sqrt(n), the list
    length grows like sqrt(n) too), behind an HNSW coarse quantizer above FLAT_QUANTIZER_MAX_LISTS.
    """
    if list_size is not None:
        nlist = max(1, min(round(n / list_size), n // POINTS_PER_LIST))
        return _with_storage(n, dim, _coarse(nlist))
    if (n <= FLAT_MAX) if exact_seconds is None else (exact_seconds <= budget):
        return EXACT
    nlist = min(_lists(n, 4 if n <= IVF_FLAT_MAX else 16), _affordable_lists(dim))
    return _with_storage(n, dim, _coarse(nlist))


def _coarse(nlist: int) -> str:
    """IVF with `nlist` lists, found by an HNSW graph above FLAT_QUANTIZER_MAX_LISTS."""
    return f"IVF{nlist}" + ("_HNSW32" if nlist > FLAT_QUANTIZER_MAX_LISTS else "")


def _affordable_lists(dim: int) -> int:
    """The most lists (a power of two) whose sample of MIN_TRAIN_PER_LIST rows each fits the cap."""
    return _floor_pow2(max(sample_cap(dim) // MIN_TRAIN_PER_LIST, 1))


def _with_storage(n: int, dim: int, ivf: str) -> str:
    """Full vectors in the lists up to IVF_FLAT_MAX, else OPQ-rotated PQ codes of dim / 8 bytes."""
    if n <= IVF_FLAT_MAX:
        return f"{ivf},Flat"
    m = max(d for d in range(1, max(1, dim // 8) + 1) if dim % d == 0)
    # "np": no polysemous training, which only serves Hamming-filtered search and cost ~3 s per sub-quantizer
    return f"OPQ{m},{ivf},PQ{m}np"


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
    """Lists probed when no other-language queries tune it: nlist / 8, at least 64 (None: not IVF)."""
    nlist = _nlist(factory)
    return None if nlist is None else min(nlist, max(64, nlist // 8))


def list_imbalance(index: faiss.Index | ShardedIndex) -> float | None:
    """nlist * sum(size^2) / n^2 over the inverted lists (FAISS's imbalance factor; None: not IVF).

    A query probing lists picked as the rows are spread scans on average this many times n * nprobe / nlist
    rows, so search time grows with it: 1 for equal lists, far more when a few lists hold most rows."""
    if isinstance(index, ShardedIndex):
        sizes = index.list_sizes()
    else:
        ivf = faiss.try_extract_index_ivf(index)
        sizes = None if ivf is None else list_sizes(ivf)
    if sizes is None or sizes.sum() == 0:
        return None
    return round(float(len(sizes) * np.square(sizes, dtype=np.float64).sum() / float(sizes.sum()) ** 2), 3)


def sample_cap(dim: int) -> int:
    """Rows of `dim` float32 components that TRAIN_SAMPLE_BYTES holds."""
    return TRAIN_SAMPLE_BYTES // (4 * dim)


def training_rows(factory: str, n: int, dim: int) -> int:
    """Rows to sample when the index needs training: TRAIN_PER_LIST per IVF list, at least 100k or PQ's
    9984, at most n and `sample_cap(dim)`."""
    nlist = _nlist(factory) or 0
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
    nlist = _nlist(factory)
    if nlist is None or training_rows(factory, n, dim) >= min(n, nlist * POINTS_PER_LIST):
        return
    cap = sample_cap(dim)
    raise BitextmineError(
        f"cannot train FAISS index '{factory}': its {nlist:,} lists need {nlist * POINTS_PER_LIST:,} "
        f"training rows ({POINTS_PER_LIST} a list), more than the {cap:,} that the "
        f"{TRAIN_SAMPLE_BYTES / 2**30:g} GiB sample holds at {dim}-d: use at most "
        f"{cap // POINTS_PER_LIST:,} lists"
    )


@dataclass
class RecallProbe:
    """Queries and their exact k-th best cosine over the indexed rows: what recall is measured with."""

    queries: np.ndarray
    source: str  # "self" (rows of the indexed set) or the language the queries come from
    kth_best: np.ndarray
    exact_seconds: float  # exact search of the queries (similarity computation only)


def recall_probe(
    vectors: ShardedVectors, queries: np.ndarray, source: str, k: int, chunk_rows: int = 100_000
) -> RecallProbe:
    """Exact top-k of `queries` over all rows, streamed block by block, kept as their k-th best cosine."""
    k = min(k, len(vectors))
    heap = faiss.ResultHeap(len(queries), k, keep_max=True)
    seconds = 0.0
    for start, block in vectors.blocks(chunk_rows):
        started = time.perf_counter()
        sims, ids = faiss.knn(queries, block, min(k, len(block)), metric=faiss.METRIC_INNER_PRODUCT)
        seconds += time.perf_counter() - started
        heap.add_result(sims, ids + start)
    heap.finalize()
    return RecallProbe(queries, source, heap.D[:, -1].copy(), seconds)


@dataclass(frozen=True)
class Tuning:
    """How a built index is measured and tuned (see `build_index`)."""

    nprobe: int | None = None
    fetch: int | None = None
    queries: tuple[str, np.ndarray] | None = None
    target_recall: float | None = None
    recall_k: int = 4
    recall_queries: int = 1000


def build_index(
    vectors: ShardedVectors,
    lang: str,
    *,
    factory: str | None = None,
    gpu: bool = False,
    seed: int = 0,
    chunk_rows: int = 100_000,
    progress: Callable[[int], None] | None = None,
    auto: bool = False,
    **tuning: Any,
) -> tuple[faiss.Index, IndexInfo]:
    """Train on a sample, add every row chunk by chunk (progress(rows) after each), measure recall@k.

    `tuning` holds the fields of `Tuning`. Its `queries` (language, vectors) are the other language's
    sentences, as mining will search; then an IVF index without a given nprobe gets the fewest probes
    reaching `target_recall` (default TARGET_RECALL) on them. Without them, recall is measured on the
    index's own rows (optimistic) and nprobe follows `default_nprobe`.
    An automatically chosen IVF-Flat that searches no faster than exact search is replaced by Flat.
    """
    n, dim = len(vectors), vectors.dim
    auto = auto or factory is None
    factory = factory or choose_factory(n, dim)
    check_training_sample(factory, n, dim)
    rng = np.random.default_rng(seed)
    started = time.perf_counter()
    index, train_rows = _build(factory, dim, vectors, gpu, rng, chunk_rows, progress)
    trained = _Trained(vectors, lang, factory, train_rows, rng, started)
    return _finish(index, trained, Tuning(**tuning), auto=auto, gpu=gpu, chunk_rows=chunk_rows)


@dataclass
class _Trained:
    """What measuring and describing a populated index needs from its build."""

    vectors: ShardedVectors
    lang: str
    factory: str
    train_rows: int
    rng: np.random.Generator  # carries on from the training sample to the recall queries
    started: float


def _finish(
    index: faiss.Index | ShardedIndex,
    built: _Trained,
    tuning: Tuning,
    *,
    auto: bool = False,
    gpu: bool = False,
    chunk_rows: int = 100_000,
) -> tuple[faiss.Index | ShardedIndex, IndexInfo]:
    """Measure recall, tune nprobe, and with `auto` give an IVF-Flat slower than exact search way to Flat."""
    vectors, factory, k = built.vectors, built.factory, tuning.recall_k
    build_seconds = time.perf_counter() - built.started
    target = TARGET_RECALL if tuning.target_recall is None else tuning.target_recall
    probe = _probe(vectors, tuning.queries, k, tuning.recall_queries, built.rng, chunk_rows)
    plain = index.template if isinstance(index, ShardedIndex) else index
    fetch = tuning.fetch or default_fetch(plain, k)
    nprobe, note = _choose_nprobe(index, factory, tuning.nprobe, probe, vectors, k, fetch, target)
    measured = _measure(index, probe, vectors, k, fetch) if probe else None
    train_rows = built.train_rows
    if auto and not gpu and measured and _is_ivf_flat(plain) and measured[1] >= probe.exact_seconds:
        note = (
            f"{factory} at nprobe {nprobe} searched {measured[1] / max(probe.exact_seconds, 1e-9):.1f}x "
            f"slower than exact search for recall@{k} {measured[0]:.3f}: built Flat instead"
        )
        factory, nprobe, train_rows, fetch = "Flat", None, 0, k
        index, _ = _build(factory, vectors.dim, vectors, False, built.rng, chunk_rows, None)
        measured = (1.0, probe.exact_seconds)
    info = _make_info(built.lang, factory, vectors, nprobe, train_rows, k, probe, measured, build_seconds)
    return index, replace(info, gpu=gpu, fetch=fetch, note=note, imbalance=list_imbalance(index))


def _make_info(
    lang: str,
    factory: str,
    vectors: ShardedVectors,
    nprobe: int | None,
    train_rows: int,
    recall_k: int,
    probe: RecallProbe | None,
    measured: tuple[float, float] | None,
    build_seconds: float,
) -> IndexInfo:
    per_1000 = (lambda seconds: round(1000 * seconds / len(probe.queries) * 1000, 1)) if probe else None
    return IndexInfo(
        lang=lang,
        factory=factory,
        dim=vectors.dim,
        count=len(vectors),
        nprobe=nprobe,
        fingerprint=vectors.model.fingerprint,
        train_rows=train_rows,
        recall_k=recall_k,
        recall_queries=len(probe.queries) if probe else 0,
        recall=measured[0] if measured else None,
        build_seconds=round(build_seconds, 3),
        gpu=False,
        vectors=vectors.digest(),
        recall_source=probe.source if probe else "self",
        search_ms_per_1000=per_1000(measured[1]) if measured else None,
        exact_ms_per_1000=per_1000(probe.exact_seconds) if probe else None,
    )


@dataclass
class ShardedBuild(_Trained):
    """An index under construction in files: the trained template, saved, and the row-range files to
    populate from it (`populate_shard`, one job each); `finish_sharded_build` searches them as shards,
    `finish_merged_build` merges them into one index."""

    index_dir: Path
    plan: str
    shards: list[ShardFile]
    template: faiss.Index
    auto: bool  # the factory was the library's choice

    @property
    def template_path(self) -> Path:
        return self.index_dir / f"{self.lang}.{self.plan}.template.faiss"


def start_sharded_build(
    vectors: ShardedVectors,
    lang: str,
    index_dir: Path,
    ranges: list[tuple[int, int]],
    *,
    factory: str | None = None,
    seed: int = 0,
    gpu: bool = False,
    auto: bool = False,
) -> ShardedBuild:
    """Train one template (on the GPUs with `gpu`; read back if an earlier run of the same plan saved it)
    for shards over `ranges` of rows, to be written to `index_dir`. `auto`: `factory` is the library's
    choice (so is no factory), which `_finish` may replace by exact search."""
    if gpu:
        _check_gpu()
    n, dim = len(vectors), vectors.dim
    auto = auto or factory is None
    factory = factory or choose_factory(n, dim)
    check_training_sample(factory, n, dim)
    rng = np.random.default_rng(seed)
    started = time.perf_counter()
    plan = plan_id(vectors.digest(), n, factory, ranges, seed)
    template_path = Path(index_dir) / f"{lang}.{plan}.template.faiss"
    template, train_rows = _template(template_path, factory, dim, vectors, rng, gpu)
    shards = [ShardFile(f"{lang}.{plan}.{i:03d}.faiss", a, b) for i, (a, b) in enumerate(ranges)]
    trained = _Trained(vectors, lang, factory, train_rows, rng, started)
    return ShardedBuild(
        **vars(trained), index_dir=Path(index_dir), plan=plan, shards=shards, template=template, auto=auto
    )


def checkpoint_ranges(n: int, factory: str, dim: int, rows: int = CHECKPOINT_ROWS) -> list[tuple[int, int]]:
    """The parts, of at most `rows` rows, that the index step populates an unsharded index in: one part
    where FAISS cannot merge such indexes (HNSW, refined, ID-mapped)."""
    return even_ranges(n, math.ceil(n / rows) if _mergeable(_new_index(factory, dim)) else 1)


def _mergeable(index: faiss.Index) -> bool:
    """Whether FAISS merges two copies of `index` populated with different rows (`merge_shards`)."""
    typed = faiss.downcast_index(index)  # a view: `index` still owns the C++ object
    if isinstance(typed, faiss.IndexPreTransform):
        return _mergeable(typed.index)
    return isinstance(typed, faiss.IndexIVF | faiss.IndexFlatCodes)


def finish_sharded_build(build: ShardedBuild, **tuning: Any) -> tuple[ShardedIndex, IndexInfo]:
    """Once every shard is populated: measure recall and tune nprobe (`Tuning`) as `build_index` does."""
    index = ShardedIndex(build.index_dir, build.shards, build.template)
    index, info = _finish(index, build, Tuning(**tuning))
    return index, replace(info, plan=build.plan, shards=[asdict(s) for s in build.shards])


def finish_merged_build(build: ShardedBuild, **tuning: Any) -> tuple[faiss.Index, IndexInfo]:
    """Once every part is populated: their merge, measured and tuned (`Tuning`) as `build_index` does;
    saved by `save_index` as one ``L.faiss``, which removes the parts and the template."""
    index = merge_shards(build.index_dir, build.shards)
    return _finish(index, build, Tuning(**tuning), auto=build.auto)


def _template(
    path: Path, factory: str, dim: int, vectors: ShardedVectors, rng: np.random.Generator, gpu: bool
) -> tuple[faiss.Index, int]:
    """The trained empty index of a sharded build, read back if an earlier run of the plan saved it."""
    template = _new_index(factory, dim)
    rows = 0 if template.is_trained else training_rows(factory, len(vectors), dim)
    sample = np.sort(rng.choice(len(vectors), size=rows, replace=False)) if rows else None
    if path.is_file():
        return read_index(path), rows
    if sample is not None:
        work, done = _on_device(template, gpu)
        _train_on(work, vectors.take(sample), factory)
        template = done()
    write_index(template, path)
    return template, rows


def default_fetch(index: faiss.Index, k: int) -> int:
    """k where the index keeps the vectors (Flat, IVF-Flat), else RERANK_FETCH for exact re-ranking."""
    return k if isinstance(index, faiss.IndexFlat) or _is_ivf_flat(index) else max(k, RERANK_FETCH)


def _is_ivf_flat(index: faiss.Index) -> bool:
    ivf = faiss.try_extract_index_ivf(index)
    return ivf is not None and isinstance(faiss.downcast_index(ivf), faiss.IndexIVFFlat)


def _build(
    factory: str,
    dim: int,
    vectors: ShardedVectors,
    gpu: bool,
    rng: np.random.Generator,
    chunk_rows: int,
    progress: Callable[[int], None] | None,
) -> tuple[faiss.Index, int]:
    """The populated index and the number of rows it was trained on."""
    index = _new_index(factory, dim)
    if gpu:
        _check_gpu()
    work, done = _on_device(index, gpu)
    train_rows = 0 if work.is_trained else _train(work, vectors, factory, rng)
    _populate(work, vectors, chunk_rows, progress)
    return done(), train_rows


def _on_device(index: faiss.Index, gpu: bool) -> tuple[faiss.Index, Callable[[], faiss.Index]]:
    """(what to train and fill, a function returning the CPU index once done). With `gpu`: a GPU clone,
    unless the IVF coarse quantizer is not flat (FAISS has no GPU HNSW); then the CPU index itself,
    its k-means assigning on the GPUs."""
    if not gpu:
        return index, lambda: index
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is None or isinstance(faiss.downcast_index(ivf.quantizer), faiss.IndexFlat):
        work = faiss.index_cpu_to_all_gpus(index)
        return work, lambda: faiss.index_gpu_to_cpu(work)
    assigner = faiss.index_cpu_to_all_gpus(faiss.IndexFlat(ivf.d, ivf.metric_type))
    ivf.clustering_index = assigner  # FAISS does not own it: `done` keeps it alive

    def done() -> faiss.Index:
        ivf.clustering_index = None
        assigner.reset()  # frees its centroids on the GPUs
        return index

    return index, done


def _probe(
    vectors: ShardedVectors,
    queries: tuple[str, np.ndarray] | None,
    k: int,
    count: int,
    rng: np.random.Generator,
    chunk_rows: int,
) -> RecallProbe | None:
    if queries is None:
        count = min(count, len(vectors))
        source, x = "self", vectors.take(np.sort(rng.choice(len(vectors), size=count, replace=False)))
    else:
        source, x = queries
        x = x[np.sort(rng.choice(len(x), size=min(count, len(x)), replace=False))]
    if len(x) == 0 or len(vectors) == 0:
        return None
    return recall_probe(vectors, np.ascontiguousarray(x, dtype=np.float32), source, k, chunk_rows)


def _choose_nprobe(
    index: faiss.Index,
    factory: str,
    nprobe: int | None,
    probe: RecallProbe | None,
    vectors: ShardedVectors,
    k: int,
    fetch: int,
    target: float,
) -> tuple[int | None, str]:
    """(nprobe, note): the given one, the fewest reaching `target` on other-language queries, or the rule."""
    ivf = _ivf(index)
    if ivf is None:
        return None, ""
    if nprobe is None and probe is not None and probe.source != "self":
        for nprobe in _ladder(ivf.nlist):
            set_nprobe(index, nprobe)
            if _measure(index, probe, vectors, k, fetch)[0] >= target:
                return nprobe, ""
        return nprobe, f"recall@{k} stays below {target} even when probing all {ivf.nlist} lists"
    nprobe = nprobe or default_nprobe(factory)
    set_nprobe(index, nprobe)
    return nprobe, ""


def _ladder(nlist: int) -> list[int]:
    """Powers of two from 1 up to nlist, and nlist itself."""
    return sorted({1 << i for i in range(nlist.bit_length()) if 1 << i <= nlist} | {nlist})


def _measure(
    index: faiss.Index, probe: RecallProbe, vectors: ShardedVectors, k: int, fetch: int
) -> tuple[float, float]:
    """(recall@k, search seconds): the share of hits, after fetching `fetch` and re-ranking exactly, whose
    exact cosine reaches the exact k-th best, so among tied rows (duplicate sentences) any one will do."""
    started = time.perf_counter()
    _, found = search(index, probe.queries, max(k, fetch))
    seconds = time.perf_counter() - started
    cos, _ = rerank(probe.queries, found, vectors.take, min(k, len(vectors)))
    hits = np.nan_to_num(cos, nan=-np.inf) >= probe.kth_best[:, None] - RECALL_TOLERANCE
    return float(hits.sum() / cos.size), seconds


def _populate(
    index: faiss.Index, vectors: ShardedVectors, chunk_rows: int, progress: Callable[[int], None] | None
) -> None:
    for _, block in vectors.blocks(chunk_rows):
        index.add(block)
        if progress:
            progress(len(block))


def _new_index(factory: str, dim: int) -> faiss.Index:
    _check_sizes(factory)
    try:
        return faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as exc:
        raise BitextmineError(f"invalid FAISS factory '{factory}': {_faiss_message(exc)}") from None


def _check_sizes(factory: str) -> None:
    """Refuse the sizes that FAISS (1.15) accepts in a factory string and then aborts or crashes the
    process on, instead of raising: a 0 anywhere (HNSW0, IVF0, PQ16x0, RR0) and an HNSW graph of 1 link."""
    if re.search(r"(?<!\d)0+(?!\d)", factory):
        raise BitextmineError(f"invalid FAISS factory '{factory}': every size in it must be at least 1")
    if any(int(links) < 2 for links in re.findall(r"HNSW(\d+)", factory)):
        raise BitextmineError(f"invalid FAISS factory '{factory}': an HNSW graph needs at least 2 links")


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
    size = training_rows(factory, len(vectors), vectors.dim)
    rows = np.sort(rng.choice(len(vectors), size=size, replace=False))
    _train_on(index, vectors.take(rows), factory)
    return len(rows)


def _train_on(index: faiss.Index, sample: np.ndarray, factory: str) -> None:
    """Train `index` on `sample` (which a rotation may overwrite: see `_train_rotated`)."""
    try:
        typed = faiss.downcast_index(index)  # a view: `index` still owns the C++ object
        if isinstance(typed, faiss.IndexPreTransform) and not typed.is_trained:
            _train_rotated(typed, sample)
        else:
            index.train(sample)
    except RuntimeError as exc:
        raise BitextmineError(
            f"cannot train FAISS index '{factory}' on {len(sample):,} rows: {_faiss_message(exc)}"
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


def set_nprobe(index: faiss.Index | ShardedIndex, nprobe: int) -> None:
    """Lists to probe per query, also inside an OPQ pre-transform; no-op for non-IVF indexes."""
    _set_search_parameter(index, "nprobe", nprobe)


def set_max_codes(index: faiss.Index | ShardedIndex, max_codes: int) -> None:
    """Rows a query scans at most over its probed lists (FAISS's IndexIVF.max_codes; 0: no cap), in each
    shard of a sharded index; no-op for non-IVF indexes, which scan every row."""
    _set_search_parameter(index, "max_codes", max_codes)


def _set_search_parameter(index: faiss.Index | ShardedIndex, name: str, value: int) -> None:
    target = index if isinstance(index, ShardedIndex) else faiss.try_extract_index_ivf(index)
    if target is not None:
        setattr(target, name, value)


def _ivf(index: faiss.Index | ShardedIndex) -> faiss.IndexIVF | None:
    return faiss.try_extract_index_ivf(index.template if isinstance(index, ShardedIndex) else index)


def exact_index_info(vectors: ShardedVectors, lang: str, source: str, cost: ExactCost) -> IndexInfo:
    """The record of an exact index (nothing to build: `mine` multiplies the embedding shards), with the
    measured cost of that search (`source`: the language whose vectors were timed, or "self")."""
    return replace(
        _make_info(lang, EXACT, vectors, None, 0, 4, None, None, 0.0),
        recall=1.0,
        recall_source=source,
        search_ms_per_1000=cost.ms_per_1000_queries,
        exact_ms_per_1000=cost.ms_per_1000_queries,
        note=f"exact search by matrix products over the embedding shards ({cost.plan})",
    )


def save_index(index: faiss.Index | ShardedIndex | None, info: IndexInfo, index_dir: Path) -> IndexInfo:
    """Write ``LANG.faiss`` (an unsharded index; a sharded one saved its shards; an exact one, None, has
    none) then ``LANG.json`` with
    the files' checksums, each atomically, and remove the files of other builds and the temporary files
    of killed ones (the index step holds LANG's index lock). Returns the info as saved.

    The old json goes first, so a crash part way leaves no index rather than a mismatched pair.
    """
    index_dir = Path(index_dir)
    (index_dir / f"{info.lang}.json").unlink(missing_ok=True)
    if isinstance(index, ShardedIndex) or index is None:
        (index_dir / f"{info.lang}.faiss").unlink(missing_ok=True)
    else:
        write_index(index, index_dir / f"{info.lang}.faiss")
    keep = {s["file"] for s in info.shards} | {f"{info.lang}.{info.plan}.template.faiss"}
    for other in index_dir.glob(f"{info.lang}.*.faiss"):
        if other.name not in keep and other.name != f"{info.lang}.faiss":
            other.unlink()
    remove_temporaries(index_dir, f"{glob.escape(info.lang)}.*")
    info = replace(info, checksums={name: _sha256(index_dir / name) for name in _index_files(info)})
    write_json(index_dir / f"{info.lang}.json", info.to_json())
    return info


def _index_files(info: IndexInfo) -> list[str]:
    """The files in the index dir that the index described by `info` reads."""
    if info.factory == EXACT and not info.shards:
        return []
    if info.shards:
        return [f"{info.lang}.{info.plan}.template.faiss", *(shard["file"] for shard in info.shards)]
    return [f"{info.lang}.faiss"]


def _sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def load_index(
    index_dir: Path,
    lang: str,
    vectors: ShardedVectors,
    *,
    nprobe: int | None = None,
    max_codes: int | None = None,
) -> tuple[faiss.Index | ShardedIndex, IndexInfo]:
    """The saved index of `lang`, checked against the embeddings it must cover; `nprobe` overrides the
    stored one, and `max_codes` caps the rows an IVF query scans (`set_max_codes`).

    A sharded index is returned unloaded: its shards are read one at a time as they are searched."""
    index_dir = Path(index_dir)
    info = load_index_info(index_dir, lang, vectors)
    _check_files(index_dir, info)
    if info.shards:
        template = read_index(index_dir / f"{lang}.{info.plan}.template.faiss")
        index = ShardedIndex(index_dir, [ShardFile(**s) for s in info.shards], template)
    else:
        index = read_index_cached(index_dir / f"{lang}.faiss")
    if index.ntotal != len(vectors):
        raise _stale(lang)
    if nprobe is not None and info.nprobe is not None:
        info = replace(info, nprobe=nprobe)
    if info.nprobe is not None:
        set_nprobe(index, info.nprobe)
    set_max_codes(index, max_codes or 0)  # also clears a cap left on the cached index by a caller before
    return index, info


def load_index_info(index_dir: Path, lang: str, vectors: ShardedVectors) -> IndexInfo:
    """LANG.json of a complete index that covers `vectors` (else an error naming the command to run)."""
    info_path = Path(index_dir) / f"{lang}.json"
    info = _read_info(info_path, lang) if info_path.is_file() else None
    if info is None or not all((Path(index_dir) / f).is_file() for f in _index_files(info)):
        raise BitextmineError(f"no index for '{lang}' in {index_dir}: run `bitextmine index {lang}`")
    if info.vectors != vectors.digest():
        raise _stale(lang)
    return info


def _read_info(path: Path, lang: str) -> IndexInfo:
    """LANG.json; a malformed one, or one naming files outside the index dir, is a one-line error."""
    data = read_json(path, remedy=f"rerun `bitextmine index {lang}`")
    try:
        info = IndexInfo.from_json(data)
        if not isinstance(info.checksums, dict):
            raise TypeError("checksums is not an object")
        if not _shards_in_order(info.shards, info.count):
            raise TypeError(f"its shards do not cover rows 0 to {info.count} in order")
        for name in ("nprobe", "fetch"):
            if getattr(info, name) is not None and getattr(info, name) < 1:
                raise TypeError(f"{name} is {getattr(info, name)}, not at least 1")
        names = [shard["file"] for shard in info.shards] + list(info.checksums)
    except (KeyError, TypeError) as exc:
        raise BitextmineError(
            f"{path}: unreadable index record ({exc}); rerun `bitextmine index {lang}`"
        ) from None
    if any(Path(name).name != name or name.startswith(".") for name in names):
        raise BitextmineError(f"{path}: names files outside the index dir; rerun `bitextmine index {lang}`")
    return info


def _shards_in_order(shards: list[Any], count: int) -> bool:
    """Whether the shard entries of an index record are {file, start, stop}, one after another from row 0
    to `count` (or none: one file)."""
    row = 0
    for shard in shards:
        if not isinstance(shard, dict) or not isinstance(shard.get("file"), str):
            return False
        start, stop = shard.get("start"), shard.get("stop")
        if type(start) is not int or type(stop) is not int or start != row or stop <= start:
            return False
        row = stop
    return not shards or row == count


_verified: set[tuple[Path, int, int, str]] = set()  # (file, mtime, size, sha256) checked in this process


def _check_files(index_dir: Path, info: IndexInfo) -> None:
    """Each file of the index holds the bytes `save_index` wrote: checked once a process (a pass over
    the files; mining then reads them from the page cache)."""
    for name, expected in info.checksums.items():
        path = index_dir / name
        stat = path.stat()
        key = (path, stat.st_mtime_ns, stat.st_size, expected)
        if key in _verified:
            continue
        if _sha256(path) != expected:
            raise BitextmineError(
                f"{path}: damaged FAISS index (not the bytes `bitextmine index` wrote: its checksum "
                f"differs); delete it and rerun `bitextmine index {info.lang}`"
            )
        _verified.add(key)


def _stale(lang: str) -> BitextmineError:
    return BitextmineError(
        f"index of '{lang}' is stale (built from other embeddings, or by an older bitextmine): "
        f"rerun `bitextmine index {lang}`"
    )
