"""`bitextmine calibrate`: parsing and printing (work: steps/calibrate.py)."""

from __future__ import annotations

from typing import Annotated

import typer

from bitextmine.cli.app import (
    BuccDir,
    DeviceOption,
    MarginOption,
    ModelOption,
    PairOption,
    PrecisionOption,
    StrategyOption,
    ThreadsOption,
    WorkdirOption,
    app,
    load_encoder,
    out,
    require_model,
    set_threads,
    user_errors,
)
from bitextmine.cli.output import ProgressDisplay, scores_table
from bitextmine.workspace.layout import DEFAULT_WORKDIR, Workspace


@app.command()
def calibrate(
    bucc: BuccDir,
    pair: PairOption,
    split: Annotated[str, typer.Option(help="Split to learn the threshold on.")] = "dev",
    model: ModelOption = None,
    workdir: WorkdirOption = DEFAULT_WORKDIR,
    k: Annotated[int, typer.Option("--k", "-k", min=1, help="Neighbours per sentence for the margin.")] = 4,
    margin: MarginOption = "ratio",
    strategy: StrategyOption = "max",
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
    from bitextmine.evaluation.bucc import read_bucc
    from bitextmine.evaluation.calibration import MiningSettings
    from bitextmine.steps.calibrate import calibrate as calibrate_split

    set_threads(threads)
    with user_errors():
        data = read_bucc(bucc, pair, split)
        encoder = load_encoder(require_model(model), device, precision)
        progress = ProgressDisplay(f"encoding {pair} {split}", data.sentences, rates=True)
        with progress:
            calibration = calibrate_split(
                data,
                encoder,
                MiningSettings(k, margin, strategy),
                Workspace(workdir).embedding_cache_dir(),
                progress.advance,
            )
    result = calibration.result
    title = f"calibrate {pair} {split} ({margin} margin, {strategy})"
    out.print(scores_table(title, result.scores, result.threshold, result.candidates))
    out.print(f"threshold {result.threshold:.6f} stored in {calibration.stored_in}", highlight=False)
