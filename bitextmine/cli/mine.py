"""`bitextmine mine`: parsing and printing (work: steps/mine.py)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from bitextmine.cli.app import MarginOption, ModelOption, StrategyOption, WorkdirOption, app, out, user_errors
from bitextmine.cli.launcher_options import NO_FLAGS, LauncherFlags, with_launcher_options
from bitextmine.cli.output import ProgressDisplay, results_table
from bitextmine.errors import BitextmineError
from bitextmine.workspace.layout import DEFAULT_WORKDIR, Workspace


@app.command()
@with_launcher_options
def mine(
    src: Annotated[str, typer.Argument(help="Source language (e.g. de).")],
    tgt: Annotated[str, typer.Argument(help="Target language (e.g. en).")],
    workdir: WorkdirOption = DEFAULT_WORKDIR,
    k: Annotated[int, typer.Option("--k", "-k", help="Neighbours per sentence for the margin.", min=1)] = 4,
    margin: MarginOption = "ratio",
    strategy: StrategyOption = "max",
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
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Mine even if the two languages were encoded by different models (a warning)."
        ),
    ] = False,
    cluster: LauncherFlags = NO_FLAGS,
) -> None:
    """Mine translation pairs between two encoded and indexed languages.

    Reads WORK/emb/SRC, WORK/emb/TGT, their text shards and WORK/index/{SRC,TGT}.faiss; searches k
    nearest neighbours both ways, recomputes the candidates' cosines from the stored vectors, scores
    them with the margin, keeps each sentence at most once and writes WORK/mined/SRC-TGT.tsv.zst
    (score, source sentence, target sentence, source id, target id; ids are INPUT-FILE-INDEX:LINE),
    sorted by score, plus WORK/mined/SRC-TGT.stats.json. --threshold auto reads the threshold that
    `bitextmine calibrate` stored in the model dir (--model, default the model of the embeddings;
    external embeddings have none). Two languages encoded by different models are refused unless --force.
    """
    from bitextmine.steps.mine import MineOptions
    from bitextmine.steps.mine import mine as mine_pair
    from bitextmine.workspace.language import open_language

    workspace = Workspace(workdir)
    with user_errors():
        config = cluster.config("mine", workspace.logs_dir("mine"))
        options = MineOptions(
            k=k,
            margin=margin,
            strategy=strategy,
            threshold=_threshold(threshold),
            nprobe=nprobe,
            max_codes=max_codes,
            model=model,
            job_rows=job_rows,
            force=force,
        )
        queries = sum(len(open_language(workspace, lang).vectors) for lang in (src, tgt))
        progress = ProgressDisplay(f"mining {src}-{tgt}", queries)
        with progress:
            summary = mine_pair(workspace, src, tgt, options, progress.advance, config)
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
    rows = [(f"{score:.4f}", src_text, tgt_text) for score, src_text, tgt_text in summary.preview]
    return results_table(
        f"top pairs {summary.pair}", ["score", "source", "target"], rows, text_columns=["source", "target"]
    )
