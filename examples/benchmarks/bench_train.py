"""Training objectives under the same CPU budget: dev F1 and Tatoeba accuracy of the trained encoders.

Every row fine-tunes the shared multilingual-e5-small (or trains a small model from scratch) on
../shared/data/parallel for the same wall-clock budget, skipping every pair that contains a sentence of
the evaluation sets (bucc-like dev splits, Tatoeba files), then evaluates the saved model:
BUCC-format dev F1 (ratio margin, exact mining, threshold learned on the same dev split) and Tatoeba
accuracy (mean of both directions). Rows are run one at a time with --only ROW; results accumulate in
results/bench_train.json (each row with its date, machine and commit) and results/bench_train.md is
rebuilt from it after every row (`--report-only`: only that).
Section `speed` times packed against padded training steps on the same batches.
Ablations train a control arm and a treatment arm on equal budgets, once per seed (a run is saved, and the
report rebuilt, as it ends), and weigh the difference of the arms' means against the spread over seeds:
- `mexma-ablation`: contrastive + MEXMA with and without the unmasking task's token
  gradients (the paper's §5.1 ablation), for the same number of steps;
- `hard-negatives`: the `mining` recipe with and without `--hard-negatives N`, at equal
  steps and at equal wall clock; evaluated also at dev thresholds calibrated on the other half of the
  split (bench_thresholds' halves) and by xsim on FLORES-101 dev;
- `margin` (the `mining` recipe's Tatoeba target): the `mining` recipe with and without the
  `weak-languages` recipe's `--margin 0.3`, at 30 minutes, evaluated as `hard-negatives`; its control arm
  is the hard-negatives ablation's (the same settings), recorded once under that ablation's keys;
- `lr` (the same target): the `mining` recipe with and without `--lr 5e-5`, shaped as `margin`.

Usage: python examples/benchmarks/bench_train.py --only contrastive [--minutes 10] [--seeds 0,1,2] [--resume]
       [--keep-model DIR]  (keeps each trained run's model dir, without checkpoints, as DIR/ROW[, seed S])
       python examples/benchmarks/bench_train.py --ablation mexma [--steps 30] [--seeds 0,1,2]
       python examples/benchmarks/bench_train.py --ablation hard-negatives [--steps S] [--minutes M,...]
       [--seeds 0,1,2] [--hard-negatives 3] [--hard-negative-pool PAIRS]  (budgets: 122 steps, 10 and 30
       minutes where neither --steps nor --minutes is given)
       python examples/benchmarks/bench_train.py --ablation margin|lr [--seeds 0,1,2] [--resume]
       python examples/benchmarks/bench_train.py --report-only
--results PATH keeps the rows in PATH (and the report next to it, .md) instead of results/bench_train.json.

The hard-negatives measurement (`make bench-train-hard-negatives`; 18 runs, ~7-9 h on 2 cores):
       python examples/benchmarks/bench_train.py --ablation hard-negatives --steps 122 --minutes 10,30 \
           --seeds 0,1,2 --hard-negatives 3
Smoke run (~10 min on 2 idle cores, 20 on busy ones; rows kept outside results/):
       python examples/benchmarks/bench_train.py --ablation hard-negatives --steps 3 --seeds 0 \
           --hard-negative-pool 1000 --results /tmp/hnb-smoke.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from benchlib import (
    MODEL,
    RESULTS,
    SHARED,
    bucc_split,
    cli_json,
    distinct,
    halves,
    mined_half,
    oracle,
    peak_rss_mb,
    runs_table,
    save_rows,
    stamped,
    table,
)

import bitextmine as bm

MINING = bm.RECIPES["mining"].config_settings()
# the `mining` recipe's fine-tuning settings, under each row's objectives
FINE_TUNE = {key: value for key, value in MINING.items() if key not in ("objectives", "options")}

BUCC_PAIRS = ("de-en", "zh-en")
TATOEBA_LANGS = ("deu", "fra", "rus", "cmn", "ces")
FLORES = SHARED / "data" / "flores101"
FLORES_LANGS = ("deu", "fra", "rus", "zho_simpl", "ces")  # the Tatoeba languages' FLORES-101 files
TRANSFER_ROUNDS = 20  # cuts of each dev split into halves (seeds 0..19, as bench_thresholds cuts them)
ROWS = {
    "base": None,
    "contrastive": {"objectives": {"contrastive": 1.0}},
    "contrastive+mexma": {"objectives": {"contrastive": 1.0, "mexma": 1.0}},
    "mexma": {"objectives": {"mexma": 1.0}},
    "contrastive+rtl": {"objectives": {"contrastive": 1.0, "rtl": 1.0}},
    "contrastive+xtr": {"objectives": {"contrastive": 1.0, "xtr": 1.0}},
    "vmsst": {"objectives": {"vmsst": 1.0}},
    # VMSST CONTRASTIVE: the paper weighs the whole VMSST loss by 0.0005 with a pretrained model (§6.4)
    "vmsst+contrastive": {"objectives": {"contrastive": 1.0, "vmsst": 0.0005}},
    "scratch-ems": {
        "objectives": {"contrastive": 1.0, "xtr": 1.0},
        "from_scratch": True,
        "lr": 5e-4,
        "options": {"temperature": 0.1, "projection": True},
        "scratch": {"vocab_size": 16000, "layers": 4, "hidden": 256, "heads": 4},
    },
}


def held_out() -> list[str]:
    bucc = [str(SHARED / "data" / "bucc-like")]
    tatoeba = [str(p) for lang in TATOEBA_LANGS for p in (SHARED / "data" / "tatoeba").glob(f"*{lang}*")]
    return bucc + tatoeba


def train_row(
    row_spec: dict, out: Path, *, minutes: float | None = None, steps: int | None = None, seed: int = 0
) -> dict:
    """Train a row's objectives for `minutes` of wall clock or for `steps` steps; its training figures, with
    the hard-negative miner's where it ran."""
    settings = {**FINE_TUNE, **row_spec}
    config = bm.TrainConfig(
        data=[str(SHARED / "data" / "parallel")],
        out=out,
        base=None if settings.get("from_scratch") else str(MODEL),
        exclude=held_out(),
        max_minutes=minutes,
        max_steps=steps,
        seed=seed,
        checkpoint_every=0,
        **settings,
    )
    summary = bm.train_encoder(config)
    records = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    trained = [r for r in records if "loss" in r]
    figures = {
        "steps": summary.steps,
        "pairs": summary.pairs,
        "train_minutes": round(summary.seconds / 60, 1),
        "pairs_per_s": round(summary.pairs / sum(r["pairs"] / r["pairs_per_s"] for r in trained), 1),
        "first_loss": round(statistics.mean(r["loss"] for r in trained[:10]), 4),
        "last_loss": round(statistics.mean(r["loss"] for r in trained[-10:]), 4),
        "peak_rss_mb": round(peak_rss_mb()),
    }
    minings = [r["hard_negatives"] for r in records if "hard_negatives" in r]
    if config.hard_negative_settings:
        figures["hard_negatives"] = {**config.hard_negative_settings.as_dict(), **miner_totals(minings)}
    return figures


