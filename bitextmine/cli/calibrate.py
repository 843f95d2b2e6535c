"""`bitextmine calibrate`: parsing and printing (work: steps/calibrate.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from bitextmine.calibration.sweep import plateau_rule, target_rule
from bitextmine.cli.app import (
    DeviceOption,
    JsonOption,
    KOption,
    MarginOption,
    ModelOption,
    PairOption,
    PrecisionOption,
    StrategyOption,
    ThreadsOption,
    ThresholdsOption,
    WorkdirOption,
    app,
    bucc_files,
    checked_by,
    load_encoder,
    out,
    refuse_flags,
    require_model,
    set_threads,
    user_errors,
)
from bitextmine.cli.output import ProgressDisplay, emit_json, json_target, scores_table
from bitextmine.cli.plots import CURVES, curve_lines, curve_range, save_calibration_plot
from bitextmine.errors import BitextmineError
from bitextmine.files import output_target
from bitextmine.workspace.layout import DEFAULT_WORKDIR, Workspace

if TYPE_CHECKING:
    from bitextmine.steps.calibrate import Calibration


@app.command()
def calibrate(
    context: typer.Context,
    pair: PairOption,
    bucc: Annotated[
        Path | None,
        typer.Option("--bucc", help="Folder with PAIR.SPLIT.{x,en,gold} (BUCC 2018 format)."),
    ] = None,
    pairs: Annotated[
        tuple[Path, Path] | None,
        typer.Option(
            metavar="SRC TGT",
            help="Calibrate on two line-aligned files instead of a BUCC split: line i of TGT translates "
            "line i of SRC (FLORES dev, Tatoeba, your own pairs).",
        ),
    ] = None,
    split: Annotated[str, typer.Option(help="Split to learn the threshold on.")] = "dev",
    model: ModelOption = None,
    workdir: WorkdirOption = DEFAULT_WORKDIR,
    thresholds: ThresholdsOption = None,
    target_precision: Annotated[
        float | None,
        typer.Option(
            metavar="P",
            help="Take the lowest threshold whose precision on the split is >= P (0 < P <= 1).",
            callback=checked_by(target_rule),
        ),
    ] = None,
    plateau: Annotated[
        float | None,
        typer.Option(
            metavar="POINTS",
            help="Take the middle of the thresholds whose F1 is within POINTS of the best: steadier where "
            "the split to mine scores differently (a trained model's optimum is flat); 0: the best F1 "
            "\\[default: 1 for a model bitextmine trained, else the best F1].",
            callback=checked_by(plateau_rule),
        ),
    ] = None,
    json_path: JsonOption = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE.png", help="Draw P, R and F1 against the threshold (needs the plot extra)."
        ),
    ] = None,
    k: KOption = 4,
    margin: MarginOption = "ratio",
    strategy: StrategyOption = "max",
    device: DeviceOption = "auto",
    precision: PrecisionOption = "auto",
    threads: ThreadsOption = None,
    embeddings: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR",
            help="Calibrate vectors made elsewhere instead of encoding: DIR/PAIR.SPLIT.LANG.npy for each "
            "side (with --pairs: DIR/NAME.npy for each file NAME), float32 or float16 \\[lines, dim], row i "
            "for line i of the file.",
            rich_help_panel="Bring your own embeddings",
        ),
    ] = None,
    model_name: Annotated[
        str | None,
        typer.Option(
            help="The model that made the --embeddings, named as to `encode --embeddings --model-name`: "
            "`mine --threshold auto` finds the threshold under that name.",
            rich_help_panel="Bring your own embeddings",
        ),
    ] = None,
) -> None:
    """Learn the margin threshold on a BUCC-format split or two line-aligned files and store it.

    Reads BUCC/PAIR.SPLIT.{x,en,gold} (or --pairs SRC TGT, of which every second line's target is left
    out so that half the sources have no translation), encodes both sides (cached in
    WORK/cache/embeddings; a sentence that `encode` already stored in WORK with the same model and
    precision is not encoded again), mines one-to-one candidates exactly and tries a threshold at every
    midpoint between consecutive candidate scores. Keeps the best F1, or for a model bitextmine trained
    the middle of the thresholds within 1 F1 point of the best (which carried better to other splits),
    or what --target-precision or --plateau asks, and records it, with its P/R/F1, split and rule, under
    the model's fingerprint, the margin and the pair in WORK/thresholds.json (or --thresholds FILE),
    where `mine --threshold auto` and `eval bucc` find it. The split's gold pairs are kept beside it:
    `mine --threshold auto` plants them in the corpus it mines and learns the threshold there. Nothing
    is written into the model dir. Prints the curve as a text plot; --json PATH|- writes the settings,
    the chosen point and every threshold's P/R/F1, and --plot FILE.png draws them. With --embeddings DIR
    and --model-name NAME, the split's vectors come from DIR instead of a model.
    """
    from bitextmine.calibration.aligned_pairs import read_aligned
    from bitextmine.calibration.bucc import read_bucc
    from bitextmine.calibration.split_mining import (
        pairs_vectors_files,
        read_pairs_vectors,
        read_split_vectors,
        split_vectors_files,
    )
    from bitextmine.steps.calibrate import CalibrateOptions, calibrate_embeddings
    from bitextmine.steps.calibrate import calibrate as calibrate_split

    workspace = Workspace(workdir)
    store = thresholds or workspace.thresholds_file()
    with user_errors():
        options = CalibrateOptions(
            k=k,
            margin=margin,
            strategy=strategy,
            target_precision=target_precision,
            plateau=plateau,
            thresholds=thresholds,
        )
        model_given = context.get_parameter_source("model").name == "COMMANDLINE"  # not BITEXTMINE_MODEL
        _check_vector_options(embeddings, model_name, model_given, device, precision, threads)
        _check_source(bucc, pairs)
        if embeddings is None:
            vectors = []
        elif pairs:
            vectors = list(pairs_vectors_files(embeddings, *pairs))
        else:
            vectors = list(split_vectors_files(embeddings, pair, split))
        inputs = [*(pairs or bucc_files(bucc, pair, split)), store, *vectors]
        json_out = json_target(json_path, inputs=[*inputs, plot], workspace=workspace)
        plot_out = None if plot is None else output_target(plot, inputs=inputs, workspace=workspace)
        data = read_aligned(*pairs, pair) if pairs else read_bucc(bucc, pair, split)
        if embeddings is not None:
            read = (
                read_pairs_vectors(embeddings, pairs, data) if pairs else read_split_vectors(embeddings, data)
            )
            calibration = calibrate_embeddings(workspace, data, read, model_name or "", options)
        else:
            set_threads(threads)
            encoder = load_encoder(require_model(model), device, precision)
            with ProgressDisplay() as progress:
                calibration = calibrate_split(workspace, data, encoder, options, progress)
        report = calibration.to_json()
        title = f"calibrate {pair} {data.split} ({margin} margin, {strategy})"
        if plot_out is not None:
            save_calibration_plot(plot_out, report["curve"], report["chosen"], title)
    _print_calibration(calibration, report, title, vectors)
    if plot is not None:
        out.print(f"plot written to {plot}", highlight=False, soft_wrap=True)
    emit_json(json_out, report)


def _print_calibration(
    calibration: Calibration, report: dict[str, Any], title: str, vectors: list[Path]
) -> None:
    """The scores at the threshold, the curve, what was stored where, and where the vectors came from
    (`vectors`: the files of --embeddings)."""
    result = calibration.result
    out.print(scores_table(title, result.scores, result.threshold, result.candidates))
    for line in _curve_plot(report):
        out.print(line, highlight=False, markup=False)
    record = calibration.record
    out.print(
        f"threshold {record.value:.6f} ({record.rule}) for {record.model} (fingerprint {record.fingerprint}) "
        f"stored in {calibration.stored_in}",
        highlight=False,
        soft_wrap=True,
    )
    out.print(
        f"its {calibration.result.scores.gold:,} gold pairs kept in {calibration.pairs_in}, for `mine "
        "--threshold auto` to plant in the corpus it mines",
        highlight=False,
        soft_wrap=True,
    )
    if calibration.rule_note:
        out.print(f"rule: {record.rule}, {calibration.rule_note}", highlight=False, soft_wrap=True)
    if calibration.sources is not None:
        out.print(calibration.sources.describe(), highlight=False, soft_wrap=True)
    else:
        files = " and ".join(map(str, vectors))
        out.print(f"sentence vectors: read from {files}", highlight=False, markup=False, soft_wrap=True)


def _check_source(bucc: Path | None, pairs: tuple[Path, Path] | None) -> None:
    """One calibration set: a BUCC split or two line-aligned files (encoded here)."""
    if (bucc is None) == (pairs is None):
        raise BitextmineError(
            "calibrate: give --bucc DIR (a BUCC split) or --pairs SRC TGT (line-aligned files)"
        )


def _check_vector_options(
    embeddings: Path | None,
    model_name: str | None,
    model_given: bool,
    device: str,
    precision: str,
    threads: int | None,
) -> None:
    """--embeddings calibrates without a model: the options of one are refused, not ignored."""
    if embeddings is None:
        if model_name is not None:
            raise BitextmineError("--model-name names the model of --embeddings: add --embeddings DIR")
        return
    if not model_name:
        raise BitextmineError(f"{embeddings}: --embeddings needs --model-name, the model that made them")
    used = {
        "--model": model_given,
        "--device": device != "auto",
        "--precision": precision != "auto",
        "--threads": threads is not None,
    }
    refuse_flags(used, "--embeddings calibrates vectors made elsewhere, without a model")


def _curve_plot(report: dict[str, Any]) -> list[str]:
    curve = report["curve"]
    x = [point["threshold"] for point in curve]
    series = {label: [point[key] for point in curve] for key, label in CURVES.items()}
    return curve_lines(x, series, mark=report["chosen"]["threshold"], x_range=curve_range(curve))
