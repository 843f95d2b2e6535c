"""Training objectives under the same CPU budget: dev F1 and Tatoeba accuracy of the trained encoders.

Every row fine-tunes the shared multilingual-e5-small (or trains a small model from scratch) on
../shared/data/parallel for the same wall-clock budget, skipping every pair that contains a sentence of
the evaluation sets (bucc-like dev splits, Tatoeba files), then evaluates the saved model:
BUCC-format dev F1 (ratio margin, exact mining, threshold learned on the same dev split) and Tatoeba
accuracy (mean of both directions). Rows are run one at a time with --only ROW; results accumulate in
results/bench_train.json (each row with its date, machine and commit) and results/bench_train.md is
rebuilt from it after every row (`--report-only`: only that).
Section `speed` times packed against padded training steps on the same batches.
Section `mexma-ablation` (issue 23, item 4) trains contrastive + MEXMA with and without the unmasking
task's token gradients (the paper's §5.1 ablation) for the same number of steps, once per seed.

Usage: python examples/benchmarks/bench_train.py --only contrastive [--minutes 10] [--threads 2]
       [--keep-model DIR]  (keeps each trained row's model dir, without checkpoints, as DIR/ROW)
       python examples/benchmarks/bench_train.py --ablation mexma [--steps 30] [--seeds 0,1,2]
       python examples/benchmarks/bench_train.py --report-only
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
from pathlib import Path

from benchlib import (
    MODEL,
    RESULTS,
    SHARED,
    bucc_split,
    cli_json,
    oracle,
    peak_rss_mb,
    runs_table,
    save_rows,
    stamped,
    table,
)

import bitextmine as bm

# the `mining` recipe's fine-tuning settings, under each row's objectives
FINE_TUNE = {key: value for key, value in bm.RECIPES["mining"].settings.items() if key != "objectives"}

BUCC_PAIRS = ("de-en", "zh-en")
TATOEBA_LANGS = ("deu", "fra", "rus", "cmn", "ces")
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
# --ablation mexma: the two arms, trained for equal steps; a result is keyed "mexma-ablation: ARM seed S"
MEXMA_ARMS = {
    "token gradients": ROWS["contrastive+mexma"],
    "no token gradients": {**ROWS["contrastive+mexma"], "options": {"token_gradients": False}},
}
ABLATION_KEY = "mexma-ablation: {arm} seed {seed}"


def held_out() -> list[str]:
    bucc = [str(SHARED / "data" / "bucc-like")]
    tatoeba = [str(p) for lang in TATOEBA_LANGS for p in (SHARED / "data" / "tatoeba").glob(f"*{lang}*")]
    return bucc + tatoeba


def train_row(
    row_spec: dict, out: Path, *, minutes: float | None = None, steps: int | None = None, seed: int = 0
) -> dict:
    """Train a row's objectives for `minutes` of wall clock or for `steps` steps; its training figures."""
    spec = dict(row_spec)
    settings = {**FINE_TUNE, **{k: spec.pop(k) for k in ("lr",) if k in spec}}
    config = bm.TrainConfig(
        data=[str(SHARED / "data" / "parallel")],
        out=out,
        base=None if spec.get("from_scratch") else str(MODEL),
        exclude=held_out(),
        max_minutes=minutes,
        max_steps=steps,
        seed=seed,
        checkpoint_every=0,
        **settings,
        **spec,
    )
    summary = bm.train_encoder(config)
    records = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    steps = [r for r in records if "loss" in r]
    return {
        "steps": summary.steps,
        "pairs": summary.pairs,
        "train_minutes": round(summary.seconds / 60, 1),
        "pairs_per_s": round(summary.pairs / sum(r["pairs"] / r["pairs_per_s"] for r in steps), 1),
        "first_loss": round(statistics.mean(r["loss"] for r in steps[:10]), 4),
        "last_loss": round(statistics.mean(r["loss"] for r in steps[-10:]), 4),
        "peak_rss_mb": round(peak_rss_mb()),
    }


