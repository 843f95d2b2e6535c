"""`bitextmine score`: parsing and printing (work: steps/score.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from bitextmine.calibration.thresholds import parse_threshold
from bitextmine.cli.app import (
    DeviceOption,
    JsonOption,
    KOption,
    MarginOption,
    ModelOption,
    PrecisionOption,
    ThreadsOption,
    ThresholdsOption,
    WorkdirOption,
    app,
    checked_by,
    given,
    load_encoder,
    out,
    require_model,
    set_threads,
    user_errors,
)
from bitextmine.cli.filter_options import FilterOption, FiltersPresetOption, filter_settings, filtered_table
from bitextmine.cli.mine import OutputFormat, preview_table
from bitextmine.cli.output import ProgressDisplay, emit_json, json_target
from bitextmine.files import output_target
from bitextmine.text.bitext import check_columns
from bitextmine.text.languages import check_lang
from bitextmine.workspace.layout import DEFAULT_WORKDIR, Workspace

if TYPE_CHECKING:
    from bitextmine.steps.score import ScoreSummary

Neighbourhood = Literal["bitext", "workspace"]  # steps/score.py's NEIGHBOURHOODS


@app.command()
def score(
    context: typer.Context,
    bitext: Annotated[
        list[Path], typer.Argument(help="Two line-aligned files (SRC then TGT), or one TAB-separated file.")
    ],
    src: Annotated[
        str, typer.Option("--src", help="Source language (e.g. de).", callback=checked_by(check_lang))
    ],
    tgt: Annotated[
        str, typer.Option("--tgt", help="Target language (e.g. en).", callback=checked_by(check_lang))
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the scored pairs.")],
    model: ModelOption = None,
    workdir: WorkdirOption = DEFAULT_WORKDIR,
    columns: Annotated[
        tuple[int, int],
        typer.Option(
            help="With one TSV file: its 1-based source and target columns.",
            callback=checked_by(check_columns),
        ),
    ] = (1, 2),
    neighbourhood: Annotated[
        Neighbourhood,
        typer.Option(
            help="bitext: the margin's neighbours are the bitext's own other side (LASER's score mode); "
            "workspace: the encoded and indexed SRC and TGT corpora of --workdir (scores as `mine` gives)."
        ),
    ] = "bitext",
    k: KOption = 4,
    margin: MarginOption = "ratio",
    threshold: Annotated[
        str | None,
        typer.Option(
            help="Write only pairs scoring >= FLOAT, 'auto' (this pair's calibrated threshold) or "
            "'auto:PAIR' (another pair's) \\[default: write every pair].",
            callback=checked_by(parse_threshold),
        ),
    ] = None,
    thresholds: ThresholdsOption = None,
    filters: FiltersPresetOption = "none",
    filter_items: FilterOption = None,
    output_format: Annotated[
        OutputFormat | None,
        typer.Option(
            "--format",
            metavar="FORMAT",
            help="tsv.zst, tsv.gz, tsv, jsonl or parquet \\[default: from --output's suffix].",
        ),
    ] = None,
    device: DeviceOption = "auto",
    precision: PrecisionOption = "auto",
    threads: ThreadsOption = None,
    json_path: JsonOption = None,
) -> None:
    """Margin-score an existing bitext, to filter a corpus you already have.

    Encodes both sides (vectors cached in WORK/cache/embeddings where --workdir is given or WORK exists),
    scores each pair as `mine` scores its candidates and writes the pairs, in input order, in `mine`'s
    output format (ids: INPUT-PATH:LINE, the absolute path).
    Pairs with an empty side are left out and counted. --threshold and the pair filters keep only the
    pairs that reach the threshold and pass the filters.
    """
    from bitextmine.text.bitext import read_bitext

    workspace = Workspace(workdir)
    with user_errors():  # before torch loads: a bad option or file fails at once
        settings = filter_settings(filters, filter_items)
        output_target(output, inputs=[*bitext, thresholds], workspace=workspace)
        json_out = json_target(json_path, inputs=[*bitext, thresholds, output], workspace=workspace)
        data = read_bitext([str(p) for p in bitext], columns)
    from bitextmine.steps.score import ScoreOptions, score_bitext

    set_threads(threads)
    with user_errors():
        options = ScoreOptions(
            k=k,
            margin=margin,
            neighbourhood=neighbourhood,
            threshold=threshold,
            filters=settings,
            format=output_format,
            thresholds=thresholds,
            cache=_asked_for(context, workspace),
        )
        encoder = load_encoder(require_model(model), device, precision)
        with ProgressDisplay() as progress:
            summary = score_bitext(workspace, data, (src, tgt), encoder, output, options, progress)
    _print_score_summary(summary)
    emit_json(json_out, summary.to_json())


def _print_score_summary(summary: ScoreSummary) -> None:
    """The first pairs written, the filters' drops, the threshold and the counts."""
    out.print(preview_table(f"first pairs written {summary.pair}, in input order", summary.written.preview))
    if summary.filtered:
        out.print(
            filtered_table(
                f"filters {summary.pair}", summary.above_threshold, summary.filtered, summary.written.kept
            )
        )
    if summary.threshold is not None:
        out.print(f"threshold {summary.threshold.value:.4f}: {summary.threshold.source}", highlight=False)
    empty = f" ({summary.empty:,} with an empty side left out)" if summary.empty else ""
    out.print(
        f"{summary.pair}: {summary.pairs:,} pairs scored{empty}, {summary.written.kept:,} written -> "
        f"{summary.written.path} ({summary.seconds:.1f} s)",
        highlight=False,
    )


def _asked_for(context: typer.Context, workspace: Workspace) -> bool:
    """Whether the vectors go to the workspace's cache: where --workdir (or $BITEXTMINE_WORKDIR) names
    it or it exists, never into a ./bitextmine-work that a plain `score` would create unasked."""
    return given(context, "workdir") or workspace.root.is_dir()
