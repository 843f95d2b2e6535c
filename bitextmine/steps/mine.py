"""The `mine SRC TGT` step over a workspace: embeddings and indexes in, mined pairs and stats out."""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
import time
import tokenize
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from bitextmine.calibration.planted import CalibrationPairs
from bitextmine.calibration.thresholds import (
    ThresholdChoice,
    check_threshold,
    resolve_threshold,
    size_drift_note,
)
from bitextmine.devices import check_device
from bitextmine.errors import BitextmineError, BitextmineValueError, real_number, warn_user, whole_number
from bitextmine.files import OutputTarget, atomic_open, output_target, save_array, write_json
from bitextmine.launch.config import LauncherConfig
from bitextmine.launch.jobs import Job, run_jobs
from bitextmine.mining.filters import FilterSettings, PairFilter, default_filters
from bitextmine.mining.mined_file import (
    FORMATS,
    MinedOutput,
    mining_settings,
    output_format,
    write_mined,
)
from bitextmine.mining.null_estimate import DecoyCounts
from bitextmine.mining.selection import NeighbourBlocks, Selection, select_candidates
from bitextmine.mining.settings import MiningSettings
from bitextmine.progress import Advance, Progress
from bitextmine.search.factory import EXACT
from bitextmine.search.index_files import IndexInfo, load_index_info
from bitextmine.search.index_io import IndexCache
from bitextmine.search.ivf_scan import query_block_rows
from bitextmine.search.knn import Neighbours
from bitextmine.search.language_search import BaseSearch, exact_both_ways
from bitextmine.steps.corpus_threshold import InCorpus, calibration_pairs, in_corpus, language_search
from bitextmine.text.languages import check_lang
from bitextmine.workspace.embeddings import check_same_dimension
from bitextmine.workspace.external import is_external
from bitextmine.workspace.language import Language, open_language
from bitextmine.workspace.layout import Workspace
from bitextmine.workspace.locks import workspace_locks

SELECTION_DIR = "selection"  # scratch of the candidate selection, inside a plan's neighbour dir
SELECTION_BLOCK_ROWS = 1_000_000  # neighbour lists scored at once
NEIGHBOUR_DTYPE = np.dtype([("id", "<i8"), ("cos", "<f4")])
HISTOGRAM_BINS = 50  # of every candidate's score, in the stats


