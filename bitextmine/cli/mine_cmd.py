"""`bitextmine index` and `bitextmine mine`: parsing and printing (work: index.py, mine_workspace.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from bitextmine.cli.common import ModelOption, WorkdirOption, app, err, out, user_errors
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
def index(
    lang: Annotated[str, typer.Argument(help="Language whose embeddings to index.")],
    workdir: WorkdirOption = DEFAULT_WORKDIR,
    factory: Annotated[
        str | None, typer.Option(help="FAISS factory string, e.g. 'IVF4096,Flat' [default: chosen by size].")
    ] = None,
    nprobe: Annotated[
        int | None,
        typer.Option(help="IVF lists probed per query [default: tuned for --target-recall].", min=1),
    ] = None,
    queries_from: Annotated[
        str | None,
        typer.Option(
            help="Language whose vectors measure recall and tune nprobe, or 'self' for LANG's own rows "
            "[default: en, else another encoded language]."
        ),
    ] = None,
    target_recall: Annotated[
        float | None,
        typer.Option(help="Recall@4 that nprobe is tuned to reach [default: 0.95].", min=0.0, max=1.0),
    ] = None,
    fetch: Annotated[
        int | None,
        typer.Option(help="Hits fetched per query and re-ranked exactly [default: 4, 64 for PQ].", min=1),
    ] = None,
    gpu: Annotated[bool, typer.Option("--gpu", help="Train and populate on GPU (needs faiss GPU).")] = False,
    seed: Annotated[int, typer.Option(help="Seed of the training and query samples.")] = 0,
) -> None:
    """Build a FAISS inner-product index over LANG's embedding shards.

    Reads WORK/emb/LANG/ and writes WORK/index/LANG.faiss plus WORK/index/LANG.json (factory, nprobe,
    count, model fingerprint, recall@4 against exact search, search speed). Small sets get an exact
    Flat index, larger ones IVF-Flat (or Flat when that searches faster at the recall needed), the
    largest OPQ+IVF+PQ with exact re-ranking. Recall is measured with another encoded language's
    vectors, as mining searches, and IVF nprobe is tuned on them.
    """
    from bitextmine.index import build_index, save_index
    from bitextmine.mine_workspace import open_language, recall_queries

    workspace = Workspace(workdir)
    with user_errors():
        language = open_language(workspace, lang)
        queries = recall_queries(workspace, lang, queries_from, 1000, seed)
        progress, advance = progress_bar(f"indexing {lang}", len(language.vectors))
        with progress:
            built, info = build_index(
                language.vectors,
                lang,
                factory=factory,
                nprobe=nprobe,
                fetch=fetch,
                queries=queries,
                target_recall=target_recall,
                gpu=gpu,
                seed=seed,
                progress=advance,
            )
        save_index(built, info, workspace.index_dir())
    out.print(_index_line(info, workspace), highlight=False)
    if info.note:
        err.print(f"note: {info.note}", highlight=False)


def _index_line(info, workspace: Workspace) -> str:
    recall = "n/a" if info.recall is None else f"{info.recall:.4f}"
    speed = (
        ""
        if info.search_ms_per_1000 is None
        else f", {info.search_ms_per_1000:,.0f} ms per 1000 queries (exact {info.exact_ms_per_1000:,.0f})"
    )
    return (
        f"index {info.lang}: {info.factory}, {info.count:,} vectors, nprobe {info.nprobe}, "
        f"fetch {info.fetch}, recall@{info.recall_k} {recall} with {info.recall_source} queries{speed}, "
        f"built in {info.build_seconds:.1f} s -> {workspace.index_dir() / (info.lang + '.faiss')}"
    )


@app.command()
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
            "[default: keep every one-to-one candidate]."
        ),
    ] = None,
    nprobe: Annotated[int | None, typer.Option(help="Override the indexes' stored nprobe.", min=1)] = None,
    model: ModelOption = None,
) -> None:
    """Mine translation pairs between two encoded and indexed languages.

    Reads WORK/emb/SRC, WORK/emb/TGT, their text shards and WORK/index/{SRC,TGT}.faiss; searches k
    nearest neighbours both ways, recomputes the candidates' cosines from the stored vectors, scores
    them with the margin, keeps each sentence at most once and writes WORK/mined/SRC-TGT.tsv.zst
    (score, source sentence, target sentence, source id, target id; ids are INPUT-FILE-INDEX:LINE),
    sorted by score, plus WORK/mined/SRC-TGT.stats.json. --threshold auto reads the threshold that
    `bitextmine calibrate` stored in the model dir (--model, default the model of the embeddings).
    """
    from bitextmine.mine_workspace import MineOptions, mine_workspace, open_language

    workspace = Workspace(workdir)
    with user_errors():
        options = MineOptions(
            k=k, margin=margin, strategy=strategy, threshold=_threshold(threshold), nprobe=nprobe, model=model
        )
        queries = sum(len(open_language(workspace, lang).vectors) for lang in (src, tgt))
        progress, advance = progress_bar(f"mining {src}-{tgt}", queries)
        with progress:
            summary = mine_workspace(workspace, src, tgt, options, advance)
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