def keep(model_dir: Path, destination: Path) -> None:
    """Copy a trained model dir (weights, tokenizer, bitextmine.json, log) over `destination`."""
    shutil.rmtree(destination, ignore_errors=True)
    shutil.copytree(model_dir, destination, ignore=shutil.ignore_patterns("checkpoints"))


def evaluate(model_dir: Path) -> dict:
    """Oracle dev F1 of each BUCC pair and Tatoeba accuracy (`bitextmine eval tatoeba`), encoded in bf16."""
    import torch

    encoder = bm.load_encoder(model_dir, device="cpu", precision="bf16")
    with tempfile.TemporaryDirectory() as work:  # the vector cache of the evaluation
        results = {
            f"bucc/{pair}": round(100 * oracle(bucc_split(pair), encoder, Path(work)).scores.f1, 2)
            for pair in BUCC_PAIRS
        }
        tatoeba = cli_json(
            "eval", "tatoeba", "--data", str(SHARED / "data" / "tatoeba"), "--langs", ",".join(TATOEBA_LANGS),
            "--model", str(model_dir), "--device", "cpu", "--precision", "bf16", "--workdir", work,
            "--threads", str(torch.get_num_threads()),
        )  # fmt: skip
    for r in tatoeba["rows"]:
        results[f"tatoeba/{r['lang']}"] = round((r["xx_to_eng"] + r["eng_to_xx"]) / 2, 2)
    return results


def speed(minutes_each: float = 1.0) -> dict:
    """Pairs/s of packed and padded training steps (contrastive, e5, bf16 autocast) on the same batches."""
    import torch

    # measured on purpose: the training step itself, packed against padded, below the public train_encoder
    from bitextmine.encoder.loading import load_model
    from bitextmine.train.data import find_sources, pair_stream, token_batches
    from bitextmine.train.loop import batch_loss
    from bitextmine.train.model import TrainContext, TrainEncoder
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
        objectives = build_objectives({"contrastive": 1.0}, encoder, ctx, {})
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