def miner_totals(minings: list[dict]) -> dict:
    """The hard-negative miner's figures (train_log.jsonl, one record a mining) summed over a run."""
    counts = ("pairs", "negatives", "pairs_short", "excluded_duplicates", "excluded_above_gold")
    return {
        "minings": len(minings),
        **{count: sum(m[count] for m in minings) for count in counts},
        "mining_minutes": round(sum(m["seconds"] for m in minings) / 60, 2),
    }


def keep(model_dir: Path, destination: Path) -> None:
    """Copy a trained model dir (weights, tokenizer, bitextmine.json, log) over `destination`."""
    shutil.rmtree(destination, ignore_errors=True)
    shutil.copytree(model_dir, destination, ignore=shutil.ignore_patterns("checkpoints"))


def evaluate(model_dir: Path, full: bool = False) -> dict:
    """Oracle dev F1 of each BUCC pair and Tatoeba accuracy (`bitextmine eval tatoeba`), encoded in bf16;
    `full` adds each pair's dev F1 at thresholds from the other half (`transferred_f1`) and the xsim error
    (%) of FLORES-101 dev, xx -> eng (`bitextmine eval xsim`)."""
    import torch

    encoder = bm.load_encoder(model_dir, device="cpu", precision="bf16")
    results = {}
    with tempfile.TemporaryDirectory() as work:  # the vector cache of the evaluation

        def cli_rows(benchmark: str, data: Path, langs: tuple[str, ...], *options: str) -> list[dict]:
            return cli_json(
                "eval", benchmark, "--data", str(data), "--langs", ",".join(langs), *options,
                "--model", str(model_dir), "--device", "cpu", "--precision", "bf16", "--workdir", work,
                "--threads", str(torch.get_num_threads()),
            )["rows"]  # fmt: skip

        for pair in BUCC_PAIRS:
            split = bucc_split(pair)
            results[f"bucc/{pair}"] = round(100 * oracle(split, encoder, Path(work)).scores.f1, 2)
            if full:
                results[f"transfer/{pair}"] = round(100 * transferred_f1(split, encoder, Path(work)), 2)
        for r in cli_rows("tatoeba", SHARED / "data" / "tatoeba", TATOEBA_LANGS):
            results[f"tatoeba/{r['lang']}"] = round((r["xx_to_eng"] + r["eng_to_xx"]) / 2, 2)
        if full:
            for r in cli_rows("xsim", FLORES / "dev", FLORES_LANGS, "--split", "dev", "--target", "eng"):
                results[f"xsim/{r['lang']}"] = round(r["error_rate"], 2)
    return results


def transferred_f1(split, encoder, work: Path) -> float:
    """The mean F1 of each half of `split` at the best-F1 threshold of the other half, over
    TRANSFER_ROUNDS cuts into halves (bench_thresholds' cut; the same cuts for every model). The vectors
    are those `oracle` cached in the workspace `work`."""
    cache = bm.Workspace(work).embedding_cache_dir()
    src, tgt = (bm.embed(encoder, side.sentences, cache) for side in (split.src, split.tgt))
    f1 = []
    for seed in range(TRANSFER_ROUNDS):
        cut = halves(split, src, tgt, np.random.default_rng(seed))
        a, b = (mined_half(split.pair, *half) for half in cut)
        f1 += [b.f1_at(a.threshold()), a.f1_at(b.threshold())]
    return statistics.mean(f1)


