"""`bitextmine calibrate` and `bitextmine eval bucc|tatoeba|xsim`: parsing and printing only."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from bitextmine.cli.common import (
    DeviceOption,
    ModelOption,
    PrecisionOption,
    WorkdirOption,
    app,
    err,
    load_encoder,
    out,
    require_model,
    set_threads,
    user_errors,
)
from bitextmine.cli.mine_cmd import MARGIN_HELP, STRATEGY_HELP, progress_bar
from bitextmine.errors import BitextmineError
from bitextmine.fsutil import write_json
from bitextmine.workspace import DEFAULT_WORKDIR

eval_app = typer.Typer(
    help="Standard benchmarks: BUCC-format P/R/F1, Tatoeba accuracy, xsim error rate.", no_args_is_help=True
)
app.add_typer(eval_app, name="eval")

BuccDir = Annotated[
    Path, typer.Option("--bucc", help="Folder with PAIR.SPLIT.{x,en,gold} (BUCC 2018 format).")
]
Pair = Annotated[str, typer.Option(help="Language pair, e.g. de-en.")]
ThreadsOption = Annotated[
    int | None, typer.Option(help="CPU threads for torch \\[default: all cores].", min=1)
]
JsonOption = Annotated[
    Path | None, typer.Option("--json", help="Also write the results as JSON to this file.")
]


def _cache_dir(workdir: Path) -> Path:
    return workdir / "cache" / "embeddings"


def _mine_split(
    bucc: Path, pair: str, split: str, model: str, workdir: Path, device: str, precision: str, settings
):
    from bitextmine.bucc import read_bucc
    from bitextmine.calibrate import mine_split

    data = read_bucc(bucc, pair, split)
    encoder = load_encoder(model, device, precision)
    total = len(data.src.sentences) + len(data.tgt.sentences)
    progress, advance = progress_bar(f"encoding {pair} {split}", total)
    with progress:
        mined = mine_split(data, encoder, settings, _cache_dir(workdir), lambda n, _tokens: advance(n))
    return encoder, mined


def _scores_table(title: str, scores, threshold: float | None, candidates: int) -> Table:
    table = Table(title=title, title_justify="left")
    for name in ("precision", "recall", "F1", "threshold", "candidates", "gold"):
        table.add_column(name, justify="right")
    pct = scores.as_percent()
    table.add_row(
        f"{pct['precision']:.2f}",
        f"{pct['recall']:.2f}",
        f"{pct['f1']:.2f}",
        "—" if threshold is None else f"{threshold:.4f}",
        f"{candidates:,}",
        f"{scores.gold:,}",
    )
    return table


@app.command()
def calibrate(
    bucc: BuccDir,
    pair: Pair,
    split: Annotated[str, typer.Option(help="Split to learn the threshold on.")] = "dev",
    model: ModelOption = None,
    workdir: WorkdirOption = DEFAULT_WORKDIR,
    k: Annotated[int, typer.Option("--k", "-k", min=1, help="Neighbours per sentence for the margin.")] = 4,
    margin: Annotated[str, typer.Option(help=MARGIN_HELP)] = "ratio",
    strategy: Annotated[str, typer.Option(help=STRATEGY_HELP)] = "max",
    device: DeviceOption = "auto",
    precision: PrecisionOption = "auto",
    threads: ThreadsOption = None,
) -> None:
    """Learn the margin threshold with the best F1 on a BUCC-format split and store it in the model dir.

    Reads BUCC/PAIR.SPLIT.{x,en,gold}, encodes both sides (cached in WORK/cache/embeddings), mines
    one-to-one candidates exactly, tries a threshold at every midpoint between consecutive candidate
    scores and writes the best one into MODEL/bitextmine.json (per pair and as the margin's default),
    where `mine --threshold auto` and `eval bucc --threshold auto` find it.
    """
    from bitextmine.calibrate import MiningSettings, calibrate_threshold
    from bitextmine.thresholds import store_threshold

    set_threads(threads)
    with user_errors():
        model = require_model(model)
        encoder, mined = _mine_split(
            bucc, pair, split, model, workdir, device, precision, MiningSettings(k, margin, strategy)
        )
        result = calibrate_threshold(mined)
        path = store_threshold(encoder.loaded.model_dir, margin, pair, result.threshold)
    out.print(
        _scores_table(
            f"calibrate {pair} {split} ({margin} margin, {strategy})",
            result.scores,
            result.threshold,
            result.candidates,
        )
    )
    out.print(f"threshold {result.threshold:.6f} stored in {path}", highlight=False)


@eval_app.command("bucc")
def eval_bucc(
    bucc: BuccDir,
    pair: Pair,
    split: Annotated[str, typer.Option(help="Split to evaluate.")] = "test",
    model: ModelOption = None,
    threshold: Annotated[
        str, typer.Option(help="auto (calibrated), oracle (best on this split) or a number.")
    ] = "auto",
    workdir: WorkdirOption = DEFAULT_WORKDIR,
    mined: Annotated[
        Path | None, typer.Option(help="Score this `mine` output file instead (sentences matched by text).")
    ] = None,
    k: Annotated[int, typer.Option("--k", "-k", min=1, help="Neighbours per sentence for the margin.")] = 4,
    margin: Annotated[str, typer.Option(help=MARGIN_HELP)] = "ratio",
    strategy: Annotated[str, typer.Option(help=STRATEGY_HELP)] = "max",
    device: DeviceOption = "auto",
    precision: PrecisionOption = "auto",
    threads: ThreadsOption = None,
    json_path: JsonOption = None,
) -> None:
    """Precision, recall and F1 on a BUCC-format split.

    Reads BUCC/PAIR.SPLIT.{x,en,gold}; encodes and mines the split with MODEL and keeps pairs scoring
    >= the threshold, or, with --mined, scores a `bitextmine mine` output file. --json FILE gets
    precision, recall and f1 in percent and the threshold.
    """
    from bitextmine.bucc import read_bucc
    from bitextmine.calibrate import MiningSettings, calibrate_threshold, score_mined_file, scores_at
    from bitextmine.thresholds import calibrated_threshold

    set_threads(threads)
    with user_errors():
        if mined is not None:
            scores = score_mined_file(mined, read_bucc(bucc, pair, split))
            used, candidates = None, scores.predicted
        else:
            model = require_model(model)
            encoder, run = _mine_split(
                bucc, pair, split, model, workdir, device, precision, MiningSettings(k, margin, strategy)
            )
            if threshold == "oracle":
                used = calibrate_threshold(run).threshold
            elif threshold == "auto":
                used = calibrated_threshold(encoder.loaded.model_dir, margin, pair)
            else:
                used = _number(threshold)
            scores, candidates = scores_at(run, used), len(run.candidates)
    summary = {
        "pair": pair,
        "split": split,
        **scores.as_percent(),
        "threshold": used,
        "margin": margin,
        "strategy": strategy,
        "predicted": scores.predicted,
        "gold": scores.gold,
    }
    print_report(_scores_table(f"eval bucc {pair} {split}", scores, used, candidates), summary, json_path)


def _number(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise BitextmineError(f"--threshold must be auto, oracle or a number, not {value!r}") from None


def _write_json(path: Path, data: dict) -> None:
    with user_errors():
        write_json(path, data)
    err.print(f"results written to {path}", highlight=False)


def print_report(table: Table, data: dict, json_path: Path | None) -> None:
    out.print(table)
    if json_path is not None:
        _write_json(json_path, data)


def _encode_fn(model: str, device: str, precision: str, workdir: Path):
    from bitextmine.embed_cache import embed

    encoder = load_encoder(model, device, precision)
    return lambda sentences: embed(encoder, sentences, _cache_dir(workdir))


def _languages(value: str | None, available) -> list[str]:
    return available() if value is None else [lang.strip() for lang in value.split(",") if lang.strip()]


@eval_app.command("tatoeba")
def eval_tatoeba(
    data: Annotated[Path, typer.Option(help="Folder with tatoeba.XXX-eng.{XXX,eng} (LASER's Tatoeba v1).")],
    langs: Annotated[
        str | None, typer.Option(help="Comma-separated codes, e.g. deu,fra \\[default: all].")
    ] = None,
    model: ModelOption = None,
    workdir: WorkdirOption = DEFAULT_WORKDIR,
    device: DeviceOption = "auto",
    precision: PrecisionOption = "auto",
    threads: ThreadsOption = None,
    json_path: JsonOption = None,
) -> None:
    """Tatoeba nearest-neighbour accuracy in both directions per language, with averages."""
    from bitextmine.evaluate import evaluate_tatoeba, tatoeba_languages

    set_threads(threads)
    with user_errors():
        encode = _encode_fn(require_model(model), device, precision, workdir)
        result = evaluate_tatoeba(
            data,
            _languages(langs, lambda: tatoeba_languages(data)),
            encode,
            progress=lambda lang: err.print(f"tatoeba {lang}"),
        )
    table = Table(title="Tatoeba accuracy (%)", title_justify="left")
    for name in ("lang", "pairs", "xx→eng", "eng→xx"):
        table.add_column(name, justify="right")
    for row in result.rows:
        table.add_row(row.lang, f"{row.pairs:,}", f"{row.xx_to_eng:.1f}", f"{row.eng_to_xx:.1f}")
    table.add_row("average", "", f"{result.average_xx_to_eng:.2f}", f"{result.average_eng_to_xx:.2f}")
    print_report(table, result.to_json(), json_path)


@eval_app.command("xsim")
def eval_xsim(
    data: Annotated[Path, typer.Option(help="Folder of N-way parallel LANG.SPLIT files (FLORES).")],
    langs: Annotated[
        str | None, typer.Option(help="Comma-separated codes, e.g. deu,fra \\[default: all].")
    ] = None,
    model: ModelOption = None,
    target: Annotated[str, typer.Option(help="Target language code.")] = "eng",
    split: Annotated[str, typer.Option(help="File suffix of the split.")] = "dev",
    margin: Annotated[str, typer.Option(help=MARGIN_HELP)] = "ratio",
    k: Annotated[int, typer.Option("--k", "-k", min=1, help="Neighbours per sentence for the margin.")] = 4,
    workdir: WorkdirOption = DEFAULT_WORKDIR,
    device: DeviceOption = "auto",
    precision: PrecisionOption = "auto",
    threads: ThreadsOption = None,
    json_path: JsonOption = None,
) -> None:
    """xsim error rate (margin-based retrieval, xx→target) on N-way parallel FLORES-style files."""
    from bitextmine.evaluate import evaluate_xsim, flores_languages

    set_threads(threads)
    with user_errors():
        encode = _encode_fn(require_model(model), device, precision, workdir)
        chosen = [lang for lang in _languages(langs, lambda: flores_languages(data, split)) if lang != target]
        result = evaluate_xsim(
            data,
            chosen,
            encode,
            target=target,
            split=split,
            margin=margin,
            k=k,
            progress=lambda lang: err.print(f"xsim {lang}"),
        )
    table = Table(title=f"xsim error rate (%), xx→{target}, {margin} margin", title_justify="left")
    for name in ("lang", "sentences", "errors", "error %"):
        table.add_column(name, justify="right")
    for row in result.rows:
        table.add_row(row.lang, f"{row.sentences:,}", f"{row.errors:,}", f"{row.error_rate:.2f}")
    table.add_row("average", "", "", f"{result.average:.2f}")
    print_report(table, result.to_json(), json_path)