def report(results: dict) -> str:
    rows = {row: results[row] for row in ROWS if row in results}
    base = results.get("base", {}).get("eval")

    def vs_base(ev: dict) -> tuple[float, float] | None:
        """(average dev F1, worst Tatoeba language) against the base model, in points."""
        if base is None:
            return None
        f1 = statistics.mean(ev[f"bucc/{p}"] - base[f"bucc/{p}"] for p in BUCC_PAIRS)
        return f1, min(ev[f"tatoeba/{lang}"] - base[f"tatoeba/{lang}"] for lang in TATOEBA_LANGS)

    def cells(row: str, r: dict) -> str:
        t, ev = r.get("train", {}), r["eval"]
        tatoeba = [ev[f"tatoeba/{lang}"] for lang in TATOEBA_LANGS]
        delta = vs_base(ev) if row != "base" else None
        return " | ".join(
            [
                row,
                str(t.get("train_minutes", "-")),
                f"{t['steps']:,}" if t else "-",
                f"{t['pairs']:,}" if t else "-",
                str(t.get("pairs_per_s", "-")),
                f"{t['first_loss']} -> {t['last_loss']}" if t else "-",
                *[f"{ev[f'bucc/{p}']:.2f}" for p in BUCC_PAIRS],
                *[f"{x:.2f}" for x in tatoeba],
                f"{statistics.mean(tatoeba):.2f}",
                "-" if delta is None else f"{delta[0]:+.2f} / {delta[1]:+.2f}",
            ]
        )

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
        "## Which training objective, at an equal wall-clock budget?",
        "",
    ]
    trained = {row: vs_base(r["eval"]) for row, r in rows.items() if "train" in r}
    if base is not None and trained:
        best = max(trained, key=lambda row: trained[row][0])
        minutes = sorted({str(rows[row]["train"]["train_minutes"]) for row in trained})
        lines.append(
            f"After {minutes[0]}-{minutes[-1]} minutes of training, {best} gained the most average dev F1 "
            f"({trained[best][0]:+.2f} points over the base model; worst Tatoeba language "
            f"{trained[best][1]:+.2f})."
        )
    else:
        lines.append("No trained row next to the base model yet.")
    lines += [
        "",
        *table(
            "row | minutes | steps | pairs | pairs/s | loss first -> last 10 | "
            + " | ".join(f"{p} F1" for p in BUCC_PAIRS)
            + " | "
            + " | ".join(TATOEBA_LANGS)
            + " | Tatoeba avg | vs base: avg dev F1 / worst Tatoeba",
            "l" + "r" * (7 + len(BUCC_PAIRS) + len(TATOEBA_LANGS)),
            (cells(row, r) for row, r in rows.items()),
        ),
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
    ablation = {key: r for key, r in results.items() if key.startswith("mexma-ablation: ")}
    if ablation:
        lines += ["", *ablation_report(ablation)]
    measured = {"speed": results["speed"]} if "speed" in results else {}
    all_rows = [dict(r, row=name) for name, r in {**rows, **measured, **ablation}.items()]
    return "\n".join([*lines, "", *runs_table(all_rows, lambda r: r["row"])]) + "\n"


def ablation_scores(ev: dict) -> tuple[float, float]:
    """(average BUCC dev F1, average Tatoeba accuracy) of one evaluation."""
    return (
        statistics.mean(ev[f"bucc/{p}"] for p in BUCC_PAIRS),
        statistics.mean(ev[f"tatoeba/{lang}"] for lang in TATOEBA_LANGS),
    )


def ablation_report(ablation: dict) -> list[str]:
    """The MEXMA token-gradient ablation: a row per arm and seed, each arm's mean and spread, the verdict."""
    arms = {
        arm: [r for key, r in ablation.items() if key.startswith(f"mexma-ablation: {arm} seed")]
        for arm in MEXMA_ARMS
    }

    def mean_sd(values: list[float]) -> str:
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        return f"{statistics.mean(values):.2f} ± {sd:.2f}"

    rows = []
    for arm, runs in arms.items():
        for r in runs:
            ev, dev, tatoeba = r["eval"], *ablation_scores(r["eval"])
            cells = [f"{ev[f'bucc/{p}']:.2f}" for p in BUCC_PAIRS] + [f"{dev:.2f}", f"{tatoeba:.2f}"]
            rows.append(
                f"{arm} | {r['seed']} | {r['train']['steps']} | {r['train']['train_minutes']} | "
                + " | ".join(cells)
            )
        if runs:
            scores = [ablation_scores(r["eval"]) for r in runs]
            pair_means = [f"{statistics.mean(r['eval'][f'bucc/{p}'] for r in runs):.2f}" for p in BUCC_PAIRS]
            rows.append(
                f"**{arm}, mean ± sd** | seeds: {len(runs)} | | | {' | '.join(pair_means)} | "
                f"**{mean_sd([d for d, _ in scores])}** | **{mean_sd([t for _, t in scores])}**"
            )
    lines = ["## Do MEXMA's token gradients help, at equal steps?", ""]
    if all(arms.values()):
        with_grad, without = ([ablation_scores(r["eval"]) for r in arms[arm]] for arm in MEXMA_ARMS)
        dev_gain = statistics.mean(d for d, _ in with_grad) - statistics.mean(d for d, _ in without)
        tatoeba_gain = statistics.mean(t for _, t in with_grad) - statistics.mean(t for _, t in without)
        noise = max(
            statistics.stdev([d for d, _ in arm]) if len(arm) > 1 else 0.0 for arm in (with_grad, without)
        )
        holds = dev_gain > 0 and tatoeba_gain > 0
        lines.append(
            f"Token gradients change average dev F1 by {dev_gain:+.2f} points and Tatoeba by "
            f"{tatoeba_gain:+.2f} "
            f"(largest seed sd of dev F1: {noise:.2f}). The paper's direction (token gradients help, §5.1) "
            + ("holds" if holds else "does not hold")
            + (" here, " if holds else " here; ")
            + ("beyond" if abs(dev_gain) > 2 * noise else "within")
            + " twice the seed spread of dev F1."
        )
    else:
        lines.append("Not every arm has a seed yet.")
    header = (
        "arm | seed | steps | minutes | "
        + " | ".join(f"{p} F1" for p in BUCC_PAIRS)
        + " | avg dev F1 | Tatoeba avg"
    )
    return [
        *lines,
        "",
        "contrastive + MEXMA, e5, the fine-tuning settings of the table above, equal steps; without token "
        "gradients the unmasking loss reaches the encoder only through the sentence vectors (paper §5.1, "
        "model (1)). A seed sets the data order, the masking and the unmasking head's initialisation.",
        "",
        *table(header, "l" + "r" * (5 + len(BUCC_PAIRS)), rows),
    ]


def run_ablation(results: dict, store: Path, steps: int, seeds: list[int]) -> None:
    """Each MEXMA arm for `steps` steps at each seed; a run is saved, and the report rebuilt, as it ends."""
    for seed in seeds:
        for arm, spec in MEXMA_ARMS.items():
            key = ABLATION_KEY.format(arm=arm, seed=seed)
            print(f"bench_train: {key}, {steps} steps ...", flush=True)
            when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
            with tempfile.TemporaryDirectory() as scratch:
                trained = train_row(spec, Path(scratch) / "model", steps=steps, seed=seed)
                evaluated = evaluate(Path(scratch) / "model")
            results[key] = stamped(
                {"arm": arm, "seed": seed, "train": trained, "eval": evaluated, "when": when}
            )
            save_rows(store, results)
            (RESULTS / "bench_train.md").write_text(report(results))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", choices=[*ROWS, "speed"], action="append")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--ablation", choices=["mexma"], help="train both arms for --steps, once per seed")
    parser.add_argument("--steps", type=int, default=30, help="--ablation: training steps of every run")
    parser.add_argument("--seeds", default="0,1,2", help="--ablation: comma-separated seeds")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--keep-model",
        type=Path,
        metavar="DIR",
        help="copy each trained row's model dir to DIR/ROW (without checkpoints)",
    )
    parser.add_argument("--report-only", action="store_true", help="rewrite the .md from the .json")
    args = parser.parse_args()
    store = RESULTS / "bench_train.json"
    results = json.loads(store.read_text()) if store.is_file() else {}
    if args.report_only:
        (RESULTS / "bench_train.md").write_text(report(results))
        return
    if not args.only and not args.ablation:
        parser.error("--only ROW or --ablation mexma is required (or --report-only)")
    if not MODEL.is_dir():
        sys.exit(f"bench_train: {MODEL} is absent; the benchmark needs the shared model and data")
    import torch

    torch.set_num_threads(args.threads)
    if args.ablation:
        run_ablation(results, store, args.steps, [int(seed) for seed in args.seeds.split(",")])
    for row in args.only or []:
        when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
        print(f"bench_train: {row} ...", flush=True)
        if row == "speed":
            results["speed"] = stamped({**speed(), "when": when})
        elif ROWS[row] is None:
            results[row] = stamped({"eval": evaluate(MODEL), "when": when})
        else:
            with tempfile.TemporaryDirectory() as scratch:
                out = Path(scratch) / row
                trained = train_row(ROWS[row], out, minutes=args.minutes)
                results[row] = stamped({"train": trained, "eval": evaluate(out), "when": when})
                if args.keep_model:
                    keep(out, args.keep_model / row)
        save_rows(store, results)
        (RESULTS / "bench_train.md").write_text(report(results))
        print(report(results), flush=True)


if __name__ == "__main__":
    main()