@dataclass
class MineOptions(MiningSettings):  # k, margin, strategy, then:
    threshold: float | str | None = None  # a number, "auto", "auto:PAIR" (calibrated) or None (keep all)
    # with "auto": keep the pairs of at least this regional precision in place of the learned threshold
    min_precision: float | None = None
    thresholds: Path | None = None  # the threshold store of "auto"; default: WORK/thresholds.json
    nprobe: int | None = None
    device: str = "auto"  # where exact (Flat) indexes are searched: auto, cpu, cuda, cuda:N
    max_codes: int | None = None  # rows an IVF query scans at most (FAISS max_codes); None: no cap
    block_rows: int | None = None  # queries searched at once; None: ivf_scan.query_block_rows
    job_rows: int = 1_000_000  # queries per neighbour job (the unit of resume and of cluster jobs)
    model: str | None = None  # a model dir with 0.1's thresholds; default: the embeddings' model
    force: bool = False  # mine two languages encoded by different models (a warning instead of an error)
    # pair filters, applied to the candidates that reach the threshold; None: `default_filters`
    filters: FilterSettings | None = None
    output: Path | None = None  # default: WORK/mined/SRC-TGT.FORMAT
    format: str | None = None  # one of mining.mined_file.FORMATS; default: from `output`'s suffix, or tsv.zst

    def __post_init__(self) -> None:  # before the search, not after it: the API is checked as the CLI is
        super().__post_init__()
        check_threshold(self.threshold)
        if self.min_precision is not None:
            real_number("min_precision", self.min_precision, 0.0, 1.0)
            if self.threshold != "auto":
                given = "" if self.threshold is None else f", not {self.threshold!r}"
                raise BitextmineValueError(
                    "min_precision is a threshold on the regional precision learned inside the corpus: "
                    f"it needs threshold 'auto' (--threshold auto){given}"
                )
        for name in ("nprobe", "max_codes", "block_rows"):
            if getattr(self, name) is not None:
                whole_number(name, getattr(self, name))
        whole_number("job_rows", self.job_rows)
        check_device(self.device)
        if self.filters is not None and not isinstance(self.filters, FilterSettings):
            raise BitextmineValueError(
                f"filters must be a FilterSettings (parse_filters), not {self.filters!r}"
            )
        if self.output is not None or self.format is not None:
            output_format(Path(self.output or "mined.tsv.zst"), self.format)

    def output_target(
        self, workspace: Workspace, src: str, tgt: str, inputs: Sequence[str | Path] = ()
    ) -> tuple[OutputTarget, str]:
        """Where the pairs go, in which format: `output` checked by files.output_target (it may be the
        pair's own file in WORK/mined, in any format, but no other file of the workspace, nor one of
        `inputs` or the threshold store)."""
        if self.output is None:
            fmt = self.format or "tsv.zst"
            return OutputTarget(workspace.mined_file(src, tgt, fmt)), fmt
        own = [workspace.mined_file(src, tgt, fmt) for fmt in FORMATS]
        target = output_target(self.output, inputs=[*inputs, self.thresholds], workspace=workspace, own=own)
        return target, output_format(Path(self.output), self.format)

    def base_search(self, lang: str) -> BaseSearch:
        """The k-NN search of `lang`'s index with these options."""
        return BaseSearch(lang, self.k, self.nprobe, self.max_codes, self.device)

    def to_json(self) -> dict[str, Any]:
        paths = {"output": self.output, "thresholds": self.thresholds}
        return {**asdict(self), **{name: path and str(path) for name, path in paths.items()}}


@dataclass
class MineSummary:
    pair: str
    options: MineOptions
    counts: dict[str, Any]  # sentences, candidates, above_threshold, filtered (by filter), kept
    threshold: ThresholdChoice | None
    written: MinedOutput  # path, format, kept pairs, preview, histogram of the kept scores
    indexes: dict[str, IndexInfo]  # the indexes searched, by language
    score_histogram: dict[str, list[float]]  # of every one-to-one candidate's score
    stats: Path  # WORK/mined/SRC-TGT.stats.json, which holds `to_json()`
    workspace: Path  # its root
    seconds: float = 0.0

    @property
    def output(self) -> Path:
        return self.written.path

    @property
    def kept(self) -> int:
        return self.written.kept

    @property
    def note(self) -> str | None:
        """What the user is told about the threshold's fitness for this corpus (size_drift_note)."""
        return size_drift_note(self.threshold, self.counts["src_sentences"] + self.counts["tgt_sentences"])

    def to_json(self) -> dict[str, Any]:
        """What was mined, how, and what each stage kept (the output's path relative to the workspace
        when it lies inside, so a moved workspace stays consistent)."""
        path, root = self.written.path, self.workspace.resolve()
        if path.resolve().is_relative_to(root):
            path = path.resolve().relative_to(root)
        return {
            "pair": self.pair,
            "options": self.options.to_json(),
            "threshold": None if self.threshold is None else asdict(self.threshold) | {"note": self.note},
            "counts": self.counts,
            "output": {"path": str(path), "format": self.written.format},
            "indexes": {lang: info.to_json() for lang, info in self.indexes.items()},
            "score_histogram": self.score_histogram,
            "kept_histogram": self.written.histogram,
            "seconds": self.seconds,
        }


