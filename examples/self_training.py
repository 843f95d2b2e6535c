"""Self-training: mine monolingual news with the base model, train on what was mined, mine again.

    python examples/self_training.py --model ../shared/models/multilingual-e5-small-q4 \
        --mono ../shared/data/mono --bucc ../shared/data/bucc-like/de-en \
        --known ../shared/data/parallel/de-en/news --work /tmp/self-training --rounds 2 --steps 60

Round r (model 0 is --model):
  1. encode news.SRC and news.en with model r into WORK/round-r (language identification: --lid), index both;
  2. calibrate on the BUCC-format dev split: the best-F1 threshold, and that F1 (the round's dev F1);
  3. mine SRC-en at that threshold (pair filters: --filters);
  4. (r < --rounds) train model r+1 from model r on the mined file for --steps steps (the `mining`
     recipe's settings), skipping every pair with a sentence of the BUCC dir (`--exclude`): the
     corpora contain the dev sentences, which must not be trained on.
The table gives each round's dev F1, threshold and mined pairs, and with --known PREFIX (line-aligned
PREFIX.SRC / PREFIX.en of known translations) the mined pairs' precision against them, counted over
the mined pairs whose SRC side has a known translation. A rerun reuses the encoded corpora and the
trained models already in WORK.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import zstandard

import bitextmine as bm
from bitextmine.train.recipes import RECIPES


@dataclass
class Round:
    model: str
    threshold: float
    dev_f1: float
    mined: Path
    pairs: int


def mine_round(model: str, args: argparse.Namespace, work: bm.Workspace) -> Round:
    """Encode, index, calibrate and mine with `model` in `work`."""
    for lang in (args.src, "en"):
        bm.encode(work, [args.mono / f"news.{lang}.txt.zst"], lang, model, bm.EncodeOptions(lid=args.lid))
        bm.index(work, lang)
    split = bm.read_bucc(args.bucc, f"{args.src}-en", "dev")
    encoder = bm.load_encoder(model)
    calibration = bm.calibrate(work, split, encoder)
    options = bm.MineOptions(threshold="auto", filters=args.filters and bm.parse_filters(args.filters))
    mined = bm.mine(work, args.src, "en", options)
    result = calibration.result
    return Round(model, result.threshold, 100 * result.scores.f1, mined.output, mined.kept)


def train_round(previous: Round, args: argparse.Namespace, out: Path) -> str:
    """Model r+1: model r trained on round r's mined pairs (nothing is done if `out` holds a model)."""
    if not (out / "bitextmine.json").is_file():
        config = bm.TrainConfig(
            data=[str(previous.mined)],
            out=out,
            base=previous.model,
            exclude=[str(args.bucc)],
            max_steps=args.steps,
            checkpoint_every=0,
            **RECIPES["mining"].config_settings(),
        )
        bm.train_encoder(config)
    return str(out)


def known_precision(mined: Path, prefix: Path, src: str) -> str:
    """Mined pairs that are known translations, over those whose source has one: "P% (k of n)"."""
    with open(f"{prefix}.{src}", encoding="utf-8") as fs, open(f"{prefix}.en", encoding="utf-8") as ft:
        known = {s.rstrip("\n"): t.rstrip("\n") for s, t in zip(fs, ft, strict=True)}
    with zstandard.open(mined, "rt", encoding="utf-8") as fh:
        rows = [line.split("\t")[1:3] for line in fh]  # score, src, tgt, src id, tgt id
    judged = [(s, t) for s, t in rows if s in known]
    right = sum(known[s] == t for s, t in judged)
    return f"{100 * right / max(len(judged), 1):.1f}% ({right:,} of {len(judged):,})"


def report(rounds: list[Round], args: argparse.Namespace) -> str:
    """A markdown table, a row a round."""
    columns = ["round", "dev F1", "threshold", "mined pairs"] + (["precision vs known"] if args.known else [])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---:|" * len(columns)]
    for r, done in enumerate(rounds):
        cells = [str(r), f"{done.dev_f1:.2f}", f"{done.threshold:.4f}", f"{done.pairs:,}"]
        if args.known:
            cells.append(known_precision(done.mined, args.known, args.src))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="the base model (dir or hub id), only read")
    parser.add_argument(
        "--mono", type=Path, required=True, help="folder with news.SRC.txt.zst, news.en.txt.zst"
    )
    parser.add_argument("--bucc", type=Path, required=True, help="BUCC-format folder SRC-en (dev split)")
    parser.add_argument("--work", type=Path, required=True, help="workspaces and models (created)")
    parser.add_argument("--src", default="de", help="the non-English language (default: de)")
    parser.add_argument("--rounds", type=int, default=1, help="training rounds (default: 1)")
    parser.add_argument("--steps", type=int, default=60, help="training steps a round (default: 60)")
    parser.add_argument("--known", type=Path, help="PREFIX of known translations PREFIX.SRC / PREFIX.en")
    parser.add_argument("--lid", help="encode's language identification rule (default: encode's, reject)")
    parser.add_argument("--filters", help="mine's pair-filter preset (default: mine's, web)")
    args = parser.parse_args()

    model, rounds = args.model, []
    for r in range(args.rounds + 1):
        rounds.append(mine_round(model, args, bm.Workspace(args.work / f"round-{r}")))
        print(f"round {r}: dev F1 {rounds[-1].dev_f1:.2f}, {rounds[-1].pairs:,} pairs mined", flush=True)
        if r < args.rounds:
            model = train_round(rounds[-1], args, args.work / f"model-{r + 1}")
    print(report(rounds, args), end="")


if __name__ == "__main__":
    main()
