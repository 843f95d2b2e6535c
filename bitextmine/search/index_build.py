"""Building a FAISS inner-product index over one language's embedding shards: trained on a random sample
(training.py), populated shard block by shard block (memory bounded by the block size plus the index
itself), then measured against exact search and tuned (recall_tuning.py), and described by its
`IndexInfo` (index_files.py).

`build_index` builds in memory in one pass. The index step builds through files so that a killed build
resumes: `start_sharded_build` saves the trained template, one job a row range populates a copy of it
(``L.PLAN.NNN.faiss``), and `finish_sharded_build` searches those shards as they are (`--max-memory`)
while `finish_merged_build` merges them, in row order, into the one index an unsharded build gives.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from bitextmine.search.cost import ExactCost
from bitextmine.search.factory import EXACT, add_vectors, new_index
from bitextmine.search.factory_choice import choose_factory
from bitextmine.search.faiss_gpu import check_gpu, on_device
from bitextmine.search.index_files import IndexInfo
from bitextmine.search.index_io import read_index, write_index
from bitextmine.search.recall_tuning import (
    RECALL_FLOOR,
    TARGET_RECALL,
    TIMING_REPEATS,
    RecallProbe,
    Tuning,
    choose_nprobe,
    default_fetch,
    is_ivf_flat,
    list_imbalance,
    measure_recall,
    probe_more,
    sample_probe,
)
from bitextmine.search.sharded import (
    ShardedIndex,
    ShardFile,
    even_ranges,
    merge_shards,
    plan_id,
)
from bitextmine.search.training import (
    check_training_sample,
    sample_and_train,
    train_on,
    training_rows,
)
from bitextmine.workspace.embeddings import ShardedVectors

# The index step populates an unsharded index in parts of this many rows, each saved as a file that a
# rerun after a kill keeps (`checkpoint_ranges`): at most one part's work is lost
# (examples/benchmarks/results/constants.md), and the parts take the final index's size again on disk
# until merged.
CHECKPOINT_ROWS = 1_000_000


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
    factory, auto = _resolved_factory(vectors, factory, auto)
    rng = np.random.default_rng(seed)
    started = time.perf_counter()
    index, train_rows = _build(factory, vectors.dim, vectors, gpu, rng, chunk_rows, progress)
    trained = _Trained(vectors, lang, factory, train_rows, rng, started)
    return _finish(index, trained, Tuning(**tuning), auto=auto, gpu=gpu, chunk_rows=chunk_rows)


def _resolved_factory(vectors: ShardedVectors, factory: str | None, auto: bool) -> tuple[str, bool]:
    """The factory to build (the library's choice where none is given) and whether it is the library's
    choice; refused in one line where the capped training sample cannot train it."""
    auto = auto or factory is None
    factory = factory or choose_factory(len(vectors), vectors.dim)
    check_training_sample(factory, len(vectors), vectors.dim)
    return factory, auto


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
    """Measure recall and tune nprobe; with `auto` (the library's own IVF-Flat, on a CPU), probe more lists
    while recall@k stays below RECALL_FLOOR, and give way to Flat where it still does, or where the
    search is no faster than exact search."""
    vectors, factory, k = built.vectors, built.factory, tuning.recall_k
    build_seconds = time.perf_counter() - built.started
    target = TARGET_RECALL if tuning.target_recall is None else tuning.target_recall
    probe = sample_probe(vectors, tuning.queries, k, tuning.recall_queries, built.rng, chunk_rows)
    plain = index.template if isinstance(index, ShardedIndex) else index
    fetch = tuning.fetch or default_fetch(plain, k)
    nprobe, note = choose_nprobe(index, factory, tuning.nprobe, probe, vectors, k, fetch, target)
    # the fastest of a few searches: the first pays one-time costs (the list scan's torch import)
    measured = measure_recall(index, probe, vectors, k, fetch, TIMING_REPEATS) if probe else None
    train_rows = built.train_rows
    if auto and not gpu and measured and is_ivf_flat(plain):
        exact = (
            tuning.exact_cost.query_seconds(len(probe.queries)) if tuning.exact_cost else probe.exact_seconds
        )
        nprobe, measured = probe_more(index, probe, vectors, k, fetch, nprobe, measured, exact)
        if measured[1] >= exact or measured[0] < RECALL_FLOOR:
            note = f"{factory} at nprobe {nprobe}: {_short_of_exact(measured, exact, k)}: built Flat instead"
            factory, nprobe, train_rows, fetch = "Flat", None, 0, k
            index, _ = _build(factory, vectors.dim, vectors, False, built.rng, chunk_rows, None)
            measured = (1.0, exact)
    info = _make_info(built.lang, factory, vectors, nprobe, train_rows, k, probe, measured, build_seconds)
    return index, replace(info, gpu=gpu, fetch=fetch, note=note, imbalance=list_imbalance(index))


def _short_of_exact(measured: tuple[float, float], exact_seconds: float, k: int) -> str:
    """Why an IVF-Flat gave way to exact search: its recall@k, and its time against exact search's."""
    recall, seconds = measured
    pace = seconds / max(exact_seconds, 1e-9)
    speed = f"{pace:.1f}x slower than" if pace >= 1 else f"in {pace:.0%} of the time of"
    return f"recall@{k} {recall:.3f} (at least {RECALL_FLOOR} wanted), searched {speed} exact search"


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
        check_gpu()
    factory, auto = _resolved_factory(vectors, factory, auto)
    rng = np.random.default_rng(seed)
    started = time.perf_counter()
    plan = plan_id(vectors.digest(), len(vectors), factory, ranges, seed)
    template_path = Path(index_dir) / f"{lang}.{plan}.template.faiss"
    template, train_rows = _template(template_path, factory, vectors.dim, vectors, rng, gpu)
    shards = [ShardFile(f"{lang}.{plan}.{i:03d}.faiss", a, b) for i, (a, b) in enumerate(ranges)]
    trained = _Trained(vectors, lang, factory, train_rows, rng, started)
    return ShardedBuild(
        **vars(trained), index_dir=Path(index_dir), plan=plan, shards=shards, template=template, auto=auto
    )


def checkpoint_ranges(n: int, factory: str, dim: int, rows: int = CHECKPOINT_ROWS) -> list[tuple[int, int]]:
    """The parts, of at most `rows` rows, that the index step populates an unsharded index in: one part
    where FAISS cannot merge such indexes (HNSW, refined, ID-mapped)."""
    return even_ranges(n, math.ceil(n / rows) if _mergeable(new_index(factory, dim)) else 1)


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
    template = new_index(factory, dim)
    rows = 0 if template.is_trained else training_rows(factory, len(vectors), dim)
    sample = np.sort(rng.choice(len(vectors), size=rows, replace=False)) if rows else None
    if path.is_file():
        return read_index(path), rows
    if sample is not None:
        work, done = on_device(template, gpu)
        train_on(work, vectors.take(sample), factory)
        template = done()
    write_index(template, path)
    return template, rows


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
    index = new_index(factory, dim)
    if gpu:
        check_gpu()
    work, done = on_device(index, gpu)
    train_rows = 0 if work.is_trained else sample_and_train(work, vectors, factory, rng)
    _populate(work, factory, vectors, chunk_rows, progress)
    return done(), train_rows


def _populate(
    index: faiss.Index,
    factory: str,
    vectors: ShardedVectors,
    chunk_rows: int,
    progress: Callable[[int], None] | None,
) -> None:
    for _, block in vectors.blocks(chunk_rows):
        add_vectors(index, block, f"'{factory}'")
        if progress:
            progress(len(block))


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
        exact_rate=cost.rate_record(),
    )
