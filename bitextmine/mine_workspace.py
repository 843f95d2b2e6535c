"""The `mine SRC TGT` step over a workspace: embeddings and indexes in, mined pairs and stats out."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import zstandard

from bitextmine.corpus import CorpusManifest, load_manifest, lookup_rows
from bitextmine.encoder.loading import resolve_model_dir
from bitextmine.errors import BitextmineError
from bitextmine.faults import crash_point
from bitextmine.fsutil import atomic_open, write_json
from bitextmine.index import IndexInfo, load_index, load_index_info
from bitextmine.index_search import query_block_rows, search
from bitextmine.index_shards import ShardedIndex, release_index
from bitextmine.launcher import ShardJob
from bitextmine.lock import workspace_locks
from bitextmine.mine import SearchShard, find_neighbours
from bitextmine.neighbors import Neighbours
from bitextmine.selection import NeighbourBlocks, select_candidates
from bitextmine.store import EmbeddingStore, ShardedVectors
from bitextmine.thresholds import calibrated_threshold
from bitextmine.workspace import Workspace

HISTOGRAM_BINS = 50
NEIGHBOURS_DIR = ".neighbours"
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
    block_rows: int | None = None  # queries searched at once; None: index_search.query_block_rows
    job_rows: int = 1_000_000  # queries per neighbour job (the unit of resume and of cluster jobs)
    model: str | None = None  # where "auto" looks for thresholds; default: the model that made the embeddings


@dataclass
class Language:
    lang: str
    vectors: ShardedVectors
    corpus: CorpusManifest
    corpus_dir: Path


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


def open_language(workspace: Workspace, lang: str) -> Language:
    store = EmbeddingStore(workspace.embedding_dir(lang), lang)
    corpus = load_manifest(workspace.corpus_dir(lang))
    if store.manifest is None or corpus is None or not store.manifest.shards:
        raise BitextmineError(
            f"no embeddings for '{lang}' in {workspace.root}: run `bitextmine encode FILE... --lang {lang}`"
        )
    vectors = store.vectors()
    if len(vectors) != corpus.rows:
        raise BitextmineError(
            f"embeddings of '{lang}' cover {len(vectors)} of {corpus.rows} sentences: "
            f"rerun `bitextmine encode` for '{lang}' to finish it"
        )
    return Language(lang, vectors, corpus, workspace.corpus_dir(lang))


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


def resolve_threshold(options: MineOptions, src: Language, pair: str) -> float | None:
    if options.threshold != "auto":
        return None if options.threshold is None else float(options.threshold)
    model_dir = resolve_model_dir(options.model or src.vectors.model.name)
    return calibrated_threshold(model_dir, options.margin, pair)


def mine_workspace(
    workspace: Workspace,
    src_lang: str,
    tgt_lang: str,
    options: MineOptions,
    progress: Callable[[int], None] | None = None,
    run_jobs: Callable[[list[ShardJob]], object] | None = None,
) -> MineSummary:
    """Mine SRC against TGT with their indexes and write WORK/mined/SRC-TGT.tsv.zst and its stats.

    The k-NN searches are shard jobs over blocks of `options.job_rows` queries, each saving its
    neighbour lists under WORK/mined/.neighbours/ (kept, so an interrupted run resumes block by block
    and a rerun with another margin, strategy or threshold searches nothing); `run_jobs` runs them
    (default: here, one after another, with `progress`). Then candidates are scored and selected.
    """
    pair = f"{src_lang}-{tgt_lang}"
    reads = [f"{part}-{lang}" for part in ("lang", "index") for lang in (src_lang, tgt_lang)]
    with workspace_locks(workspace.root, write=[f"mine-{pair}"], read=reads):
        return _mine(workspace, src_lang, tgt_lang, options, progress, run_jobs)


def _mine(
    workspace: Workspace,
    src_lang: str,
    tgt_lang: str,
    options: MineOptions,
    progress: Callable[[int], None] | None,
    run_jobs: Callable[[list[ShardJob]], object] | None,
) -> MineSummary:
    started = time.perf_counter()
    pair = f"{src_lang}-{tgt_lang}"
    src, tgt = open_language(workspace, src_lang), open_language(workspace, tgt_lang)
    if src.vectors.model.fingerprint != tgt.vectors.model.fingerprint:
        raise BitextmineError(
            f"'{src_lang}' was encoded with {src.vectors.model.describe()} but '{tgt_lang}' with "
            f"{tgt.vectors.model.describe()}: encode both with the same model"
        )
    threshold = resolve_threshold(options, src, pair)
    src_info = load_index_info(workspace.index_dir(), src_lang, src.vectors)
    tgt_info = load_index_info(workspace.index_dir(), tgt_lang, tgt.vectors)
    work = _neighbour_dir(workspace, pair, options, src_info, tgt_info)
    jobs = [
        *_neighbour_jobs(workspace, work, "fwd", src, tgt, options, search_block_rows(options, tgt_info)),
        *_neighbour_jobs(workspace, work, "bwd", tgt, src, options, search_block_rows(options, src_info)),
    ]
    if run_jobs is None:
        _run_here(jobs, progress)
    else:
        run_jobs([job for job in jobs if not job_done(job)])
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
    output = workspace.mined_dir() / f"{pair}.tsv.zst"
    preview = write_mined(output, candidates[:kept], src, tgt)
    histogram = _histogram(candidates["score"])
    del candidates
    shutil.rmtree(scratch)
    _remove_other_plans(work)
    stats_path = workspace.mined_dir() / f"{pair}.stats.json"
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
    return workspace.mined_dir() / NEIGHBOURS_DIR / f"{pair}-{plan}"


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
) -> list[ShardJob]:
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
        ShardJob(f"mine {t.query_lang}->{t.base_lang} rows {t.start:,}-{t.stop:,}", neighbours_job, (t,))
        for t in tasks
    ]


def job_queries(job: ShardJob) -> int:
    """Queries a neighbour job searches (its row range)."""
    return job.args[0].queries


def job_done(job: ShardJob) -> bool:
    """Whether a neighbour job's lists were saved by an earlier run."""
    return job.args[0].out.is_file()