def resolve_mine_threshold(
    options: MineOptions, workspace: Workspace, src: Language, pair: str
) -> ThresholdChoice | None:
    """The threshold `options.threshold` stands for: calibrated ones ("auto", "auto:PAIR") are looked up by
    the fingerprint of the model that made the vectors, in the threshold store, then in the local model
    dir where bitextmine 0.1 kept them."""
    model = src.vectors.model
    legacy = Path(options.model or model.name).expanduser()
    external = f"--embeddings VECTORS_DIR --model-name {shlex.quote(model.name)}"
    return resolve_threshold(
        options.threshold,
        store=options.thresholds or workspace.thresholds_file(),
        fingerprint=model.fingerprint,
        margin=options.margin,
        k=options.k,
        pair=pair,
        model_dir=legacy if legacy.is_dir() else None,
        calibrate_with=external if is_external(model) else "--model MODEL",
    )


def mine(
    workspace: Workspace,
    src_lang: str,
    tgt_lang: str,
    options: MineOptions | None = None,
    progress: Progress | None = None,
    *,
    launcher: LauncherConfig | None = None,
) -> MineSummary:
    """Mine SRC against TGT with their indexes and write WORK/mined/SRC-TGT.tsv.zst and its stats.

    The k-NN searches are jobs over blocks of `options.job_rows` queries, each saving its
    neighbour lists under WORK/mined/.neighbours/ (kept, so an interrupted run resumes block by block
    and a rerun with another margin, strategy or threshold searches nothing), run here or where
    `launcher` sends them; `progress` counts queries. Then candidates are scored and selected.
    """
    pair = check_pair(src_lang, tgt_lang)
    reads = [f"{part}-{lang}" for part in ("lang", "index") for lang in (src_lang, tgt_lang)]
    with workspace_locks(workspace, write=[f"mine-{pair}"], read=reads):
        return _mine(
            workspace, src_lang, tgt_lang, options or MineOptions(), progress or Progress(), launcher
        )


def check_pair(src_lang: str, tgt_lang: str) -> str:
    """The pair SRC-TGT of two valid codes; one language twice is one corpus against itself, where each
    sentence's best candidate is itself: refused."""
    pair = f"{check_lang(src_lang)}-{check_lang(tgt_lang)}"
    if src_lang == tgt_lang:
        raise BitextmineError(
            f"mine {src_lang} {tgt_lang}: the source and the target are one corpus, so every sentence "
            "would pair with itself; mine two languages"
        )
    return pair


