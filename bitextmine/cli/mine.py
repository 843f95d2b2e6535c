"""`bitextmine mine`: parsing and printing (work: steps/mine.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer
from rich.table import Table

from bitextmine.calibration.thresholds import MARGIN_SCALE, ThresholdChoice, parse_threshold
from bitextmine.cli.app import (
    DeviceOption,
    JsonOption,
    KOption,
    MarginOption,
    MinPrecisionOption,
    ModelOption,
    StrategyOption,
    ThreadsOption,
    ThresholdsOption,
    WorkdirOption,
    app,
    bound_threads,
    checked_by,
    out,
    user_errors,
)
from bitextmine.cli.filter_options import (
    FilterOption,
    MineFiltersOption,
    filtered_table,
    mine_filter_settings,
)
from bitextmine.cli.launcher_options import NO_FLAGS, LauncherFlags, with_launcher_options
from bitextmine.cli.output import ProgressDisplay, emit_json, json_target, results_table
from bitextmine.cli.plots import histogram_lines
from bitextmine.files import STDOUT_FILE, is_stream
from bitextmine.text.languages import check_lang
from bitextmine.workspace.layout import DEFAULT_WORKDIR, Workspace

if TYPE_CHECKING:
    from bitextmine.steps.mine import MineSummary

OutputFormat = Literal["tsv.zst", "tsv.gz", "tsv", "jsonl", "parquet"]  # mining.mined_file.FORMATS


@app.command()
@with_launcher_options
def mine(
    src: Annotated[str, typer.Argument(help="Source language (e.g. de).", callback=checked_by(check_lang))],
    tgt: Annotated[str, typer.Argument(help="Target language (e.g. en).", callback=checked_by(check_lang))],
    workdir: WorkdirOption = DEFAULT_WORKDIR,
    k: KOption = 4,
    margin: MarginOption = "ratio",
    strategy: StrategyOption = "max",
    threshold: Annotated[
        str | None,
        typer.Option(
            help="Keep pairs scoring >= FLOAT, 'auto' (this pair's calibrated threshold) or 'auto:PAIR' "
            "(another pair's) \\[default: keep every one-to-one candidate].",
            callback=checked_by(parse_threshold),
        ),
    ] = None,
    nprobe: Annotated[int | None, typer.Option(help="Override the indexes' stored nprobe.", min=1)] = None,
    device: DeviceOption = "auto",
    max_codes: Annotated[
        int | None,
        typer.Option(
            help="Scan at most this many vectors a query in an IVF index (FAISS's max_codes): the probed "
            "lists in order, the last one cut short. Bounds the time a query costs when k-means lists "
            "are unequal, at the price of recall \\[default: scan every probed list].",
            min=1,
        ),
    ] = None,
    min_precision: MinPrecisionOption = None,
    thresholds: ThresholdsOption = None,
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
    filters: MineFiltersOption = None,
    filter_items: FilterOption = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Write the pairs here ('-': stdout) \\[default: SRC-TGT.FORMAT in WORK/mined].",
        ),
    ] = None,
    output_format: Annotated[
        OutputFormat | None,
        typer.Option(
            "--format",
            metavar="FORMAT",
            help="tsv.zst, tsv.gz, tsv, jsonl or parquet \\[default: from --output's suffix, else tsv.zst].",
        ),
    ] = None,
    threads: ThreadsOption = None,
    json_path: JsonOption = None,
    cluster: LauncherFlags = NO_FLAGS,
) -> None:
    """Mine translation pairs between two encoded and indexed languages.

    Reads WORK/emb/SRC, WORK/emb/TGT, their text shards and WORK/index/{SRC,TGT}.faiss; searches k
    nearest neighbours both ways, recomputes the candidates' cosines from the stored vectors, scores
    them with the margin, keeps each sentence at most once and writes WORK/mined/SRC-TGT.tsv.zst
    (score, source sentence, target sentence, source id, target id; ids are INPUT-PATH:LINE), sorted
    by score, plus WORK/mined/SRC-TGT.stats.json. --threshold auto reads the threshold `bitextmine
    calibrate` stored for this pair and the embeddings' model (WORK/thresholds.json or --thresholds),
    auto:PAIR another pair's; the summary says which threshold was used and where it came from. Pair
    filters (by default --filters web; --filter NAME[=VALUE]) drop pairs that reach the threshold but
    are not translations; their counts go to the stats and the summary. --output/--format write tsv.zst,
    tsv.gz, tsv, jsonl or parquet. Two languages encoded by different models are refused unless --force.
    --json gets the stats file's content.
    """
    from bitextmine.steps.mine import MineOptions
    from bitextmine.steps.mine import mine as mine_pair

    workspace = Workspace(workdir)
    bound_threads(threads)
    with user_errors():
        options = MineOptions(
            k=k,
            margin=margin,
            strategy=strategy,
            threshold=threshold,
            min_precision=min_precision,
            nprobe=nprobe,
            device=device,
            max_codes=max_codes,
            thresholds=thresholds,
            model=model,
            job_rows=job_rows,
            force=force,
            filters=mine_filter_settings(filters, filter_items, src, tgt),
            output=pairs_output(output),
            format=output_format,
        )
        json_out = json_target(json_path, inputs=[thresholds, options.output], workspace=workspace)
        config = cluster.config("mine", workspace.logs_dir("mine"))
        with ProgressDisplay() as progress:
            summary = mine_pair(workspace, src, tgt, options, progress, launcher=config)
    print_mine_summary(summary)
    emit_json(json_out, summary.to_json())


def pairs_output(output: Path | None) -> Path | None:
    """`-o -` is stdout; under a stream output (stdout, a FIFO, a device) the printed summary goes to
    stderr, never among the pairs."""
    path = STDOUT_FILE if output is not None and str(output) == "-" else output
    if path is not None and is_stream(path):
        out.stderr = True
    return path


def print_mine_summary(summary: MineSummary) -> None:
    """The best pairs, the filters' drops, the kept scores' histogram, the threshold (or that there was
    none) and the counts."""
    from bitextmine.steps.corpus_threshold import UNLIKE_NOTE

    out.print(preview_table(f"top pairs {summary.pair}", summary.written.preview))
    counts = summary.counts
    if counts["filtered"]:
        reached = counts["above_threshold"]
        out.print(filtered_table(f"filters {summary.pair}", reached, counts["filtered"], summary.kept))
    if summary.kept:
        histogram = summary.written.histogram
        out.print(f"scores of the {summary.kept:,} pairs kept:", highlight=False)
        out.print("\n".join(histogram_lines(histogram["edges"], histogram["counts"])), highlight=False)
    if summary.threshold is not None:
        out.print(f"threshold {summary.threshold.value:.4f}: {summary.threshold.source}", highlight=False)
        if counts["estimated_precision"] is not None:
            out.print(
                f"estimated precision of the {counts['above_threshold']:,} pairs reaching it: "
                f"{counts['estimated_precision']:.1f}% (from each sentence's runner-up scores; it errs low)",
                highlight=False,
            )
        if counts["estimated_recall"] is not None:
            out.print(
                f"estimated recall: {counts['estimated_recall']:.1f}% of about "
                f"{counts['estimated_translations']:,} translations in the corpus (the share of "
                f"{counts['planted_pairs']:,} planted calibration pairs found: the recall of translations "
                "like them; it errs high where the corpus's translations are harder to find)",
                highlight=False,
            )
        if (counts["calibration_unlike"] or 0) >= UNLIKE_NOTE:
            out.print(
                f"note: the calibration pairs lie in other regions than this corpus's translations (a share "
                f"of {counts['calibration_unlike']:.2f} would have to move, beyond chance): the estimated "
                "recall is that of translations like them; for this corpus's, calibrate on pairs like its "
                "own (`calibrate --pairs SRC TGT`)",
                highlight=False,
            )
    else:
        out.print(no_threshold_note(summary), highlight=False, markup=False, soft_wrap=True)
    reaching = "" if summary.threshold is None else f" with {_reaching(summary.threshold)}"
    kept = f"{summary.kept:,} pairs{reaching}"
    out.print(
        f"{summary.pair}: {counts['src_sentences']:,} x {counts['tgt_sentences']:,} sentences, "
        f"{counts['one_to_one_candidates']:,} one-to-one candidates, {kept} -> {summary.output} "
        f"({summary.seconds:.1f} s)",
        highlight=False,
    )


def _reaching(threshold: ThresholdChoice) -> str:
    name = "score" if threshold.scale == MARGIN_SCALE else threshold.scale
    return f"{name} >= {threshold.value:.4f}"


def no_threshold_note(summary: MineSummary) -> str:
    """Without --threshold every sentence's best match is written, however poor: say so, and how to
    get a threshold."""
    return (
        f"no threshold: the {summary.counts['one_to_one_candidates']:,} one-to-one candidates were not "
        f"thresholded, so pairs of unrelated sentences are among the {summary.kept:,} written. Learn a "
        f"threshold on a BUCC-format split with `bitextmine calibrate --bucc DIR --pair {summary.pair} "
        "--model M` (vectors made elsewhere: `--embeddings DIR --model-name NAME`) and mine with "
        "--threshold auto, or pass --threshold FLOAT"
    )


def preview_table(title: str, preview: list[tuple[float, str, str]]) -> Table:
    """The first pairs written, titled by what they are (mine's are its top pairs)."""
    rows = [(f"{score:.4f}", src_text, tgt_text) for score, src_text, tgt_text in preview]
    return results_table(title, ["score", "source", "target"], rows, text_columns=["source", "target"])
