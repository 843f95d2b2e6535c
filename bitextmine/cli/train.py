"""`bitextmine train`: parsing and the live progress table (work: bitextmine/train/)."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich.live import Live

from bitextmine.cli.app import (
    DeviceOption,
    JsonOption,
    app,
    checked_by,
    err,
    given_names,
    info,
    out,
    positive,
    set_threads,
    shows,
    user_errors,
    warn,
)
from bitextmine.cli.output import ProgressDisplay, emit_json, fields_table, json_target
from bitextmine.cli.train_flags import TrainFlags
from bitextmine.progress import LOG_EVERY_SECONDS, Progress
from bitextmine.train.objectives.names import parse_objectives
from bitextmine.train.objectives.settings import (
    ContrastiveSettings,
    DistillSettings,
    MexmaSettings,
    RtlSettings,
    VmsstSettings,
    objective_names,
)
from bitextmine.train.recipes import RECIPES, recipe_named, with_recipe

if TYPE_CHECKING:
    from bitextmine.train.loop import TrainSummary

SHOWN_TERMS = 6


class _LiveReporter:
    """The latest losses, speed and evaluation results: on a terminal a table redrawn after every step;
    in a log file a plain line every LOG_EVERY_SECONDS, after each evaluation and at the end; nothing under
    --quiet."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.shown = shows(logging.INFO)
        self.live = (
            Live(console=err, auto_refresh=False, transient=False) if self.shown and err.is_terminal else None
        )
        self.clock, self.last_line = clock, 0.0
        self.record: dict[str, Any] = {}
        self.evaluation: dict[str, float] = {}
        self.evaluated_at = 0

    def started(self, config, resumed_from: int, languages: list[str]) -> None:
        where = f"resuming at step {resumed_from}" if resumed_from else "starting"
        info(f"train: {where}; languages {', '.join(languages)}; objectives {config.objectives}")
        self.last_line = self.clock()

    def step(self, record: dict[str, Any]) -> None:
        self.record = record
        self._draw()

    def evaluated(self, step: int, results: dict[str, float]) -> None:
        self.evaluation, self.evaluated_at = results, step
        self._draw(now=True)

    def checkpoint(self, path: Path) -> None:
        info(f"checkpoint {path}")

    def note(self, message: str) -> None:
        info(message)

    def warning(self, message: str) -> None:
        warn(message)

    def progress(self) -> Progress:
        """A display of work before the first step (the first hard-negative pool): the table, drawn from
        the first step on, is the one live display a terminal has after that."""
        return ProgressDisplay() if not self.record and not self.evaluation else Progress()

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
        elif self.shown and (self.record or self.evaluation):
            err.print(self._line(), highlight=False, soft_wrap=True)

    def _draw(self, now: bool = False) -> None:
        if self.live is not None:
            if not self.live.is_started:
                self.live.start()
            self.live.update(fields_table("training", self._rows()), refresh=True)
        elif self.shown and (now or self.clock() - self.last_line >= LOG_EVERY_SECONDS):
            self.last_line = self.clock()
            err.print(self._line(), highlight=False, soft_wrap=True)

    def _line(self) -> str:
        return "train: " + ", ".join(f"{name} {value}" for name, value in self._rows())

    def _rows(self) -> list[tuple[str, str]]:
        rows = []
        r = self.record
        if r:
            rows += [("step", f"{r['step']:,}"), ("loss", f"{r['loss']:.4f}")]
            rows += [(key, f"{r[key]:.4f}") for key in [k for k in r if "/" in k][:SHOWN_TERMS]]
            rows += [
                ("lr", f"{r['lr']:.2e}"),
                ("pairs/s", f"{r['pairs_per_s']:,.1f}"),
                ("elapsed", f"{r['elapsed_s'] / 60:,.1f} min"),
            ]
        rows += [
            (f"{key} (step {self.evaluated_at})", f"{value:.2f}") for key, value in self.evaluation.items()
        ]
        return rows


