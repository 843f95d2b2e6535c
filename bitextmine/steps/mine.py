"""The `mine SRC TGT` step over a workspace: embeddings and indexes in, mined pairs and stats out."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from bitextmine.encoder.loading import resolve_model_dir
from bitextmine.errors import BitextmineError
from bitextmine.evaluation.thresholds import calibrated_threshold
from bitextmine.files import atomic_open, write_json
from bitextmine.launch.config import LauncherConfig
from bitextmine.launch.jobs import Job, Progress, run_jobs
from bitextmine.mining.margin import check_margin
from bitextmine.mining.output import score_histogram, write_mined
from bitextmine.mining.selection import NeighbourBlocks, check_strategy, select_candidates
from bitextmine.search.faiss_index import IndexInfo, load_index, load_index_info
from bitextmine.search.ivf_scan import query_block_rows, search
from bitextmine.search.knn import Neighbours, SearchShard, find_neighbours
from bitextmine.search.sharded import ShardedIndex, release_index
from bitextmine.text.languages import check_lang
from bitextmine.text.reader import warn_user
from bitextmine.workspace.external import is_external
from bitextmine.workspace.language import Language, open_language
from bitextmine.workspace.layout import Workspace
from bitextmine.workspace.locks import workspace_locks

SELECTION_DIR = "selection"  # scratch of the candidate selection, inside a plan's neighbour dir
SELECTION_BLOCK_ROWS = 1_000_000  # neighbour lists scored at once
NEIGHBOUR_DTYPE = np.dtype([("id", "<i8"), ("cos", "<f4")])


@dataclass
class MineOptions:
    k: int = 4
    margin: str = "ratio"
    strategy: str = "max"
    threshold: float | str | None = (
        None  # a number, "auto" (calibrated, from the model dir) or None (keep all)
    )
    nprobe: int | None = None
    max_codes: int | None = None  # rows an IVF query scans at most (FAISS max_codes); None: no cap
    block_rows: int | None = None  # queries searched at once; None: ivf_scan.query_block_rows
    job_rows: int = 1_000_000  # queries per neighbour job (the unit of resume and of cluster jobs)
    model: str | None = None  # where "auto" looks for thresholds; default: the model that made the embeddings
    force: bool = False  # mine two languages encoded by different models (a warning instead of an error)

    def __post_init__(self) -> None:  # before the search, not after it
        check_margin(self.margin)
        check_strategy(self.strategy)


@dataclass
class MineSummary:
    pair: str
    src_rows: int
    tgt_rows: int
    candidates: int
    kept: int
    threshold: float | None
    output: Path
    stats: Path
    seconds: float
    preview: list[tuple[float, str, str]]


def resolve_threshold(options: MineOptions, src: Language, pair: str) -> float | None:
    if options.threshold != "auto":
        return None if options.threshold is None else float(options.threshold)
    if options.model is None and is_external(src.vectors.model):
        raise BitextmineError(
            f"'{src.lang}' has external embeddings ({src.vectors.model.name}), which have no model dir "
            "to read a calibrated threshold from: pass --threshold FLOAT or --model DIR"
        )
    model_dir = resolve_model_dir(options.model or src.vectors.model.name)
    return calibrated_threshold(model_dir, options.margin, pair)


def mine(
    workspace: Workspace,
    src_lang: str,
    tgt_lang: str,
    options: MineOptions | None = None,
    progress: Progress | None = None,
    launcher: LauncherConfig | None = None,
) -> MineSummary:
    """Mine SRC against TGT with their indexes and write WORK/mined/SRC-TGT.tsv.zst and its stats.

    The k-NN searches are jobs over blocks of `options.job_rows` queries, each saving its
    neighbour lists under WORK/mined/.neighbours/ (kept, so an interrupted run resumes block by block
    and a rerun with another margin, strategy or threshold searches nothing), run here or where
    `launcher` sends them; `progress` counts queries. Then candidates are scored and selected.
    """
    pair = f"{check_lang(src_lang)}-{check_lang(tgt_lang)}"
    reads = [f"{part}-{lang}" for part in ("lang", "index") for lang in (src_lang, tgt_lang)]
    with workspace_locks(workspace, write=[f"mine-{pair}"], read=reads):
        return _mine(workspace, src_lang, tgt_lang, options or MineOptions(), progress, launcher)


def _mine(
    workspace: Workspace,
    src_lang: str,
    tgt_lang: str,
    options: MineOptions,
    progress: Progress | None,
    launcher: LauncherConfig | None,
) -> MineSummary:
    started = time.perf_counter()
    pair = f"{src_lang}-{tgt_lang}"
    src, tgt = open_language(workspace, src_lang), open_language(workspace, tgt_lang)
    _check_same_model(src, tgt, options.force)
    threshold = resolve_threshold(options, src, pair)
    src_info = load_index_info(workspace.index_dir(), src_lang, src.vectors)
    tgt_info = load_index_info(workspace.index_dir(), tgt_lang, tgt.vectors)
    work = _neighbour_dir(workspace, pair, options, src_info, tgt_info)
    jobs = [
        *_neighbour_jobs(workspace, work, "fwd", src, tgt, options, search_block_rows(options, tgt_info)),
        *_neighbour_jobs(workspace, work, "bwd", tgt, src, options, search_block_rows(options, src_info)),
    ]
    run_jobs(jobs, launcher, "mine", progress)
    release_index()
    sizes = (len(src.vectors), len(tgt.vectors))
    scratch = work / SELECTION_DIR
    shutil.rmtree(scratch, ignore_errors=True)  # left by a killed run
    candidates = select_candidates(
        _neighbour_blocks(work, "fwd", sizes[0]),
        _neighbour_blocks(work, "bwd", sizes[1]),
        sizes,
        options.margin,
        options.strategy,
        scratch,
    )
    candidate_count = len(candidates)
    kept = candidate_count if threshold is None else _count_at_least(candidates["score"], threshold)
    output = workspace.mined_file(src_lang, tgt_lang)
    preview = write_mined(output, candidates[:kept], src, tgt)
    histogram = score_histogram(candidates["score"])
    del candidates
    shutil.rmtree(scratch)
    _remove_other_plans(work)
    stats_path = workspace.stats_file(src_lang, tgt_lang)
    seconds = time.perf_counter() - started
    write_json(
        stats_path,
        {
            "pair": pair,
            "options": asdict(options),
            "threshold": threshold,
            "counts": {
                "src_sentences": len(src.vectors),
                "tgt_sentences": len(tgt.vectors),
                "one_to_one_candidates": candidate_count,
                "kept": kept,
            },
            "indexes": {src_lang: src_info.to_json(), tgt_lang: tgt_info.to_json()},
            "score_histogram": histogram,
            "seconds": seconds,
        },
    )
    return MineSummary(
        pair,
        len(src.vectors),
        len(tgt.vectors),
        candidate_count,
        kept,
        threshold,
        output,
        stats_path,
        seconds,
        preview,
    )


def _check_same_model(src: Language, tgt: Language, force: bool) -> None:
    """Vectors of two models are not comparable: refuse, or (forced) warn."""
    if src.vectors.model.fingerprint == tgt.vectors.model.fingerprint:
        return
    message = (
        f"'{src.lang}' was encoded with {src.vectors.model.describe()} but '{tgt.lang}' with "
        f"{tgt.vectors.model.describe()}"
    )
    if not force:
        raise BitextmineError(f"{message}: encode both with the same model, or pass --force")
    warn_user(f"{message}; mining them anyway (--force): scores compare vectors of two models")


def _neighbour_dir(
    workspace: Workspace, pair: str, options: MineOptions, src_info: IndexInfo, tgt_info: IndexInfo
) -> Path:
    """WORK/mined/.neighbours/PAIR-PLAN: PLAN digests what the neighbour lists depend on."""
    built = [[i.factory, i.nprobe, i.fetch, i.vectors, i.plan] for i in (src_info, tgt_info)]
    blocks = [search_block_rows(options, info) for info in (tgt_info, src_info)]
    key = [built, options.k, options.nprobe, options.job_rows, blocks]
    if options.max_codes:  # keyed only when set, so lists saved before the option existed stay valid
        key.append(options.max_codes)
    plan = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return workspace.neighbours_dir() / f"{pair}-{plan}"


def search_block_rows(options: MineOptions, base_info: IndexInfo) -> int:
    """Queries searched at once against the index described by `base_info`."""
    return options.block_rows or query_block_rows(base_info.nlist, options.nprobe or base_info.nprobe)


def _neighbour_jobs(
    workspace: Workspace,
    work: Path,
    direction: str,
    query: Language,
    base: Language,
    options: MineOptions,
    block_rows: int,
) -> list[Job]:
    rows = len(query.vectors)
    ranges = [(a, min(a + options.job_rows, rows)) for a in range(0, rows, options.job_rows)]
    tasks = [
        NeighbourTask(
            workspace.root,
            query.lang,
            base.lang,
            a,
            b,
            options.k,
            options.nprobe,
            options.max_codes,
            block_rows,
            out=work / f"{direction}-{a:012d}-{b:012d}.npy",
        )
        for a, b in ranges
    ]
    return [
        Job(
            f"mine {t.query_lang}->{t.base_lang} rows {t.start:,}-{t.stop:,}",
            neighbours_job,
            (t,),
            outputs=(t.out,),
            work=t.queries,
        )
        for t in tasks
    ]


@dataclass(frozen=True)
class NeighbourTask:
    """What one neighbour job searches: `query_lang` rows [start, stop) against `base_lang`'s index."""

    root: Path
    query_lang: str
    base_lang: str
    start: int
    stop: int
    k: int
    nprobe: int | None
    max_codes: int | None
    block_rows: int
    out: Path  # the job's neighbour lists (.npy)

    @property
    def queries(self) -> int:
        return self.stop - self.start


