"""`bitextmine index` and `bitextmine mine`: parsing and printing (work: index.py, mine_workspace.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from bitextmine.cli.common import ModelOption, WorkdirOption, app, err, out, user_errors
from bitextmine.cli.launcher_options import NO_FLAGS, LauncherFlags, job_runner, with_launcher_options
from bitextmine.errors import BitextmineError
from bitextmine.workspace import DEFAULT_WORKDIR, Workspace

MARGIN_HELP = (
    "ratio (default, LASER's), distance (cos minus the neighbourhood mean), csls (2 cos minus both "
    "neighbourhood means) or absolute (cosine)."
)
STRATEGY_HELP = "max (best of both directions), intersect (mutual best), fwd or bwd."


def progress_bar(description: str, total: int | None) -> tuple[Progress, Callable[[int], None]]:
    progress = Progress(
        TextColumn(f"[bold]{description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
    )
    task = progress.add_task(description, total=total)
    return progress, lambda n: progress.update(task, advance=n)


@app.command()
@with_launcher_options
def index(
    lang: Annotated[str, typer.Argument(help="Language whose embeddings to index.")],
    workdir: WorkdirOption = DEFAULT_WORKDIR,
    factory: Annotated[
        str | None,
        typer.Option(help="FAISS factory string, e.g. 'IVF4096,Flat' \\[default: chosen by size]."),
    ] = None,
    list_size: Annotated[
        int | None,
        typer.Option(
            help="Vectors per IVF list: N / L lists (behind an HNSW coarse quantizer above 4,096), so "
            "the lists a query scans at a given --nprobe do not lengthen as N grows (k-means training "
            "grows with the list count) \\[default: about 4 sqrt(N) lists, 16 sqrt(N) above 4M vectors].",
            min=1,
        ),
    ] = None,
    nprobe: Annotated[
        int | None,
        typer.Option(help="IVF lists probed per query \\[default: tuned for --target-recall].", min=1),
    ] = None,
    queries_from: Annotated[
        str | None,
        typer.Option(
            help="Language whose vectors measure recall and tune nprobe, or 'self' for LANG's own rows "
            "\\[default: en, else another encoded language]."
        ),
    ] = None,
    target_recall: Annotated[
        float | None,
        typer.Option(help="Recall@4 that nprobe is tuned to reach \\[default: 0.95].", min=0.0, max=1.0),
    ] = None,
    fetch: Annotated[
        int | None,
        typer.Option(help="Hits fetched per query and re-ranked exactly \\[default: 4, 64 for PQ].", min=1),
    ] = None,
    gpu: Annotated[
        bool, typer.Option("--gpu", help="Train (and, unsharded, populate) on GPU (needs faiss GPU).")
    ] = False,
    seed: Annotated[int, typer.Option(help="Seed of the training and query samples.")] = 0,
    max_memory: Annotated[
        float | None,
        typer.Option(
            help="GB one index shard may take in RAM: a larger index is split into row-range shards, "
            "built and searched one at a time \\[default: one index].",
            min=1e-9,
        ),
    ] = None,
    cluster: LauncherFlags = NO_FLAGS,
) -> None:
    """Build a FAISS inner-product index over LANG's embedding shards.

    Reads WORK/emb/LANG/ and writes WORK/index/LANG.faiss plus WORK/index/LANG.json (factory, nprobe,
    count, model fingerprint, recall@4 against exact search, search speed). Small sets get an exact
    Flat index, larger ones IVF-Flat (or Flat when that searches faster at the recall needed), the
    largest OPQ+IVF+PQ with exact re-ranking. Recall is measured with another encoded language's
    vectors, as mining searches, and IVF nprobe is tuned on them.
    """
    from bitextmine.index import build_index, build_index_in_shards, choose_factory, save_index
    from bitextmine.index_shards import plan_ranges
    from bitextmine.lock import workspace_locks
    from bitextmine.mine_workspace import open_language, recall_queries

    workspace = Workspace(workdir)
    with user_errors():
        if factory is not None and list_size is not None:
            raise BitextmineError("give --factory or --list-size, not both")
        config = cluster.config("index", workspace.root / "logs" / "index")
        reads = [f"lang-{lang}"] + ([f"lang-{queries_from}"] if queries_from not in (None, "self") else [])
        with workspace_locks(workspace.root, write=[f"index-{lang}"], read=reads):
            language = open_language(workspace, lang)
            queries = recall_queries(workspace, lang, queries_from, 1000, seed)
            vectors = language.vectors
            if list_size is not None:
                factory = choose_factory(len(vectors), vectors.dim, list_size)
            chosen = factory or choose_factory(len(vectors), vectors.dim)
            ranges = plan_ranges(len(vectors), chosen, vectors.dim, max_memory and max_memory * 1e9)
            options = dict(
                factory=factory,
                nprobe=nprobe,
                fetch=fetch,
                queries=queries,
                target_recall=target_recall,
                seed=seed,
            )
            if len(ranges) > 1 or config.launcher != "local":
                progress, advance = progress_bar(f"indexing {lang} ({len(ranges)} shards)", len(ranges))
                run = job_runner(config, "index", lambda job: advance(1)) or _run_jobs_here(advance)
                with progress:
                    built, info = build_index_in_shards(
                        vectors, lang, workspace.index_dir(), ranges, run, gpu=gpu, **options
                    )
            else:
                progress, advance = progress_bar(f"indexing {lang}", len(vectors))
                with progress:
                    built, info = build_index(vectors, lang, gpu=gpu, progress=advance, **options)
            save_index(built, info, workspace.index_dir())
    out.print(_index_line(info, workspace), highlight=False)
    if info.note:
        err.print(f"note: {info.note}", highlight=False)


def _run_jobs_here(advance: Callable[[int], None]) -> Callable[[list], None]:
    def run(jobs: list) -> None:
        for job in jobs:
            job.fn(*job.args, **job.kwargs)
            advance(1)

    return run


def _index_line(info, workspace: Workspace) -> str:
    recall = "n/a" if info.recall is None else f"{info.recall:.4f}"
    speed = (
        ""
        if info.search_ms_per_1000 is None
        else f", {info.search_ms_per_1000:,.0f} ms per 1000 queries (exact {info.exact_ms_per_1000:,.0f})"
    )
    if info.imbalance is not None:
        speed += f", list imbalance {info.imbalance:.2f}"
    where = (
        f"{len(info.shards)} shards {workspace.index_dir() / info.lang}.{info.plan}.*.faiss"
        if info.shards
        else workspace.index_dir() / f"{info.lang}.faiss"
    )
    return (
        f"index {info.lang}: {info.factory}, {info.count:,} vectors, nprobe {info.nprobe}, "
        f"fetch {info.fetch}, recall@{info.recall_k} {recall} with {info.recall_source} queries{speed}, "
        f"built in {info.build_seconds:.1f} s -> {where}"
    )


@app.command()
@with_launcher_options
def mine(
    src: Annotated[str, typer.Argument(help="Source language (e.g. de).")],
    tgt: Annotated[str, typer.Argument(help="Target language (e.g. en).")],
    workdir: WorkdirOption = DEFAULT_WORKDIR,
    k: Annotated[int, typer.Option("--k", "-k", help="Neighbours per sentence for the margin.", min=1)] = 4,
    margin: Annotated[str, typer.Option(help=MARGIN_HELP)] = "ratio",
    strategy: Annotated[str, typer.Option(help=STRATEGY_HELP)] = "max",
    threshold: Annotated[
        str | None,
        typer.Option(
            help="Keep pairs scoring >= FLOAT, or 'auto' for the model's calibrated threshold "
            "\\[default: keep every one-to-one candidate]."
        ),
    ] = None,
    nprobe: Annotated[int | None, typer.Option(help="Override the indexes' stored nprobe.", min=1)] = None,
    max_codes: Annotated[
        int | None,
        typer.Option(
            help="Scan at most this many vectors a query in an IVF index (FAISS's max_codes): the probed "
            "lists in order, the last one cut short. Bounds the time a query costs when k-means lists "
            "are unequal, at the price of recall \\[default: scan every probed list].",
            min=1,
        ),
    ] = None,
    model: ModelOption = None,
    job_rows: Annotated[
        int,
        typer.Option(help="Query sentences per search job (the unit of resume and of cluster jobs).", min=1),
    ] = 1_000_000,
    cluster: LauncherFlags = NO_FLAGS,
) -> None:
    """Mine translation pairs between two encoded and indexed languages.

    Reads WORK/emb/SRC, WORK/emb/TGT, their text shards and WORK/index/{SRC,TGT}.faiss; searches k
    nearest neighbours both ways, recomputes the candidates' cosines from the stored vectors, scores
    them with the margin, keeps each sentence at most once and writes WORK/mined/SRC-TGT.tsv.zst
    (score, source sentence, target sentence, source id, target id; ids are INPUT-FILE-INDEX:LINE),
    sorted by score, plus WORK/mined/SRC-TGT.stats.json. --threshold auto reads the threshold that
    `bitextmine calibrate` stored in the model dir (--model, default the model of the embeddings).
    """
    from bitextmine.mine_workspace import MineOptions, job_queries, mine_workspace, open_language

    workspace = Workspace(workdir)
    with user_errors():
        config = cluster.config("mine", workspace.root / "logs" / "mine")
        options = MineOptions(
            k=k,
            margin=margin,
            strategy=strategy,
            threshold=_threshold(threshold),
            nprobe=nprobe,
            max_codes=max_codes,
            model=model,
            job_rows=job_rows,
        )
        queries = sum(len(open_language(workspace, lang).vectors) for lang in (src, tgt))
        progress, advance = progress_bar(f"mining {src}-{tgt}", queries)
        run = job_runner(config, "mine", lambda job: advance(job_queries(job)))
        with progress:
            summary = mine_workspace(workspace, src, tgt, options, advance, run)
    out.print(_preview_table(summary))
    kept = f"{summary.kept:,} pairs" + (
        "" if summary.threshold is None else f" with score >= {summary.threshold:.4f}"
    )
    out.print(
        f"{summary.pair}: {summary.src_rows:,} x {summary.tgt_rows:,} sentences, {summary.candidates:,} "
        f"one-to-one candidates, {kept} -> {summary.output} ({summary.seconds:.1f} s)",
        highlight=False,
    )


def _threshold(value: str | None) -> float | str | None:
    if value is None or value == "auto":
        return value
    try:
        return float(value)
    except ValueError:
        raise BitextmineError(f"--threshold must be a number or 'auto', not {value!r}") from None


def _preview_table(summary) -> Table:
    table = Table(title=f"top pairs {summary.pair}", title_justify="left")
    table.add_column("score", justify="right")
    table.add_column("source")
    table.add_column("target")
    for score, src_text, tgt_text in summary.preview:
        table.add_row(f"{score:.4f}", src_text, tgt_text)
    return table
