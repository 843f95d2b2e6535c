"""`bitextmine eval bucc|tatoeba|xsim`: parsing and printing (work: the evaluators of evaluation/)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from bitextmine.calibration.thresholds import parse_threshold
from bitextmine.cli.app import (
    BuccDir,
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
    info,
    load_encoder,
    out,
    require_model,
    set_threads,
    user_errors,
)
from bitextmine.cli.filter_options import FilterOption, FiltersPresetOption, filter_settings
from bitextmine.cli.output import (
    ProgressDisplay,
    fields_table,
    json_target,
    print_results,
    results_table,
    scores_table,
)
from bitextmine.workspace.layout import DEFAULT_WORKDIR, Workspace

eval_app = typer.Typer(
    help="Benchmarks and analyses: BUCC-format P/R/F1, Tatoeba accuracy, xsim error rate, word "
    "alignment and token matching by layer.",
    no_args_is_help=True,
)
app.add_typer(eval_app, name="eval")


def _bucc_threshold(value: str) -> None:
    """eval bucc's --threshold: what parse_threshold reads, or oracle."""
    if value != "oracle":
        parse_threshold(value)


LangsOption = Annotated[
    str | None, typer.Option(help="Comma-separated codes, e.g. deu,fra \\[default: all].")
]


@eval_app.command("bucc")
def eval_bucc(
    bucc: BuccDir,
    pair: PairOption,
    split: Annotated[str, typer.Option(help="Split to evaluate.")] = "test",
    model: ModelOption = None,
    threshold: Annotated[
        str,
        typer.Option(
            help="auto (calibrated for this pair), auto:PAIR (for another pair), oracle (best on this "
            "split) or a number.",
            callback=checked_by(_bucc_threshold),
        ),
    ] = "auto",
    workdir: WorkdirOption = DEFAULT_WORKDIR,
    thresholds: ThresholdsOption = None,
    mined: Annotated[
        Path | None,
        typer.Option(
            help="Score this `mine` output file instead (any format mine writes; sentences matched by text)."
        ),
    ] = None,
    k: KOption = 4,
    margin: MarginOption = "ratio",
    strategy: StrategyOption = "max",
    filters: FiltersPresetOption = "none",
    filter_items: FilterOption = None,
    device: DeviceOption = "auto",
    precision: PrecisionOption = "auto",
    threads: ThreadsOption = None,
    json_path: JsonOption = None,
) -> None:
    """Precision, recall and F1 on a BUCC-format split.

    Reads BUCC/PAIR.SPLIT.{x,en,gold}; encodes and mines the split with MODEL and keeps pairs scoring
    >= the threshold, or, with --mined, scores a `bitextmine mine` output file. `auto` reads the
    threshold `calibrate` stored for the model's fingerprint in WORK/thresholds.json (--thresholds
    FILE), or in an older model dir's bitextmine.json; where it came from is printed. Pair filters
    (--filters, --filter) apply to the pairs reaching the threshold, as in `mine`. --json FILE gets
    precision, recall and f1 in percent, the threshold and the filters' drop counts.
    """
    from bitextmine.calibration.bucc import read_bucc
    from bitextmine.evaluation.bucc import BuccEvaluator, EvaluateOptions, MinedFileEvaluator

    set_threads(threads)
    workspace = Workspace(workdir)
    with user_errors():
        options = EvaluateOptions(
            k=k,
            margin=margin,
            strategy=strategy,
            threshold=threshold,
            thresholds=thresholds,
            filters=filter_settings(filters, filter_items),
        )
        inputs = [*bucc_files(bucc, pair, split), mined, thresholds]
        json_out = json_target(json_path, inputs=inputs, workspace=workspace)
        data = read_bucc(bucc, pair, split)
        if mined is not None:
            evaluation = MinedFileEvaluator(data, mined)()
        else:
            encoder = load_encoder(require_model(model), device, precision)
            with ProgressDisplay() as progress:
                evaluation = BuccEvaluator(data, options, workspace, progress)(encoder)
    scores, used = evaluation.scores, evaluation.threshold
    table = scores_table(f"eval bucc {pair} {split}", scores, used, evaluation.candidates)
    print_results(table, evaluation.to_json(), json_out)
    if evaluation.filtered:
        out.print(
            fields_table("dropped by the filters", [(k, f"{v:,}") for k, v in evaluation.filtered.items()])
        )
    if evaluation.source is not None:
        out.print(f"threshold {used:.6f}: {evaluation.source}", highlight=False, soft_wrap=True)
    if evaluation.sources is not None:
        out.print(evaluation.sources.describe(), highlight=False, soft_wrap=True)