def speed(minutes_each: float = 1.0) -> dict:
    """Pairs/s of packed and padded training steps (contrastive, e5, bf16 autocast) on the same batches."""
    import torch

    # measured on purpose: the training step itself, packed against padded, below the public train_encoder
    from bitextmine.encoder.loading import load_model
    from bitextmine.train.data import find_sources, pair_stream, token_batches
    from bitextmine.train.loop import batch_loss
    from bitextmine.train.model import TrainContext, TrainEncoder
    from bitextmine.train.objectives.base import ObjectiveSetup
    from bitextmine.train.objectives.registry import build_objectives

    loaded = load_model(str(MODEL), torch.device("cpu"))
    tok = loaded.tokenizer
    sources = find_sources([str(SHARED / "data" / "parallel")])
    languages = sorted({s.lang for s in sources} | {"en"})
    stream = pair_stream(sources, seed=0)
    batches = token_batches(
        stream,
        lambda t: tok(["query: " + x for x in t], truncation=True, max_length=FINE_TUNE["max_length"])[
            "input_ids"
        ],
        max_tokens=FINE_TUNE["max_tokens"],
        max_pairs=FINE_TUNE["max_pairs"],
    )
    fixed = [next(batches) for _ in range(6)]
    rates = {}
    for packed in (True, False):
        encoder = TrainEncoder(loaded.model.train(), packed=packed)
        specials = frozenset(tok.all_special_ids)
        ctx = TrainContext(encoder, tok.mask_token_id, specials, len(tok), languages, torch.Generator())
        objectives = build_objectives({"contrastive": 1.0}, ObjectiveSetup(encoder, ctx))
        warm_up, _ = batch_loss(encoder, objectives, {"contrastive": 1.0}, fixed[0], ctx, autocast=True)
        warm_up.backward()
        started, pairs = time.perf_counter(), 0
        for batch in fixed[1:]:
            loss, _ = batch_loss(encoder, objectives, {"contrastive": 1.0}, batch, ctx, autocast=True)
            loss.backward()
            encoder.zero_grad(set_to_none=True)
            pairs += len(batch.src_ids)
        rates["packed" if packed else "padded"] = pairs / (time.perf_counter() - started)
    return {
        "packed_pairs_per_s": round(rates["packed"], 1),
        "padded_pairs_per_s": round(rates["padded"], 1),
        "batches": len(fixed) - 1,
        "pairs_per_batch": round(statistics.mean(len(b.src_ids) for b in fixed[1:]), 1),
    }


def row_key(row: str, seed: int) -> str:
    """A trained row's results key at `seed`; seed 0's is the row's name (rows recorded before seeds)."""
    return row if seed == 0 else f"{row}, seed {seed}"


def row_runs(results: dict, row: str) -> dict[str, dict]:
    """A row's runs in `results` by key, one a seed."""
    return {key: r for key, r in results.items() if key == row or key.startswith(f"{row}, seed ")}


def seeds_cell(values: list[float]) -> str:
    """One run's value, or the mean ± sd over seeds."""
    return cell(values[0], 2) if len(values) == 1 else mean_sd(values, 2)


def span(values: list[float], digits: int = 0) -> str:
    low, high = min(values), max(values)
    return f"{low:,.{digits}f}" if low == high else f"{low:,.{digits}f}-{high:,.{digits}f}"