def neighbours_job(task: NeighbourTask, progress: Progress | None = None) -> int:
    """Job: the k nearest base rows of the task's query rows, saved to `task.out`."""
    workspace = Workspace(task.root)
    queries = open_language(workspace, task.query_lang).vectors
    base = open_language(workspace, task.base_lang).vectors
    index, info = load_index(
        workspace.index_dir(), task.base_lang, base, nprobe=task.nprobe, max_codes=task.max_codes
    )
    if isinstance(index, ShardedIndex):
        shards = index.search_shards()
    else:
        shards = [SearchShard(lambda q, n: search(index, q, n))]

    def blocks() -> Iterator[tuple[int, np.ndarray]]:
        for first in range(task.start, task.stop, task.block_rows):
            rows = np.arange(first, min(first + task.block_rows, task.stop))
            yield first - task.start, queries.take(rows)
            queries.drop_pages()
            base.drop_pages()  # rows gathered for re-ranking

    found = find_neighbours(blocks, task.queries, shards, base.take, task.k, progress, info.fetch)
    lists = np.empty(found.ids.shape, dtype=NEIGHBOUR_DTYPE)  # one .npy: byte-identical when rerun
    lists["id"], lists["cos"] = found.ids, found.sims
    with atomic_open(task.out, "wb") as fh:
        np.save(fh, lists)
    return task.queries