def _languages(value: str | None, available: Callable[[], list[str]]) -> list[str]:
    return available() if value is None else [lang.strip() for lang in value.split(",") if lang.strip()]


@eval_app.command("tatoeba")
def eval_tatoeba(
    data: Annotated[Path, typer.Option(help="Folder with tatoeba.XXX-eng.{XXX,eng} (LASER's Tatoeba v1).")],
    langs: LangsOption = None,
    model: ModelOption = None,
    workdir: WorkdirOption = DEFAULT_WORKDIR,
    device: DeviceOption = "auto",
    precision: PrecisionOption = "auto",
    threads: ThreadsOption = None,
    json_path: JsonOption = None,
) -> None:
    """Tatoeba nearest-neighbour accuracy in both directions per language, with averages."""
    from bitextmine.evaluation.retrieval import TatoebaEvaluator, tatoeba_languages

    set_threads(threads)
    with user_errors():
        workspace = Workspace(workdir)
        json_out = json_target(json_path, inputs=data.glob("*"), workspace=workspace)
        encoder = load_encoder(require_model(model), device, precision)
        chosen = _languages(langs, lambda: tatoeba_languages(data))
        evaluator = TatoebaEvaluator(
            data, chosen, workspace=workspace, progress=lambda lang: info(f"tatoeba {lang}")
        )
        result = evaluator(encoder)
    rows = [(r.lang, f"{r.pairs:,}", f"{r.xx_to_eng:.1f}", f"{r.eng_to_xx:.1f}") for r in result.rows]
    rows.append(("average", "", f"{result.average_xx_to_eng:.2f}", f"{result.average_eng_to_xx:.2f}"))
    table = results_table("Tatoeba accuracy (%)", ["lang", "pairs", "xx→eng", "eng→xx"], rows)
    print_results(table, result.to_json(), json_out)


@eval_app.command("xsim")
def eval_xsim(
    data: Annotated[Path, typer.Option(help="Folder of N-way parallel LANG.SPLIT files (FLORES).")],
    langs: LangsOption = None,
    model: ModelOption = None,
    target: Annotated[str, typer.Option(help="Target language code.")] = "eng",
    split: Annotated[str, typer.Option(help="File suffix of the split.")] = "dev",
    margin: MarginOption = "ratio",
    k: KOption = 4,
    workdir: WorkdirOption = DEFAULT_WORKDIR,
    device: DeviceOption = "auto",
    precision: PrecisionOption = "auto",
    threads: ThreadsOption = None,
    json_path: JsonOption = None,
) -> None:
    """xsim error rate (margin-based retrieval, xx→target) on N-way parallel FLORES-style files."""
    from bitextmine.evaluation.retrieval import XsimEvaluator, flores_languages

    set_threads(threads)
    with user_errors():
        workspace = Workspace(workdir)
        json_out = json_target(json_path, inputs=data.glob("*"), workspace=workspace)
        encoder = load_encoder(require_model(model), device, precision)
        chosen = [lang for lang in _languages(langs, lambda: flores_languages(data, split)) if lang != target]
        evaluator = XsimEvaluator(
            data,
            chosen,
            target=target,
            split=split,
            margin=margin,
            k=k,
            workspace=workspace,
            progress=lambda lang: info(f"xsim {lang}"),
        )
        result = evaluator(encoder)
    rows = [(r.lang, f"{r.sentences:,}", f"{r.errors:,}", f"{r.error_rate:.2f}") for r in result.rows]
    rows.append(("average", "", "", f"{result.average:.2f}"))
    title = f"xsim error rate (%), xx→{target}, {margin} margin"
    print_results(
        results_table(title, ["lang", "sentences", "errors", "error %"], rows), result.to_json(), json_out
    )