def _mine(
    workspace: Workspace,
    src_lang: str,
    tgt_lang: str,
    options: MineOptions,
    progress: Progress,
    launcher: LauncherConfig | None,
) -> MineSummary:
    started = time.perf_counter()
    pair = f"{src_lang}-{tgt_lang}"
    if options.filters is None:
        options = replace(options, filters=default_filters(src_lang, tgt_lang, warn_user))
    target, fmt = options.output_target(workspace, src_lang, tgt_lang)
    src, tgt = open_language(workspace, src_lang), open_language(workspace, tgt_lang)
    _check_same_model(src, tgt, options.force)
    threshold = resolve_mine_threshold(options, workspace, src, pair)
    pairs = _pairs_to_plant(options, workspace, src, threshold, pair)
    pair_filter = PairFilter(options.filters, src_lang, tgt_lang)
    infos = [load_index_info(workspace.index_dir(), lang.lang, lang.vectors) for lang in (src, tgt)]
    work = _neighbour_dir(workspace, pair, options, *infos)
    sizes = (len(src.vectors), len(tgt.vectors))
    indexes = IndexCache()  # the index searched last stays loaded for the next job run in this process
    jobs = _search_jobs(workspace, work, src, tgt, options, infos, indexes)
    with indexes, progress.stage(f"mining {pair}", sum(sizes)):
        run_jobs(jobs, launcher, "mine", progress.advance)
    scratch = work / SELECTION_DIR
    shutil.rmtree(scratch, ignore_errors=True)  # left by a killed run
    fwd, bwd = _neighbour_blocks(work, "fwd", sizes), _neighbour_blocks(work, "bwd", sizes[::-1])
    selection = select_candidates(fwd, bwd, sizes, options.margin, options.strategy, scratch)
    decoys = None if threshold is None else selection.decoy_counts()
    planting = None
    if pairs is not None and decoys is not None:
        planting = _plant(workspace, options, pairs, threshold, selection, decoys, (src, tgt))
        threshold = planting.threshold
    candidates = selection.records
    reaching = _reaching(candidates, decoys, planting, threshold)
    model = src.vectors.model
    settings = mining_settings(
        model.name, model.fingerprint, options.margin, options.k, threshold, options.filters
    )
    written = write_mined(
        target, fmt, reaching.records, src, tgt, pair_filter, settings, reaching.pair_precision
    )
    counts = {
        "src_sentences": sizes[0],
        "tgt_sentences": sizes[1],
        "one_to_one_candidates": len(candidates),
        "above_threshold": len(reaching.records),
        "filtered": pair_filter.counts(),
        "kept": written.kept,
        "estimated_precision": None if reaching.precision is None else round(100 * reaching.precision, 2),
        **(InCorpus.counts_absent() if planting is None else planting.counts()),
    }
    histogram = score_histogram(candidates["score"])
    del candidates, reaching, selection
    shutil.rmtree(scratch)
    _remove_other_plans(work)
    summary = MineSummary(
        pair,
        options,
        counts,
        threshold,
        written,
        {info.lang: info for info in infos},
        histogram,
        workspace.stats_file(src_lang, tgt_lang),
        workspace.root,
        time.perf_counter() - started,
    )
    write_json(summary.stats, summary.to_json())
    if summary.note is not None:
        warn_user(f"mine {pair}: {summary.note}")
    return summary


def _pairs_to_plant(
    options: MineOptions, workspace: Workspace, src: Language, threshold: ThresholdChoice | None, pair: str
) -> CalibrationPairs | None:
    """The calibration pairs to plant in the corpus (steps/corpus_threshold.py): this pair's, kept for the
    model that made the vectors, wherever a threshold is used but another pair's ("auto:PAIR"). None
    where `options.min_precision` needs them is a one-line error, before any search."""
    if threshold is None or threshold.pair != pair:
        return None
    store = options.thresholds or workspace.thresholds_file()
    pairs = calibration_pairs(store, src.vectors.model.fingerprint, pair, src.vectors.model.dim)
    if options.min_precision is not None and pairs is None:
        raise BitextmineError(
            f"mine {pair} --min-precision: the calibration of {pair} kept no pairs to plant in the corpus, "
            "so no regional precision can be learned; run `bitextmine calibrate` again"
        )
    return pairs


def _search_jobs(
    workspace: Workspace,
    work: Path,
    src: Language,
    tgt: Language,
    options: MineOptions,
    infos: Sequence[IndexInfo],
    indexes: IndexCache,
) -> list[Job]:
    """The neighbour jobs: one for both directions where `_exact_both_ways`, else each direction's."""
    sizes = (len(src.vectors), len(tgt.vectors))
    if _exact_both_ways(infos, sizes, options.job_rows):
        return [_both_ways_job(workspace, work, src.lang, tgt.lang, options, sizes)]
    return [
        *_neighbour_jobs(
            workspace, work, "fwd", src, tgt, options, search_block_rows(options, infos[1]), indexes
        ),
        *_neighbour_jobs(
            workspace, work, "bwd", tgt, src, options, search_block_rows(options, infos[0]), indexes
        ),
    ]