def objectives_report(results: dict) -> list[str]:
    """The objective table: each row's runs (one a seed) against the base model, means ± sd over seeds."""
    base = results.get("base")
    trained = {row: list(runs.values()) for row in ROWS if row != "base" and (runs := row_runs(results, row))}
    dev_f1, tatoeba = mean_of("bucc", BUCC_PAIRS), mean_of("tatoeba", TATOEBA_LANGS)

    def vs_base(runs: list[dict]) -> tuple[float, float]:
        """(average dev F1, worst Tatoeba language) against the base model, in points, over the seeds."""
        f1 = statistics.mean(map(dev_f1, runs)) - dev_f1(base)
        worst = min(
            statistics.mean(r["eval"][f"tatoeba/{lang}"] for r in runs) - base["eval"][f"tatoeba/{lang}"]
            for lang in TATOEBA_LANGS
        )
        return f1, worst

    def cells(row: str, runs: list[dict]) -> str:
        t = [r["train"] for r in runs if "train" in r]
        evs = [r["eval"] for r in runs]
        delta = vs_base(runs) if t and base is not None else None
        return " | ".join(
            [
                row,
                str(len(t)) if t else "-",
                span([x["train_minutes"] for x in t], 1) if t else "-",
                span([x["steps"] for x in t]) if t else "-",
                span([x["pairs_per_s"] for x in t], 1) if t else "-",
                f"{t[0]['first_loss']} -> {t[0]['last_loss']}" if t else "-",
                *[seeds_cell([ev[f"bucc/{p}"] for ev in evs]) for p in BUCC_PAIRS],
                seeds_cell(list(map(dev_f1, runs))),
                *[f"{statistics.mean(ev[f'tatoeba/{lang}'] for ev in evs):.2f}" for lang in TATOEBA_LANGS],
                seeds_cell(list(map(tatoeba, runs))),
                "-" if delta is None else f"{delta[0]:+.2f} / {delta[1]:+.2f}",
            ]
        )

    lines = ["## Which training objective, at an equal wall-clock budget?", ""]
    if base is not None and trained:
        lines.append(objectives_verdict(trained, vs_base, dev_f1))
    else:
        lines.append("No trained row next to the base model yet.")
    rows = {"base": [base]} if base is not None else {}
    return [
        *lines,
        "",
        *table(
            "row | seeds | minutes | steps | pairs/s | loss first -> last 10 (seed 0) | "
            + " | ".join(f"{p} F1" for p in BUCC_PAIRS)
            + f" | {DEV} | "
            + " | ".join(TATOEBA_LANGS)
            + f" | {TATOEBA} | vs base: avg dev F1 / worst Tatoeba",
            "l" + "r" * (9 + len(BUCC_PAIRS) + len(TATOEBA_LANGS)),
            (cells(row, runs) for row, runs in {**rows, **trained}.items()),
        ),
        "",
        "Dev F1 and Tatoeba: one run's figure, or the mean ± sd over the row's seeds (a seed sets the data "
        "order and the initialisation of any new weights); the languages' Tatoeba columns are means.",
    ]


def objectives_verdict(
    trained: dict[str, list[dict]],
    vs_base: Callable[[list[dict]], tuple[float, float]],
    dev_f1: Callable[[dict], float],
) -> str:
    """Which row gained the most average dev F1 over the base, and whether its lead over the next row
    exceeds twice the larger of the two rows' sd over seeds."""
    ranked = sorted(trained, key=lambda row: vs_base(trained[row])[0], reverse=True)
    best = ranked[0]
    minutes = sorted({r["train"]["train_minutes"] for runs in trained.values() for r in runs})
    gain, worst = vs_base(trained[best])
    text = (
        f"After {minutes[0]}-{minutes[-1]} minutes of training, {best} gained the most average dev F1 "
        f"({gain:+.2f} points over the base model; worst Tatoeba language {worst:+.2f})."
    )
    if len(ranked) == 1:
        return text
    second = ranked[1]
    lead = gain - vs_base(trained[second])[0]
    runs = (trained[best], trained[second])
    if min(map(len, runs)) < 2:
        return (
            f"{text} Its lead over {second} ({lead:+.2f}) has no spread over seeds to weigh it against yet."
        )
    sd = max(spread(list(map(dev_f1, arm))) for arm in runs)
    word = "beyond" if lead > 2 * sd else "within"
    return f"{text} Its lead over {second} ({lead:+.2f}) is {word} twice the larger seed sd ({2 * sd:.2f})."


def report(results: dict) -> str:
    lines = [
        "# bench_train: training objectives at an equal CPU budget",
        "",
        "Produced by `examples/benchmarks/bench_train.py` (`make bench-train`); rows are run one at a "
        "time and accumulate; each row's date, machine and commit: the JSON. Training data: "
        "`../shared/data/parallel` (all pairs, minus every pair containing a sentence of the bucc-like "
        "splits or of the Tatoeba files of the evaluated languages). Base: multilingual-e5-small-q4. "
        "Evaluation of the saved model, encoded in bf16: BUCC-format dev F1 (`../shared/data/bucc-like`, "
        "ratio margin k = 4, exact mining, best-F1 threshold on the same dev split) and Tatoeba accuracy "
        "(mean of xx->eng and eng->xx).",
        "",
        *objectives_report(results),
    ]
    if "speed" in results:
        s = results["speed"]
        ratio = s["packed_pairs_per_s"] / s["padded_pairs_per_s"]
        lines += [
            "",
            "## Are packed training steps faster than padded ones?",
            "",
            f"Packed steps trained {ratio:.2f}x the pairs a second of padded steps on the same batches "
            f"(target 1.5: {'met' if ratio >= 1.5 else 'NOT met'}).",
            "",
            *table(
                "batches | pairs a batch | packed pairs/s | padded pairs/s | packed / padded",
                "rrrrr",
                [
                    f"{s['batches']} | ~{s['pairs_per_batch']} | {s['packed_pairs_per_s']} "
                    f"| {s['padded_pairs_per_s']} | {ratio:.2f}"
                ],
            ),
            "",
            "Contrastive objective, e5, bf16 autocast, identical batches after one warm-up batch.",
        ]
    ablation_runs = {}
    for ablation in ABLATIONS.values():
        runs = ablation.runs(results)
        if runs:
            lines += ablation_report(ablation, list(runs.values()))
            ablation_runs |= runs
    measured = {"speed": results["speed"]} if "speed" in results else {}
    rows = {key: r for row in ROWS for key, r in row_runs(results, row).items()}
    all_rows = [dict(r, row=name) for name, r in {**rows, **measured, **ablation_runs}.items()]
    return "\n".join([*lines, "", *runs_table(all_rows, lambda r: r["row"])]) + "\n"