@app.command()
def train(
    ctx: typer.Context,
    data: Annotated[
        list[str],
        typer.Option(
            help="Pair files X.xx (with X.en or X.eng next to it), xx.SPLIT (with eng.SPLIT next to it, as "
            "FLORES), NAME.xx-en.tsv files, mine's output named after its pair (de-en.tsv.zst, .tsv.gz, "
            ".tsv, .jsonl, .parquet) or directories of them."
        ),
    ],
    out_dir: Annotated[Path, typer.Option("--out", help="Output model dir (checkpoints and log inside).")],
    objectives: Annotated[
        str,
        typer.Option(
            help=f"Objectives with weights: {', '.join(objective_names())}; e.g. contrastive,xtr=0.5 for xtr "
            "at half weight.",
            callback=checked_by(parse_objectives),
        ),
    ] = "contrastive",
    recipe: Annotated[
        str | None,
        typer.Option(
            help=f"Settings measured best for a purpose ({', '.join(RECIPES)}; docs/training.md, Recipes); "
            "options given explicitly override them.",
            callback=checked_by(recipe_named),
        ),
    ] = None,
    base: Annotated[str | None, typer.Option(help="Hugging Face model dir or hub id to fine-tune.")] = None,
    from_scratch: Annotated[
        bool, typer.Option("--from-scratch", help="Small XLM-R-style model with a SentencePiece vocabulary.")
    ] = False,
    exclude: Annotated[
        list[str] | None,
        typer.Option(help="Files or dirs of evaluation sentences: pairs containing any are skipped."),
    ] = None,
    min_score: Annotated[
        float | None,
        typer.Option(help="Mined files: keep the pairs scoring at least this \\[default: all]."),
    ] = None,
    weight_by_score: Annotated[
        bool,
        typer.Option(
            "--weight-by-score",
            help="Mined files: weight each pair's contrastive loss by its score above --min-score "
            "(or the file's lowest score), averaging 1 per file.",
        ),
    ] = False,
    max_steps: Annotated[
        int | None, typer.Option(help="Stop after this many optimizer steps.", min=1)
    ] = None,
    max_minutes: Annotated[
        float | None, typer.Option(help="Stop after this much wall time.", callback=checked_by(positive))
    ] = None,
    lr: Annotated[
        float, typer.Option(help="Peak learning rate (AdamW).", callback=checked_by(positive))
    ] = 2e-5,
    warmup_steps: Annotated[int, typer.Option(help="Linear warm-up steps.", min=0)] = 100,
    grad_accum: Annotated[int, typer.Option(help="Batches per optimizer step.", min=1)] = 1,
    clip: Annotated[float, typer.Option(help="Gradient norm clip (0: off).", min=0)] = 1.0,
    bf16: Annotated[
        Literal["auto", "on", "off"], typer.Option(help="bf16 autocast: auto (where native), on, off.")
    ] = "auto",
    seed: Annotated[int, typer.Option(help="Seed of initialisation, data order and masks.", min=0)] = 0,
    max_tokens: Annotated[int, typer.Option(help="Token budget of a batch (both sides).", min=2)] = 8192,
    max_pairs: Annotated[int, typer.Option(help="At most this many pairs per batch.", min=1)] = 256,
    max_length: Annotated[int, typer.Option(help="Tokens kept per sentence.", min=2)] = 128,
    checkpoint_every: Annotated[
        int, typer.Option(help="Steps between checkpoints (0: end only).", min=0)
    ] = 200,
    eval_every: Annotated[int, typer.Option(help="Steps between evaluations (0: end only).", min=0)] = 0,
    eval_bucc: Annotated[
        list[Path] | None,
        typer.Option(help="BUCC-format pair dir to evaluate on (dev split), e.g. bucc-like/de-en."),
    ] = None,
    eval_tatoeba: Annotated[Path | None, typer.Option(help="Tatoeba dir for evaluation.")] = None,
    eval_langs: Annotated[str, typer.Option(help="Tatoeba languages, e.g. deu,fra.")] = "",
    eval_max_sentences: Annotated[
        int | None, typer.Option(help="Sample BUCC sides to about this many sentences.", min=10)
    ] = None,
    temperature: Annotated[
        float, typer.Option(help="Contrastive temperature.", callback=checked_by(positive))
    ] = ContrastiveSettings.temperature,
    margin: Annotated[
        float, typer.Option(help="Contrastive additive margin (LaBSE AMS: 0.3).", min=0)
    ] = ContrastiveSettings.margin,
    projection: Annotated[
        bool, typer.Option("--projection", help="EMS MLP projection before the cosine.")
    ] = ContrastiveSettings.projection,
    hard_negatives: Annotated[
        int,
        typer.Option(
            help="contrastive: N hard negatives a pair, mined by margin with the model being trained from "
            "the next --negative-pool pairs, likely translations left out (0: none; docs/training.md).",
            metavar="N",
            min=0,
        ),
    ] = 0,
    hard_negative_refresh: Annotated[
        int,
        typer.Option(
            "--negative-refresh", metavar="STEPS", help="Steps between minings of hard negatives.", min=1
        ),
    ] = 100,
    hard_negative_pool: Annotated[
        int,
        typer.Option(
            "--negative-pool",
            metavar="PAIRS",
            help="Pairs mined for hard negatives at once (at least --max-pairs).",
            min=1,
        ),
    ] = 20_000,
    mask_ratio: Annotated[
        float, typer.Option(help="MEXMA masking ratio.", min=0, max=1)
    ] = MexmaSettings.mask_ratio,
    no_token_gradients: Annotated[
        bool,
        typer.Option(
            "--no-token-gradients", help="MEXMA: keep token-level losses from updating the encoder."
        ),
    ] = not MexmaSettings.token_gradients,
    mexma_alignment: Annotated[
        Literal["mse", "contrastive"], typer.Option(help="MEXMA alignment: mse or contrastive.")
    ] = MexmaSettings.mexma_alignment,
    rtl_layers: Annotated[
        int, typer.Option(help="RTL: blocks of the head, copies of the encoder's last ones.", min=1)
    ] = RtlSettings.rtl_layers,
    vmsst_lambda: Annotated[
        float,
        typer.Option(help="VMSST: weight λ of the ELBO (paper: 0.025 fine-tuning, 0.1 from scratch).", min=0),
    ] = VmsstSettings.vmsst_lambda,
    vmsst_kl_steps: Annotated[
        int,
        typer.Option(
            help="VMSST: batches over which the KL weight rises from 0 to 1 (0: 1 from the start).", min=0
        ),
    ] = VmsstSettings.vmsst_kl_steps,
    vmsst_latent_dim: Annotated[
        int | None,
        typer.Option(help="VMSST: size of the latent variables \\[default: the hidden size].", min=1),
    ] = VmsstSettings.vmsst_latent_dim,
    vmsst_language_layers: Annotated[
        int,
        typer.Option(
            help="VMSST: layers of the language encoder, copies of the encoder's first ones.", min=1
        ),
    ] = VmsstSettings.vmsst_language_layers,
    vmsst_decoder_layers: Annotated[
        int, typer.Option(help="VMSST: layers of the decoder.", min=1)
    ] = VmsstSettings.vmsst_decoder_layers,
    teacher: Annotated[
        str | None,
        typer.Option(help="distill: the frozen teacher model (dir or hub id) \\[default: --base]."),
    ] = DistillSettings.teacher,
    vocab_size: Annotated[int, typer.Option(help="--from-scratch vocabulary size.", min=1)] = 16000,
    layers: Annotated[int, typer.Option(help="--from-scratch layers.", min=1)] = 6,
    hidden: Annotated[int, typer.Option(help="--from-scratch hidden size.", min=1)] = 384,
    heads: Annotated[int, typer.Option(help="--from-scratch attention heads.", min=1)] = 6,
    padded: Annotated[
        bool,
        typer.Option(
            "--padded", help="Padded forward instead of packing (the one for models other than BERT-family)."
        ),
    ] = False,
    device: DeviceOption = "auto",
    threads: Annotated[int | None, typer.Option(help="CPU threads for torch.", min=1)] = None,
    json_path: JsonOption = None,
) -> None:
    """Train a cross-lingual sentence encoder on line-aligned (xx, en) pairs.

    Batches are built by a token budget and packed with block-diagonal attention (forward and
    backward). Checkpoints go to OUT/checkpoints (a rerun with the same settings resumes exactly),
    per-step records to OUT/train_log.jsonl, and the final model (weights, tokenizer, bitextmine.json)
    to OUT, which `bitextmine encode --model OUT` loads.
    """
    from bitextmine.train.loop import train as run_training

    set_threads(threads)
    reporter = _LiveReporter()
    flags = TrainFlags(
        data=data,
        out_dir=out_dir,
        objectives=objectives,
        base=base,
        from_scratch=from_scratch,
        exclude=exclude,
        min_score=min_score,
        weight_by_score=weight_by_score,
        max_steps=max_steps,
        max_minutes=max_minutes,
        lr=lr,
        warmup_steps=warmup_steps,
        grad_accum=grad_accum,
        clip=clip,
        bf16=bf16,
        seed=seed,
        max_tokens=max_tokens,
        max_pairs=max_pairs,
        max_length=max_length,
        checkpoint_every=checkpoint_every,
        eval_every=eval_every,
        eval_bucc=eval_bucc,
        eval_tatoeba=eval_tatoeba,
        eval_langs=eval_langs,
        eval_max_sentences=eval_max_sentences,
        temperature=temperature,
        margin=margin,
        projection=projection,
        hard_negatives=hard_negatives,
        hard_negative_refresh=hard_negative_refresh,
        hard_negative_pool=hard_negative_pool,
        mask_ratio=mask_ratio,
        no_token_gradients=no_token_gradients,
        mexma_alignment=mexma_alignment,
        rtl_layers=rtl_layers,
        vmsst_lambda=vmsst_lambda,
        vmsst_kl_steps=vmsst_kl_steps,
        vmsst_latent_dim=vmsst_latent_dim,
        vmsst_language_layers=vmsst_language_layers,
        vmsst_decoder_layers=vmsst_decoder_layers,
        teacher=teacher,
        vocab_size=vocab_size,
        layers=layers,
        hidden=hidden,
        heads=heads,
        padded=padded,
        device=device,
    )
    with user_errors():
        flags = _with_recipe(flags, recipe, given_names(ctx))
        json_out = json_target(json_path, inputs=[*flags.data, *Path(flags.out_dir).glob("*")])
        config = flags.config()
        out_dir.mkdir(parents=True, exist_ok=True)
        try:
            summary = run_training(config, reporter)
        finally:
            reporter.close()
    out.print(_summary_line(summary), highlight=False)
    emit_json(json_out, asdict(summary))


def _with_recipe(flags: TrainFlags, recipe: str | None, given: set[str]) -> TrainFlags:
    """`flags` with recipe `recipe`'s settings in place of every flag not in `given` (those the command line
    gave), which are said on stderr."""
    if recipe is None:
        return flags
    chosen = with_recipe(recipe, {}, given)  # the recipe's settings of the flags not given
    info(f"train: recipe {recipe}: " + ", ".join(f"{k} {v}" for k, v in chosen.items()))
    return dataclasses.replace(flags, **chosen)


def _summary_line(summary: TrainSummary) -> str:
    evaluation = ", ".join(f"{k} {v:.2f}" for k, v in summary.evaluation.items()) or "no evaluation sets"
    return (
        f"trained {summary.steps:,} steps ({summary.pairs:,} pairs, {summary.tokens:,} tokens) in "
        f"{summary.seconds / 60:.1f} min; loss {summary.final_loss:.4f}; {evaluation} -> {summary.out}"
    )