def _neighbour_blocks(work: Path, direction: str, rows: int) -> NeighbourBlocks:
    """The saved neighbour lists of one direction, SELECTION_BLOCK_ROWS queries at a time."""
    parts = [np.load(path, mmap_mode="r") for path in sorted(work.glob(f"{direction}-*.npy"))]
    covered = sum(len(part) for part in parts)
    if covered != rows:
        raise BitextmineError(f"{work}: neighbour lists cover {covered} of {rows} rows; rerun mine")

    def blocks() -> Iterator[tuple[int, Neighbours]]:
        first = 0
        for part in parts:
            for start in range(0, len(part), SELECTION_BLOCK_ROWS):
                lists = part[start : start + SELECTION_BLOCK_ROWS]
                yield first + start, Neighbours(np.array(lists["cos"]), np.array(lists["id"]))
            first += len(part)

    return blocks


def _count_at_least(scores: np.ndarray, threshold: float, chunk: int = SELECTION_BLOCK_ROWS) -> int:
    return sum(
        int(np.count_nonzero(scores[a : a + chunk] >= threshold)) for a in range(0, len(scores), chunk)
    )


def _remove_other_plans(work: Path) -> None:
    pair = work.name.rsplit("-", 1)[0]
    for other in work.parent.glob(f"{pair}-*"):
        if other != work and other.name.rsplit("-", 1)[0] == pair:
            shutil.rmtree(other, ignore_errors=True)
