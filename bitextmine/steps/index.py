"""The index step: one FAISS index per language over its embedding shards, whole or in row-range shards."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from bitextmine.errors import BitextmineError
from bitextmine.files import read_json
from bitextmine.launch.config import LauncherConfig
from bitextmine.launch.jobs import Job, run_jobs
from bitextmine.progress import Progress
from bitextmine.search.cost import (
    EXACT_BUDGET_SECONDS,
    SAMPLE_QUERIES,
    ExactCost,
    measure_exact_cost,
    rate_applies,
)
from bitextmine.search.factory import EXACT
from bitextmine.search.factory_choice import auto_nprobe, choose_factory
from bitextmine.search.index_build import (
    CHECKPOINT_ROWS,
    ShardedBuild,
    build_index,
    checkpoint_ranges,
    exact_index_info,
    finish_merged_build,
    finish_sharded_build,
    start_sharded_build,
)
from bitextmine.search.index_files import IndexInfo, save_index
from bitextmine.search.sharded import plan_ranges, populate_shard
from bitextmine.text.languages import check_lang
from bitextmine.workspace.embeddings import EmbeddingStore, ShardedVectors, check_same_dimension
from bitextmine.workspace.language import open_language
from bitextmine.workspace.layout import Workspace
from bitextmine.workspace.locks import workspace_locks


def recall_queries(
    workspace: Workspace, lang: str, source: str | None, count: int, seed: int = 0
) -> tuple[str, np.ndarray] | None:
    """`count` random vectors of the language whose queries will search `lang`'s index, as (lang, rows).

    `source` None picks English, else the first other encoded language made by the same model; "self"
    (or no such language) gives None: the index measures recall on its own rows.
    """
    if source == "self":
        return None
    indexed = open_language(workspace, lang).vectors
    if source is None:
        others = sorted((o for o in workspace.encoded_languages() if o != lang), key=lambda o: o != "en")
        same_model = [o for o in others if _same_model(workspace, o, indexed)]
        if not same_model:
            return None
        source = same_model[0]
    other = open_language(workspace, source).vectors
    check_same_dimension((source, other.model), (lang, indexed.model))
    if other.model.fingerprint != indexed.model.fingerprint:
        raise BitextmineError(
            f"cannot measure recall with '{source}': it was encoded with {other.model.describe()}, "
            f"'{lang}' with {indexed.model.describe()}"
        )
    rows = np.random.default_rng(seed).choice(len(other), size=min(count, len(other)), replace=False)
    return source, other.take(np.sort(rows))


def _same_model(workspace: Workspace, lang: str, vectors: ShardedVectors) -> bool:
    store = EmbeddingStore(workspace.embedding_dir(lang), lang)
    return store.manifest is not None and store.manifest.model.fingerprint == vectors.model.fingerprint


@dataclass(frozen=True)
class IndexOptions:
    factory: str | None = None  # a FAISS factory string; None: exact or IVF by the measured cost
    list_size: int | None = None  # IVF with N / list_size lists (not with `factory`)
    nprobe: int | None = None  # None: `auto_nprobe` for the automatic IVF-Flat, else tuned by recall
    queries_from: str | None = None  # the language that measures recall; "self"; None: en, else another
    target_recall: float | None = None
    fetch: int | None = None
    gpu: bool = False
    seed: int = 0
    max_memory_gb: float | None = None  # one shard's size in RAM; None: one index
    checkpoint_rows: int = CHECKPOINT_ROWS  # rows a part of an unsharded build (what a kill may lose)
    exact_budget: float = EXACT_BUDGET_SECONDS  # exact search up to this many seconds of mining (cost.py)

    def __post_init__(self) -> None:
        if self.factory is not None and self.list_size is not None:
            raise BitextmineError("give --factory or --list-size, not both")


def index(
    workspace: Workspace,
    lang: str,
    options: IndexOptions | None = None,
    progress: Progress | None = None,
    *,
    launcher: LauncherConfig | None = None,
) -> IndexInfo:
    """Build, measure and save the index of `lang` (WORK/index/LANG.json and its .faiss files).

    An index larger than `options.max_memory_gb`, or any index when `launcher` sends jobs elsewhere, is
    built as row-range shards, one job a shard (a rerun keeps the shards already saved). Any other is
    populated in parts of `options.checkpoint_rows` rows, saved as they complete and merged at the end,
    so that a rerun after a kill keeps the trained template and the parts done (with `gpu`: in memory,
    in one pass). `progress` counts the rows added either way, in a stage that an exact index (nothing
    to build) never opens.
    """
    options, progress = options or IndexOptions(), progress or Progress()
    queries_from = options.queries_from
    check_lang(lang)
    if queries_from not in (None, "self"):
        check_lang(queries_from)
    reads = [f"lang-{lang}"] + ([f"lang-{queries_from}"] if queries_from not in (None, "self") else [])
    with workspace_locks(workspace, write=[f"index-{lang}"], read=reads):
        vectors = open_language(workspace, lang).vectors
        queries = recall_queries(workspace, lang, queries_from, 1000, options.seed)
        factory = options.factory
        if options.list_size is not None:
            factory = choose_factory(len(vectors), vectors.dim, options.list_size)
        cost = _exact_cost(workspace, vectors, queries, options) if factory in (None, EXACT) else None
        chosen = factory or choose_factory(
            len(vectors), vectors.dim, exact_seconds=cost.mining_seconds, budget=options.exact_budget
        )
        if chosen == EXACT:
            source = queries[0] if queries else "self"
            info = exact_index_info(vectors, lang, source, cost)
            return save_index(None, info, workspace.index_dir())
        auto = options.factory is None and options.list_size is None
        max_bytes = options.max_memory_gb and options.max_memory_gb * 1e9
        ranges = plan_ranges(len(vectors), chosen, vectors.dim, max_bytes)
        nprobe = options.nprobe
        if nprobe is None and auto and options.target_recall is None:
            nprobe = auto_nprobe(chosen)
        tuning = dict(
            nprobe=nprobe,
            fetch=options.fetch,
            queries=queries,
            target_recall=options.target_recall,
            exact_cost=cost,
        )
        sharded = len(ranges) > 1 or (launcher is not None and launcher.launcher != "local")
        with progress.stage(f"indexing {lang}", len(vectors)):
            if options.gpu and not sharded:
                index, info = build_index(
                    vectors,
                    lang,
                    factory=chosen,
                    gpu=True,
                    seed=options.seed,
                    progress=progress.advance,
                    auto=auto,
                    **tuning,
                )
            else:
                if not sharded:
                    ranges = checkpoint_ranges(len(vectors), chosen, vectors.dim, options.checkpoint_rows)
                build = start_sharded_build(
                    vectors,
                    lang,
                    workspace.index_dir(),
                    ranges,
                    factory=chosen,
                    seed=options.seed,
                    gpu=options.gpu,
                    auto=auto,
                )
                run_jobs(populate_jobs(build), launcher, "index", progress.advance)
                finish = finish_sharded_build if sharded else finish_merged_build
                index, info = finish(build, **tuning)
        if info.factory == EXACT:  # an IVF-Flat short of exact search (`_finish`): no file needed
            cost = cost or _exact_cost(workspace, vectors, queries, options)
            exact = exact_index_info(vectors, lang, queries[0] if queries else "self", cost)
            index, info = None, replace(exact, note=f"{info.note}; {exact.note}")
        elif cost is not None:
            info = replace(info, exact_rate=cost.rate_record())
        info = save_index(index, info, workspace.index_dir())  # with the files' checksums
    return info


def _exact_cost(
    workspace: Workspace,
    vectors: ShardedVectors,
    queries: tuple[str, np.ndarray] | None,
    options: IndexOptions,
) -> ExactCost:
    """Exact search timed with the other language's vectors (else the language's own) against this one,
    scaled to mining it against the other language (else against itself). Where the other language's
    index recorded the rate it measured here (this host and device, vectors of this dimension), that
    rate is used: a pair's two indexes choose on one measurement, the same exact cost either way round,
    and the second imports no torch."""
    device = "cuda" if options.gpu else "cpu"
    if queries is None:
        sample, other_rows = vectors.take(np.arange(min(SAMPLE_QUERIES, len(vectors)))), len(vectors)
    else:
        sample, other_rows = queries[1], len(open_language(workspace, queries[0]).vectors)
        recorded = _recorded_rate(workspace, queries[0], vectors.dim, device)
        if recorded is not None:
            return ExactCost.from_rate(recorded, len(vectors), other_rows)
    from bitextmine.search.gemm import GemmPlan  # torch: imported where exact search runs

    return measure_exact_cost(vectors, sample, other_rows, GemmPlan.for_device(device))


def _recorded_rate(workspace: Workspace, lang: str, dim: int, device: str) -> dict[str, Any] | None:
    """The exact-search rate `lang`'s index recorded, where it applies here (`rate_applies`) to vectors
    of `dim` dimensions; None if there is none, or the record is unreadable (it is measured again)."""
    path = workspace.index_dir() / f"{lang}.json"
    try:
        info = IndexInfo.from_json(read_json(path))
    except (OSError, BitextmineError, TypeError):
        return None
    return info.exact_rate if info.dim == dim and rate_applies(info.exact_rate, device) else None


def populate_jobs(build: ShardedBuild) -> list[Job]:
    emb_dir = build.vectors.store.root
    return [
        Job(
            f"index {build.lang} shard {number + 1}/{len(build.shards)}",
            populate_shard,
            (build.template_path, emb_dir, build.lang, shard.start, shard.stop, build.index_dir / shard.file),
            outputs=(build.index_dir / shard.file,),
            work=shard.stop - shard.start,
        )
        for number, shard in enumerate(build.shards)
    ]