@dataclass(frozen=True)
class Budget:
    """A run's training budget: `steps` steps, or else `minutes` of wall clock."""

    steps: int | None = None
    minutes: float | None = None

    def __str__(self) -> str:
        return f"{self.steps} steps" if self.steps is not None else f"{self.minutes:g} min"


@dataclass(frozen=True)
class Column:
    """A figure of an ablation's per-run table: its header and its value in a run (None: not in that arm)."""

    header: str
    value: Callable[[dict], float | None]
    digits: int = 2


DEV, TATOEBA = "avg dev F1", "Tatoeba avg"  # the columns a verdict weighs
Gains = dict[str, tuple[float, float]]  # column header -> (treatment mean - control mean, the larger sd)


@dataclass(frozen=True)
class Ablation:
    """A control arm and a treatment arm, trained on equal budgets once per seed; the difference of their
    means against the spread over seeds."""

    key: str  # a run's results key, formatted with its arm, budget and seed; the prefix names the ablation
    title: str  # the report section's question
    about: str  # what the arms are and how they are measured
    arms: dict[str, dict]  # control, then treatment: the arm's name -> its row spec (`train_row`)
    columns: tuple[Column, ...]  # the per-run figures, DEV and TATOEBA among them
    verdict: Callable[[Gains], str]
    budgets: tuple[Budget, ...]  # where neither --steps nor --minutes is given
    full_eval: bool = False  # `evaluate`'s thresholds from the other half and xsim
    # the key of the control arm's runs where another ablation with the same control arm records them
    control_key: str = ""

    @property
    def prefix(self) -> str:
        return self.key.split(":")[0] + ": "

    @property
    def control(self) -> str:
        return next(iter(self.arms))

    def run_key(self, arm: str, budget: Budget, seed: int) -> str:
        key = self.control_key if arm == self.control and self.control_key else self.key
        return key.format(arm=arm, budget=budget, seed=seed)

    def runs(self, results: dict) -> dict[str, dict]:
        """The ablation's runs in `results`, with its control arm's under `control_key` on the budgets the
        ablation has runs of."""
        own = {key: r for key, r in results.items() if key.startswith(self.prefix)}
        if not self.control_key:
            return own
        shared = self.control_key.split(":")[0] + ": "
        budgets = set(map(budget_of, own.values()))
        return own | {
            key: r
            for key, r in results.items()
            if key.startswith(shared) and r["arm"] == self.control and budget_of(r) in budgets
        }


def mean_of(measure: str, names: tuple[str, ...]) -> Callable[[dict], float]:
    """A run's mean of `evaluate`'s figures MEASURE/NAME over `names`."""
    return lambda run: statistics.mean(run["eval"][f"{measure}/{name}"] for name in names)


def miner(figure: str) -> Callable[[dict], float | None]:
    """A run's hard-negative miner figure (`miner_totals`); None where no miner ran."""
    return lambda run: run["train"].get("hard_negatives", {}).get(figure)


def mexma_verdict(gains: Gains) -> str:
    (dev, noise), (tatoeba, _) = gains[DEV], gains[TATOEBA]
    holds = dev > 0 and tatoeba > 0
    return (
        f"Token gradients change average dev F1 by {dev:+.2f} points and Tatoeba by {tatoeba:+.2f} "
        f"(largest seed sd of dev F1: {noise:.2f}). The paper's direction (token gradients help, §5.1) "
        + ("holds here, " if holds else "does not hold here; ")
        + ("beyond" if abs(dev) > 2 * noise else "within")
        + " twice the seed spread of dev F1."
    )


def transfer_verdict(treatment: str) -> Callable[[Gains], str]:
    """The verdict on `treatment` ("Hard negatives change"): it pays only where the gains in average dev F1
    at transferred thresholds and in Tatoeba both exceed twice the larger arm's sd."""

    def verdict(gains: Gains) -> str:
        (dev, dev_sd), (tatoeba, tatoeba_sd) = gains[DEV], gains[TATOEBA]
        if dev > 2 * dev_sd and tatoeba > 2 * tatoeba_sd:
            word = "pays"
        elif dev < -2 * dev_sd or tatoeba < -2 * tatoeba_sd:
            word = "does not pay (a loss beyond the seed spread)"
        else:
            word = "does not pay (within seed spread)"
        return (
            f"{treatment} average dev F1 (thresholds from the other half) by {dev:+.2f} points "
            f"(twice the larger arm's sd: {2 * dev_sd:.2f}) and Tatoeba by {tatoeba:+.2f} "
            f"({2 * tatoeba_sd:.2f}): **{word}**."
        )

    return verdict


