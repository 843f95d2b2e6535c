"""Do thresholds learned on one split carry to another?

Each BUCC-format dev split of ../shared/data/bucc-like is cut in two halves, A and B, by its gold pairs
(each half gets half the gold pairs, and each side's other sentences are dealt at random), --rounds times
with different seeds. A threshold rule sees half A only; its F1 on half B is compared with the best F1
any threshold reaches on B (the oracle): the gap is what a user loses by calibrating on one split and
mining another of the same kind. Rules:

* best-f1: the threshold with the best F1 on A (what `calibrate` does by default);
* plateau 1: the middle of the thresholds whose F1 on A is within 1 point of the best (`calibrate
  --plateau 1`);
* bagged: the median of the best-F1 thresholds of 50 bootstrap resamples of A's candidates;
* precision>=P: the lowest threshold whose precision on A is at least P (`calibrate --target-precision`);
* joint: one threshold for every pair, the best sum of F1 over all pairs' A halves.

Rows `zh-size`: each pair first sampled down to the zh-en split's gold count (`sample_split`), to tell
the effect of the split's size from that of the language pair. Vectors are encoded once per model in
bf16 (cached under --cache), and mining is exact (ratio margin, k = 4, max strategy).

Usage: python examples/benchmarks/bench_thresholds.py --label base [--model DIR] [--rounds 20]
       python examples/benchmarks/bench_thresholds.py --report-only
Results accumulate by label in results/bench_thresholds.json; results/bench_thresholds.md is rebuilt.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np
from benchlib import MODEL, REPO, RESULTS, Half, bucc_split, halves, mined_half, save_rows, stamped, table

import bitextmine as bm

PAIRS = ("de-en", "fr-en", "ru-en", "zh-en")
TARGETS = (0.9, 0.95)
OUT = RESULTS / "bench_thresholds.json"


def rows_of(full, sampled) -> list[int]:
    """Rows of `full` (a BuccSide) holding the sentences of `sampled`, a subset of it."""
    row = {sentence_id: k for k, sentence_id in enumerate(full.ids)}
    return [row[i] for i in sampled.ids]


def joint_threshold(halves_a: list[Half]) -> float:
    """The threshold with the best sum of F1 over all pairs' halves."""
    candidates = np.unique(np.concatenate([h.sweep().curve.thresholds for h in halves_a]))
    totals = [sum(h.f1_at(t) for h in halves_a) for t in candidates]
    return float(candidates[int(np.argmax(totals))])


def measure(model: Path, rounds: int, cache: Path, size_matched: bool) -> list[dict]:
    encoder = bm.load_encoder(model, precision="bf16")
    splits = {pair: bucc_split(pair) for pair in PAIRS}
    vectors = {
        pair: (bm.embed(encoder, s.src.sentences, cache), bm.embed(encoder, s.tgt.sentences, cache))
        for pair, s in splits.items()
    }
    smallest = min(len(s.gold) for s in splits.values())
    gaps: dict[tuple[str, str], list[float]] = {}
    for seed in range(rounds):
        rng = np.random.default_rng(seed)
        pairs_a, pairs_b = [], []
        for pair, full in splits.items():
            split, (src, tgt) = full, vectors[pair]
            if size_matched:
                fraction = smallest / len(full.gold)
                split = bm.sample_split(full, round(fraction * len(full.src.ids)), seed=seed)
                src, tgt = src[rows_of(full.src, split.src)], tgt[rows_of(full.tgt, split.tgt)]
            (a, *va), (b, *vb) = halves(split, src, tgt, rng)
            pairs_a.append(mined_half(pair, a, *va))
            pairs_b.append(mined_half(pair, b, *vb))
        joint = joint_threshold(pairs_a)
        for ha, hb in zip(pairs_a, pairs_b, strict=True):
            oracle = hb.sweep()
            chosen = {"best-f1": ha.threshold(), "plateau 1": ha.threshold(plateau=1.0)}
            chosen |= {"bagged": ha.bagged_threshold(rng), "joint": joint}
            chosen |= {f"precision>={t:g}": ha.threshold(t) for t in TARGETS}
            for rule, threshold in chosen.items():
                lost = 100 * (oracle.scores.f1 - hb.f1_at(threshold))
                gaps.setdefault((ha.pair, rule), []).append(lost)
            gaps.setdefault((ha.pair, "threshold A - oracle B"), []).append(
                chosen["best-f1"] - oracle.threshold
            )
            gaps.setdefault((ha.pair, "plateau width (1 point)"), []).append(ha.plateau_width(1.0))
            gaps.setdefault((ha.pair, "gold pairs in B"), []).append(hb.gold)
    return [
        {"pair": pair, "rule": rule, "mean": statistics.mean(v), "sd": statistics.pstdev(v), "rounds": len(v)}
        for (pair, rule), v in gaps.items()
    ]


def report(runs: dict) -> str:
    intro = (__doc__ or "").split("\n\nUsage:")[0].split("\n\n", 1)[1]
    lines = ["# bench_thresholds: does a calibrated threshold carry to another split?", "", intro, ""]
    lines += [
        "Cells: mean F1 points lost on half B against its oracle, (sd) over the rounds; the threshold row: "
        "the best-F1 threshold of A minus B's oracle threshold; the plateau row: the width of the range of "
        "thresholds whose F1 on A is within 1 point of the best. Date, machine and commit: the JSON."
    ]
    for label, run in runs.items():
        lines += ["", f"## {label} (model {run['model']}, {run['rounds']} rounds, {run['commit']})", ""]
        by = {(r["pair"], r["rule"]): r for r in run["rows"]}
        rows = []
        for rule in dict.fromkeys(r["rule"] for r in run["rows"]):
            digits = (
                4 if rule.startswith(("threshold", "plateau w")) else (0 if rule.startswith("gold") else 2)
            )
            cells = [f"{by[(p, rule)]['mean']:.{digits}f} ({by[(p, rule)]['sd']:.{digits}f})" for p in PAIRS]
            rows.append(" | ".join([rule, *cells]))
        lines += table(" | ".join(["rule", *PAIRS]), "l" + "r" * len(PAIRS), rows)
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--label")
    parser.add_argument("--model", type=Path, default=MODEL)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--cache", type=Path, default=REPO / "bitextmine-work" / "bench" / "thresholds")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    runs = json.loads(OUT.read_text()) if OUT.exists() else {}
    if not args.report_only:
        args.cache.mkdir(parents=True, exist_ok=True)
        for size_matched in (False, True):
            label = f"{args.label}, zh-size" if size_matched else args.label
            rows = measure(args.model, args.rounds, args.cache, size_matched)
            runs[label] = stamped({"model": args.model.name, "rounds": args.rounds, "rows": rows})
            save_rows(OUT, runs)
    (RESULTS / "bench_thresholds.md").write_text(report(runs))
    print((RESULTS / "bench_thresholds.md").read_text())


if __name__ == "__main__":
    main()