def _plant(
    workspace: Workspace,
    options: MineOptions,
    pairs: CalibrationPairs,
    threshold: ThresholdChoice,
    selection: Selection,
    decoys: DecoyCounts,
    langs: tuple[Language, Language],
) -> InCorpus:
    """The calibration pairs planted in the corpus, searched with its own indexes: the threshold learned
    there ("auto"), or the estimate at the calibrated one."""
    searches = tuple(language_search(workspace, options.base_search(lang.lang)) for lang in langs)
    corpus = (*searches, langs[0].vectors, langs[1].vectors)
    learn = options.threshold == "auto"
    return in_corpus(
        pairs, threshold, learn, selection, decoys, corpus, options, min_precision=options.min_precision
    )


@dataclass(frozen=True)
class _Reaching:
    """The candidates that reach the threshold (selection records, best first) and what is estimated of
    them."""

    records: np.ndarray
    precision: float | None  # estimated over them; None without a threshold
    pair_precision: np.ndarray | None  # each one's regional precision, where the threshold is on it


def _reaching(
    candidates: np.ndarray,
    decoys: DecoyCounts | None,
    planting: InCorpus | None,
    threshold: ThresholdChoice | None,
) -> _Reaching:
    """A learned threshold keeps the candidates of enough regional precision wherever they rank; a margin
    keeps a prefix of them; no threshold keeps them all."""
    kept_rows = None if planting is None else planting.kept_rows()
    if kept_rows is not None:
        precision = None if planting.estimate is None else planting.estimate.precision
        return _Reaching(candidates[kept_rows], precision, planting.pair_precision[kept_rows])
    if decoys is None or threshold is None:
        return _Reaching(candidates, None, None)
    above = decoys.kept(threshold.value)
    return _Reaching(candidates[:above], decoys.precision(threshold.value), None)