HARD_NEGATIVES_ARM = "contrastive + hard negatives"
MARGIN = bm.RECIPES["weak-languages"].settings["margin"]
TRANSFERRED_F1 = (  # dev F1 at thresholds from the other half
    *(Column(f"{pair} F1*", mean_of("transfer", (pair,))) for pair in BUCC_PAIRS),
    Column(DEV, mean_of("transfer", BUCC_PAIRS)),
)
XSIM = Column("xsim %", mean_of("xsim", FLORES_LANGS))
MINING_LR = MINING["lr"]
FAST_LR = 5e-5  # screened: Tatoeba +1.0 over the recipe's lr at 122 steps (one seed)


def mining_recipe_ablation(name: str, change: str, setting: str, treatment: dict, verdict: str) -> Ablation:
    """The `mining` recipe against `treatment` (its arm name -> row spec: the recipe with `setting`) at 30
    minutes, scored as the hard-negatives ablation, whose `contrastive` runs are its control runs."""
    return Ablation(
        key=f"{name}: {{arm}}, {{budget}}, seed {{seed}}",
        title=f"Does {change} pay in the `mining` recipe, at 30 minutes?",
        about=f"The `mining` recipe (contrastive) against the same with {setting}, at equal wall clock; the "
        "control runs are the hard-negatives ablation's `contrastive` runs (the same settings and budget). "
        "The steps that 30 minutes buy vary with the machine and its load (each run's steps and commit). "
        "Evaluated as that ablation: dev F1* at thresholds from the other half, Tatoeba by language and "
        "averaged, FLORES-101 dev xsim. The `mining` recipe's target: Tatoeba >= 95.5 at 30 CPU minutes, "
        "every language up.",
        arms={"contrastive": MINING, **treatment},
        columns=(
            *TRANSFERRED_F1,
            *(Column(lang, mean_of("tatoeba", (lang,))) for lang in TATOEBA_LANGS),
            Column(TATOEBA, mean_of("tatoeba", TATOEBA_LANGS)),
            XSIM,
        ),
        verdict=transfer_verdict(verdict),
        budgets=(Budget(minutes=30),),
        full_eval=True,
        control_key="hard-negatives: {arm}, {budget}, seed {seed}",
    )


ABLATIONS = {
    "mexma": Ablation(
        key="mexma-ablation: {arm} seed {seed}",
        title="Do MEXMA's token gradients help, at equal steps?",
        about="contrastive + MEXMA, e5, the fine-tuning settings of the table above, equal steps; without "
        "token gradients the unmasking loss reaches the encoder only through the sentence vectors (paper "
        "§5.1, model (1)). A seed sets the data order, the masking and the unmasking head's initialisation. "
        "Dev F1 at each split's best threshold.",
        arms={
            "no token gradients": {**ROWS["contrastive+mexma"], "options": {"token_gradients": False}},
            "token gradients": ROWS["contrastive+mexma"],
        },
        columns=(
            *(Column(f"{pair} F1", mean_of("bucc", (pair,))) for pair in BUCC_PAIRS),
            Column(DEV, mean_of("bucc", BUCC_PAIRS)),
            Column(TATOEBA, mean_of("tatoeba", TATOEBA_LANGS)),
        ),
        verdict=mexma_verdict,
        budgets=(Budget(steps=30),),
    ),
    "hard-negatives": Ablation(
        key="hard-negatives: {arm}, {budget}, seed {seed}",
        title="Do mined hard negatives pay, at equal steps and at equal wall clock?",
        about="The `mining` recipe (contrastive) against the same with `--hard-negatives N` (N, refresh "
        "and pool under each budget; refresh and pool are the library's defaults, so the cost is a user's), "
        "trained as the rows above. At equal wall clock the minutes spent mining count against the arm and "
        "the learning rate stays constant after warm-up; at equal steps it decays to 0 (train's schedule). "
        "A seed sets the data order, and with it the pools mined. The pools are encoded under the steps' "
        "bf16 autocast since 50a8c0b (1.6x fp32's speed), in fp32 before: see each run's commit. "
        "Dev F1 (`*`): each bucc-like dev split "
        f"cut into halves as bench_thresholds cuts them ({TRANSFER_ROUNDS} cuts, the same for every model), "
        "each half scored at the best-F1 threshold of the other, averaged (a half holds half the split's "
        "sentences, so F1* is not comparable with a full split's oracle F1). Tatoeba as above (deu fra rus "
        "cmn ces). xsim: `bitextmine eval xsim` on ../shared/data/flores101/dev, "
        f"{', '.join(FLORES_LANGS)}.dev -> eng.dev (985 lines each; none in the training data), % error "
        "averaged, lower is better. Miner figures summed over a run's minings (train_log.jsonl): negatives "
        "kept, candidates the guard dropped as duplicates of the gold target or as scoring at least the "
        "gold pair, minutes spent mining.",
        arms={"contrastive": MINING, HARD_NEGATIVES_ARM: {**MINING, "hard_negatives": 3}},
        columns=(
            *TRANSFERRED_F1,
            Column(TATOEBA, mean_of("tatoeba", TATOEBA_LANGS)),
            XSIM,
            Column("negatives", miner("negatives"), 0),
            Column("dropped: duplicates", miner("excluded_duplicates"), 0),
            Column("dropped: above gold", miner("excluded_above_gold"), 0),
            Column("mining min", miner("mining_minutes")),
        ),
        verdict=transfer_verdict("Hard negatives change"),
        budgets=(Budget(steps=122), Budget(minutes=10), Budget(minutes=30)),
        full_eval=True,
    ),
    "margin": mining_recipe_ablation(
        "margin",
        "an additive margin",
        "`--margin M` (LaBSE's additive margin, the `weak-languages` recipe's M)",
        {f"contrastive, margin {MARGIN}": {**MINING, "options": {"margin": MARGIN}}},
        f"A margin of {MARGIN} changes",
    ),
    "lr": mining_recipe_ablation(
        "lr",
        "a higher learning rate",
        f"`--lr {FAST_LR:g}` ({FAST_LR / MINING_LR:g}x the recipe's {MINING_LR:g})",
        {f"contrastive, lr {FAST_LR:g}": {**MINING, "lr": FAST_LR}},
        f"Learning rate {FAST_LR:g} changes",
    ),
}