def _run_here(jobs: list[ShardJob], progress: Callable[[int], None] | None) -> None:
    """The jobs in this process; finished blocks only advance the progress bar."""
    for job in jobs:
        if job_done(job):
            if progress:
                progress(job_queries(job))
            continue
        job.fn(*job.args, progress=progress)
    release_index()


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


def neighbours_job(task: NeighbourTask, progress: Callable[[int], None] | None = None) -> int:
    """Shard job: the k nearest base rows of the task's query rows, saved to `task.out`."""
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


def write_mined(
    path: Path, pairs: np.ndarray, src: Language, tgt: Language, preview: int = 10, chunk: int = 500_000
) -> list:
    """Write `score<TAB>src<TAB>tgt<TAB>src id<TAB>tgt id` lines for candidate records (CANDIDATE_DTYPE,
    by decreasing score), zstd-compressed, looking sentences up `chunk` pairs at a time.

    Ids are ``SOURCE:LINE``: the index of the input file given to `encode` and its 1-based line number.
    """
    shown = []
    with atomic_open(path, "wb") as raw, zstandard.ZstdCompressor().stream_writer(raw) as out:
        for first in range(0, len(pairs), chunk):
            part = pairs[first : first + chunk]
            src_rows = lookup_rows(src.corpus_dir, src.corpus, part["src"])
            tgt_rows = lookup_rows(tgt.corpus_dir, tgt.corpus, part["tgt"])
            for score, s, t in zip(part["score"].tolist(), src_rows, tgt_rows, strict=True):
                out.write(
                    f"{score:.6f}\t{s.text}\t{t.text}\t{s.source}:{s.line}\t{t.source}:{t.line}\n".encode()
                )
                if len(shown) < preview:
                    shown.append((score, s.text, t.text))
            crash_point("mine.write-chunk")
    return shown


def _histogram(scores: np.ndarray, chunk: int = SELECTION_BLOCK_ROWS) -> dict[str, list[float]]:
    """np.histogram of the finite scores in HISTOGRAM_BINS bins over their range, counted in chunks."""

    def finite_parts() -> Iterator[np.ndarray]:
        for start in range(0, len(scores), chunk):
            part = np.asarray(scores[start : start + chunk])
            yield part[np.isfinite(part)]

    ranges = [(part.min(), part.max()) for part in finite_parts() if len(part)]
    if not ranges:
        return {"edges": [], "counts": []}
    span = (min(low for low, _ in ranges), max(high for _, high in ranges))
    counts = sum(np.histogram(part, bins=HISTOGRAM_BINS, range=span)[0] for part in finite_parts())
    edges = np.histogram_bin_edges(np.zeros(0), bins=HISTOGRAM_BINS, range=span)
    return {"edges": [round(float(e), 6) for e in edges], "counts": counts.tolist()}