def _check_same_model(src: Language, tgt: Language, force: bool) -> None:
    """Vectors of two models are not comparable: refuse, or (forced) warn; two dimensions: refuse."""
    check_same_dimension((src.lang, src.vectors.model), (tgt.lang, tgt.vectors.model))
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
    indexes: IndexCache,
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
            options.device,
            block_rows,
            out=_lists_file(work, direction, a, b),
        )
        for a, b in ranges
    ]
    return [
        Job(
            f"mine {t.query_lang}->{t.base_lang} rows {t.start:,}-{t.stop:,}",
            neighbours_job,
            (t, indexes),
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
    device: str
    block_rows: int
    out: Path  # the job's neighbour lists (.npy)

    @property
    def queries(self) -> int:
        return self.stop - self.start


def neighbours_job(task: NeighbourTask, indexes: IndexCache, progress: Advance | None = None) -> int:
    """Job: the k nearest base rows of the task's query rows, saved to `task.out`; the index is read
    through `indexes` (a job run in another process gets an empty copy)."""
    workspace = Workspace(task.root)
    queries = open_language(workspace, task.query_lang).vectors

    def blocks() -> Iterator[tuple[int, np.ndarray]]:
        for first in range(task.start, task.stop, task.block_rows):
            rows = np.arange(first, min(first + task.block_rows, task.stop))
            yield first - task.start, queries.take(rows)
            queries.drop_pages()

    search = BaseSearch(task.base_lang, task.k, task.nprobe, task.max_codes, task.device)
    _save_lists(task.out, search.neighbours(workspace, blocks, task.queries, progress, indexes))
    return task.queries


def _lists_file(work: Path, direction: str, start: int, stop: int) -> Path:
    """The neighbour lists of one direction's query rows [start, stop)."""
    return work / f"{direction}-{start:012d}-{stop:012d}.npy"


def _save_lists(path: Path, found: Neighbours) -> None:
    lists = np.empty(found.ids.shape, dtype=NEIGHBOUR_DTYPE)  # one .npy: byte-identical when rerun
    lists["id"], lists["cos"] = found.ids, found.sims
    with atomic_open(path, "wb") as fh:
        save_array(fh, lists)


def _exact_both_ways(infos: Sequence[IndexInfo], sizes: tuple[int, int], job_rows: int) -> bool:
    """Whether both directions are searched by one job, from one product per block: both indexes exact
    and each side within one job's rows (larger sides are searched one direction at a time, in jobs that
    a rerun after a kill keeps), neither empty."""
    return all(info.factory == EXACT for info in infos) and 0 < min(sizes) <= max(sizes) <= job_rows


@dataclass(frozen=True)
class BothWaysTask:
    """The exact search of SRC's rows against TGT's and back, written to the files the two one-way jobs
    would write (`fwd`, `bwd`): the same lists, since exact search has one answer."""

    root: Path
    src_lang: str
    tgt_lang: str
    k: int
    device: str
    fwd: Path
    bwd: Path


def _both_ways_job(
    workspace: Workspace, work: Path, src: str, tgt: str, options: MineOptions, sizes: tuple[int, int]
) -> Job:
    fwd, bwd = _lists_file(work, "fwd", 0, sizes[0]), _lists_file(work, "bwd", 0, sizes[1])
    task = BothWaysTask(workspace.root, src, tgt, options.k, options.device, fwd, bwd)
    return Job(f"mine {src}<->{tgt} exact", both_ways_job, (task,), outputs=(fwd, bwd), work=sum(sizes))


def both_ways_job(task: BothWaysTask, progress: Advance | None = None) -> int:
    """Job: the task's neighbour lists of both directions, saved to `task.fwd` and `task.bwd`."""
    fwd, bwd = exact_both_ways(
        Workspace(task.root), task.src_lang, task.tgt_lang, task.k, task.device, progress
    )
    _save_lists(task.fwd, fwd)
    _save_lists(task.bwd, bwd)
    return len(fwd.ids) + len(bwd.ids)


def _neighbour_blocks(work: Path, direction: str, sizes: tuple[int, int]) -> NeighbourBlocks:
    """The saved neighbour lists of one direction (`sizes`: its queries, then the rows they search),
    SELECTION_BLOCK_ROWS queries at a time; a damaged file is a one-line error naming it."""
    rows, base_rows = sizes
    parts = [(path, _load_neighbours(path)) for path in sorted(work.glob(f"{direction}-*.npy"))]
    covered = sum(len(part) for _, part in parts)
    if covered != rows:
        raise BitextmineError(f"{work}: neighbour lists cover {covered} of {rows} rows; rerun mine")

    def blocks() -> Iterator[tuple[int, Neighbours]]:
        first = 0
        for path, part in parts:
            for start in range(0, len(part), SELECTION_BLOCK_ROWS):
                lists = part[start : start + SELECTION_BLOCK_ROWS]
                ids = np.array(lists["id"])
                if ids.size and (ids.min() < -1 or ids.max() >= base_rows):
                    raise _damaged_neighbours(path, f"ids outside [0, {base_rows})")
                yield first + start, Neighbours(np.array(lists["cos"]), ids)
            first += len(part)

    return blocks


def _load_neighbours(path: Path) -> np.ndarray:
    try:
        lists = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, EOFError, SyntaxError, tokenize.TokenError):
        raise _damaged_neighbours(path, "cut short, or its header garbled") from None
    if lists.dtype != NEIGHBOUR_DTYPE or lists.ndim != 2:
        raise _damaged_neighbours(path, f"{lists.dtype} {lists.shape}, expected [queries, k] neighbours")
    return lists


def _damaged_neighbours(path: Path, what: str) -> BitextmineError:
    return BitextmineError(
        f"{path}: damaged neighbour list ({what}); delete it and rerun `bitextmine mine`: it searches "
        "those queries again"
    )


def score_histogram(scores: np.ndarray, chunk: int = 1_000_000) -> dict[str, list[float]]:
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


def _remove_other_plans(work: Path) -> None:
    pair = work.name.rsplit("-", 1)[0]
    for other in work.parent.glob(f"{pair}-*"):
        if other != work and other.name.rsplit("-", 1)[0] == pair:
            shutil.rmtree(other, ignore_errors=True)
