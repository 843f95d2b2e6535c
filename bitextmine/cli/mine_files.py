"""`bitextmine mine-files`: parsing and printing (work: steps/mine_files.py, which runs encode, index and
mine)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bitextmine.cli.app import (
    DeviceOption,
    ForceLangOption,
    JsonOption,
    KOption,
    LidOption,
    MarginOption,
    MinPrecisionOption,
    ModelOption,
    PrecisionOption,
    StrategyOption,
    ThreadsOption,
    ThresholdsOption,
    app,
    check_known_langs,
    encoder_spec,
    out,
    require_model,
    set_threads,
    user_errors,
)
from bitextmine.cli.filter_options import FilterOption, MineFiltersOption, mine_filter_settings
from bitextmine.cli.mine import OutputFormat, pairs_output, print_mine_summary
from bitextmine.cli.output import ProgressDisplay, emit_json, json_target
from bitextmine.workspace.layout import Workspace


@app.command("mine-files")
def mine_files(
    src_file: Annotated[Path, typer.Argument(help="Source text file, one sentence a line (.gz, .zst, .xz).")],
    tgt_file: Annotated[Path, typer.Argument(help="Target text file, one sentence a line.")],
    src: Annotated[str, typer.Option("--src", help="Source language (e.g. de).")],
    tgt: Annotated[str, typer.Option("--tgt", help="Target language (e.g. en).")],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Where to write the mined pairs ('-': stdout).")
    ],
    model: ModelOption = None,
    workdir: Annotated[
        Path | None,
        typer.Option(
            "--workdir",
            "-w",
            help="Workspace of the steps, kept for reruns \\[default: OUTPUT's folder/NAME-work, NAME the "
            "output's name without its format suffix; ./SRC-TGT-work for a stream: -, a FIFO, a device].",
        ),
    ] = None,
    k: KOption = 4,
    margin: MarginOption = "ratio",
    strategy: StrategyOption = "max",
    threshold: Annotated[
        str | None,
        typer.Option(
            help="Keep pairs scoring >= FLOAT, 'auto' or 'auto:PAIR', as in `mine` \\[default: keep every "
            "one-to-one candidate]."
        ),
    ] = None,
    min_precision: MinPrecisionOption = None,
    thresholds: ThresholdsOption = None,
    filters: MineFiltersOption = None,
    filter_items: FilterOption = None,
    output_format: Annotated[
        OutputFormat | None,
        typer.Option("--format", help="Output format \\[default: from --output's suffix]."),
    ] = None,
    device: DeviceOption = "auto",
    precision: PrecisionOption = "auto",
    lid: LidOption = None,
    force_lang: ForceLangOption = False,
    threads: ThreadsOption = None,
    json_path: JsonOption = None,
) -> None:
    """Mine translation pairs between two text files in one command (LASER's mine_bitexts.py).

    Runs `encode` on each file, `index` on each language and `mine` in a workspace (--workdir, by
    default beside the output) that is kept: a rerun, with other mining options too, reuses the text
    and embedding shards, the indexes and the neighbour lists, and an interrupted run resumes. The
    options are `mine`'s; the summary is mine's, with the workspace. --json gets the steps' results.
    """
    from bitextmine.steps.encode import EncodeOptions
    from bitextmine.steps.mine import MineOptions
    from bitextmine.steps.mine_files import default_workdir
    from bitextmine.steps.mine_files import mine_files as mine_both

    check_known_langs([src, tgt], force_lang)
    with user_errors():
        options = MineOptions(
            k=k,
            margin=margin,
            strategy=strategy,
            threshold=threshold,
            min_precision=min_precision,
            thresholds=thresholds,
            filters=mine_filter_settings(filters, filter_items, src, tgt),
            output=pairs_output(output),
            format=output_format,
            device=device,
            model=model,
        )
        workspace = Workspace(workdir or default_workdir(options.output, output_format, f"{src}-{tgt}"))
        inputs = [src_file, tgt_file, thresholds, options.output]
        json_out = json_target(json_path, inputs=inputs, workspace=workspace)
        spec = encoder_spec(require_model(model), device, precision)
        set_threads(threads)
        with ProgressDisplay() as progress:
            files, langs = (src_file, tgt_file), (src, tgt)
            encoding = EncodeOptions(lid=lid)
            summary = mine_both(workspace, files, langs, spec, options, progress, encode_options=encoding)
    print_mine_summary(summary.mined)
    out.print(
        f"workspace {summary.workspace} kept: a rerun reuses its shards, indexes and neighbour lists",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    emit_json(json_out, summary.to_json())