def budget_of(run: dict) -> str:
    """A run's budget; runs saved before budgets were recorded were bounded by steps."""
    return run.get("budget") or f"{run['train']['steps']} steps"


def spread(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def ablation_report(ablation: Ablation, runs: list[dict]) -> list[str]:
    """The ablation's section: for each budget, a row per arm and seed, each arm's mean ± sd, the
    difference of the means against the larger arm's sd, and the verdict."""
    lines = ["", f"## {ablation.title}", "", ablation.about]
    header = "arm | seed | steps | minutes | " + " | ".join(c.header for c in ablation.columns)
    for budget in dict.fromkeys(map(budget_of, runs)):
        in_budget = [r for r in runs if budget_of(r) == budget]
        by_arm = {arm: [r for r in in_budget if r["arm"] == arm] for arm in ablation.arms}
        rows, gains = [], {}
        for arm, arm_runs in by_arm.items():
            for r in arm_runs:
                cells = [cell(c.value(r), c.digits) for c in ablation.columns]
                t = r["train"]
                rows.append(
                    " | ".join([arm, str(r["seed"]), f"{t['steps']}", f"{t['train_minutes']}", *cells])
                )
            if arm_runs:
                cells = [mean_sd([c.value(r) for r in arm_runs], c.digits) for c in ablation.columns]
                rows.append(" | ".join([f"**{arm}, mean ± sd**", f"seeds: {len(arm_runs)}", "", "", *cells]))
        if all(by_arm.values()):
            control, treatment = by_arm.values()
            for c in ablation.columns:
                before, after = [c.value(r) for r in control], [c.value(r) for r in treatment]
                if None not in before + after:
                    gains[c.header] = (
                        statistics.mean(after) - statistics.mean(before),
                        max(spread(before), spread(after)),
                    )
            cells = [f"{gains[c.header][0]:+.2f} (sd {gains[c.header][1]:.2f})" if c.header in gains else "-"
                     for c in ablation.columns]  # fmt: skip
            rows.append(" | ".join(["**difference of means** (larger sd)", "", "", "", *cells]))
        if not gains:
            verdict = "Not every arm has a seed yet."
        elif min(map(len, by_arm.values())) < 2:
            verdict = "An arm has one seed: no spread over seeds to weigh the difference against yet."
        else:
            verdict = ablation.verdict(gains)
        mined = [r["train"]["hard_negatives"] for r in in_budget if "hard_negatives" in r["train"]]
        if mined:
            verdict += (
                f" Hard negatives: N {distinct(mined, 'n')}, refresh {distinct(mined, 'refresh')} steps, "
            )
            verdict += f"pool {distinct(mined, 'pool')} pairs."
        lines += ["", f"### {budget}", "", verdict, ""]
        lines += table(header, "l" + "r" * (3 + len(ablation.columns)), rows)
    return lines


def cell(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def mean_sd(values: list[float | None], digits: int) -> str:
    if None in values:
        return "-"
    return f"{statistics.mean(values):,.{digits}f} ± {spread(values):,.{digits}f}"


def run_ablation(
    ablation: Ablation,
    budgets: list[Budget],
    seeds: list[int],
    results: dict,
    store: Path,
    resume: bool = False,
) -> None:
    """Each arm of the ablation on each budget at each seed; a run is saved, and the report rebuilt, as it
    ends. With `resume`, the runs already in `results` are kept and not run again (an ablation of hours,
    spread over several sittings: each run carries its own date and commit). Control runs recorded by the
    ablation that owns them (`control_key`) are always kept: rerunning them here would replace that
    ablation's rows."""
    for seed in seeds:
        for budget in budgets:
            for arm, spec in ablation.arms.items():
                key = ablation.run_key(arm, budget, seed)
                borrowed = arm == ablation.control and bool(ablation.control_key)
                if key in results and (resume or borrowed):
                    print(f"bench_train: {key} is recorded ({results[key]['commit']}), kept", flush=True)
                    continue
                print(f"bench_train: {ablation.prefix}{arm}, {budget}, seed {seed} ...", flush=True)
                when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
                with tempfile.TemporaryDirectory() as scratch:
                    out = Path(scratch) / "model"
                    trained = train_row(spec, out, steps=budget.steps, minutes=budget.minutes, seed=seed)
                    evaluated = evaluate(out, full=ablation.full_eval)
                run = {"arm": arm, "budget": str(budget), "seed": seed, "train": trained, "eval": evaluated}
                results[key] = stamped({**run, "when": when})
                save(results, store)


def run_row(
    row: str,
    seeds: list[int],
    results: dict,
    store: Path,
    minutes: float,
    resume: bool,
    keep_dir: Path | None,
) -> None:
    """An objective row trained for `minutes` once per seed (`base` and `speed`: once), each run saved, and
    the report rebuilt, as it ends; with `resume`, the runs already in `results` are kept."""
    for seed in seeds if ROWS.get(row) else [0]:
        key = row_key(row, seed)
        if resume and key in results:
            print(f"bench_train: {key} is recorded ({results[key]['commit']}), kept", flush=True)
            continue
        when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
        print(f"bench_train: {key} ...", flush=True)
        if row == "speed":
            results[key] = stamped({**speed(), "when": when})
        elif ROWS[row] is None:
            results[key] = stamped({"eval": evaluate(MODEL), "when": when})
        else:
            with tempfile.TemporaryDirectory() as scratch:
                out = Path(scratch) / row
                trained = train_row(ROWS[row], out, minutes=minutes, seed=seed)
                results[key] = stamped({"train": trained, "eval": evaluate(out), "seed": seed, "when": when})
                if keep_dir:
                    keep(out, keep_dir / key)
        save(results, store)


def save(results: dict, store: Path) -> None:
    """The rows at `store` and the report rebuilt from them next to it (.md)."""
    save_rows(store, results)
    store.with_suffix(".md").write_text(report(results))


def numbers(text: str) -> list[float]:
    """A comma-separated list of numbers ("10,30")."""
    return [float(x) for x in text.split(",")]


def budgets(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[Budget]:
    """The ablation's budgets: --steps and each of --minutes, else the ablation's own."""
    given = [Budget(steps=args.steps)] if args.steps is not None else []
    given += [Budget(minutes=m) for m in args.minutes or []]
    if any((b.steps or b.minutes) <= 0 for b in given):
        parser.error("--steps and --minutes must be positive")
    return given or list(ABLATIONS[args.ablation].budgets)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", choices=[*ROWS, "speed"], action="append")
    parser.add_argument(
        "--minutes", type=numbers, help="training minutes: of a row (default 10); --ablation: each a budget"
    )
    parser.add_argument(
        "--ablation", choices=list(ABLATIONS), help="train both arms on each budget, per seed"
    )
    parser.add_argument("--steps", type=int, help="--ablation: a budget of this many training steps")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds of each row or ablation run")
    parser.add_argument(
        "--hard-negatives", type=int, default=3, metavar="N", help="--ablation hard-negatives: N a pair"
    )
    parser.add_argument(
        "--hard-negative-pool", type=int, metavar="PAIRS", help="--ablation hard-negatives (default: train's)"
    )
    parser.add_argument(
        "--resume", action="store_true", help="keep the runs already recorded, run the others"
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--keep-model",
        type=Path,
        metavar="DIR",
        help="copy each trained run's model dir to DIR/ROW[, seed S] (without checkpoints)",
    )
    parser.add_argument(
        "--results", type=Path, default=RESULTS / "bench_train.json", help="the rows (the report: its .md)"
    )
    parser.add_argument("--report-only", action="store_true", help="rewrite the .md from the .json")
    args = parser.parse_args()
    store = args.results
    results = json.loads(store.read_text()) if store.is_file() else {}
    if args.report_only:
        store.with_suffix(".md").write_text(report(results))
        return
    if not args.only and not args.ablation:
        parser.error("--only ROW or --ablation NAME is required (or --report-only)")
    if args.only and len(args.minutes or []) > 1:
        parser.error("--only trains for one --minutes")
    if not MODEL.is_dir():
        sys.exit(f"bench_train: {MODEL} is absent; the benchmark needs the shared model and data")
    import torch

    torch.set_num_threads(args.threads)
    seeds = [int(seed) for seed in args.seeds.split(",")]
    if args.ablation:
        ablation = ABLATIONS[args.ablation]
        if args.ablation == "hard-negatives":
            tuned = {"hard_negatives": args.hard_negatives}
            tuned |= {"hard_negative_pool": args.hard_negative_pool} if args.hard_negative_pool else {}
            arms = {**ablation.arms, HARD_NEGATIVES_ARM: {**ablation.arms[HARD_NEGATIVES_ARM], **tuned}}
            ablation = replace(ablation, arms=arms)
        run_ablation(ablation, budgets(parser, args), seeds, results, store, args.resume)
    for row in args.only or []:
        run_row(row, seeds, results, store, (args.minutes or [10.0])[0], args.resume, args.keep_model)
        print(report(results), flush=True)


if __name__ == "__main__":
    main()
