"""Does `mine --threshold auto`, learned from a small parallel set alone (FLORES dev, no BUCC split),
keep a BUCC-size split's F1, per language pair?

For each pair, the BUCC-like dev split's two sides are encoded and indexed in a workspace (kept under
--work: a second run only mines), `calibrate --pairs` learns the margin on FLORES dev's lines of the two
languages, then `mine --filters none` keeps the pairs at that margin and, with `--threshold auto`, the
pairs whose regional precision reaches the threshold learned by planting the FLORES pairs in the split
(docs/design.md, thresholds at scale). `eval bucc --mined` scores both against the split's gold pairs;
the oracle is the best F1 any margin reaches on the split (`eval bucc --threshold oracle`), what
calibrating on the split itself gives. Every stage is the command line, as a user runs it.

    python examples/benchmarks/bench_auto_pairs.py [--pairs de,fr,ru,zh] [--work DIR]
    python examples/benchmarks/bench_auto_pairs.py --report-only
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

from benchlib import (
    BITEXTMINE,
    MODEL,
    REPO,
    RESULTS,
    SHARED,
    cli_json,
    load_rows,
    produced_by,
    runs_table,
    save_results,
    stamped,
    table,
)

RESULT = RESULTS / "bench_auto_pairs.json"
FLORES = {"de": "deu", "fr": "fra", "ru": "rus", "zh": "zho_simpl", "en": "eng"}
PAIRS = ("de", "fr", "ru", "zh")


def bucc_dir(lang: str) -> Path:
    return SHARED / "data" / "bucc-like" / f"{lang}-en"


def flores(lang: str) -> Path:
    return SHARED / "data" / "flores101" / "dev" / f"{FLORES[lang]}.dev"


def encoded_workspace(lang: str, work: Path) -> Path:
    """The workspace of the pair's dev split, both sides encoded and indexed (`encode` and `index` skip
    what a previous run finished)."""
    workspace = work / f"{lang}-en" / "ws"
    inputs = workspace.parent / "input"
    inputs.mkdir(parents=True, exist_ok=True)
    for side in (lang, "en"):
        lines = (bucc_dir(lang) / f"{lang}-en.dev.{side}").read_text(encoding="utf-8").splitlines()
        text, sentences = inputs / f"{side}.txt", "".join(line.split("\t", 1)[1] + "\n" for line in lines)
        if not text.is_file() or text.read_text(encoding="utf-8") != sentences:
            text.write_text(sentences, encoding="utf-8")  # left as it is, encode finds its input unchanged
        run("encode", str(text), "--lang", side, "--model", str(MODEL), "--workdir", str(workspace))
        run("index", side, "--workdir", str(workspace))
    return workspace


def run(*args: str) -> None:
    subprocess.run([*BITEXTMINE, "-q", *args], check=True, capture_output=True, text=True)


def scored(lang: str, workspace: Path, threshold: str) -> dict:
    """`mine` at `threshold` (a margin, or auto), scored by `eval bucc`, with what `mine` estimated."""
    mined = workspace.parent / f"mined-{threshold}.tsv"
    mine = ["mine", lang, "en", "--threshold", threshold, "--filters", "none", "--workdir", str(workspace)]
    run(*mine, "-o", str(mined))
    stats = json.loads((workspace / "mined" / f"{lang}-en.stats.json").read_text())
    quality = evaluated(lang, workspace, "--mined", str(mined))
    counts = stats["counts"]
    return {
        "threshold": stats["threshold"]["value"],
        **quality,
        "estimated_precision": counts["estimated_precision"],
        "estimated_recall": counts["estimated_recall"],
        "calibration_unlike": counts["calibration_unlike"],
    }


def evaluated(lang: str, workspace: Path, *args: str) -> dict:
    pair = f"{lang}-en"
    summary = cli_json(
        "eval", "bucc", "--bucc", str(bucc_dir(lang)), "--pair", pair, "--split", "dev",
        "--model", str(MODEL), "--workdir", str(workspace), *args,
    )  # fmt: skip
    return {key: round(summary[key], 2) for key in ("precision", "recall", "f1")}


def measure(lang: str, work: Path) -> dict:
    workspace = encoded_workspace(lang, work)
    pairs = ["--pairs", str(flores(lang)), str(flores("en"))]
    run("calibrate", *pairs, "--pair", f"{lang}-en", "--model", str(MODEL), "--workdir", str(workspace))
    margin = json.loads((workspace / "thresholds.json").read_text())["thresholds"][0]["value"]
    return stamped(
        {
            "pair": f"{lang}-en",
            "flores_margin": scored(lang, workspace, repr(margin)),
            "auto": scored(lang, workspace, "auto"),
            "oracle": evaluated(lang, workspace, "--threshold", "oracle"),
        }
    )


def _unlike(auto: dict) -> str:
    """How unlike the FLORES pairs' regions are to the split's translations (blank: not recorded)."""
    return "" if auto.get("calibration_unlike") is None else f"{auto['calibration_unlike']:.2f}"


def report(rows: list[dict]) -> str:
    def prf(cell: dict) -> str:
        return f"{cell['precision']} / {cell['recall']} / {cell['f1']}"

    method = " ".join(__doc__.split("\n\n")[1].split())
    lines = [
        "# `--threshold auto` from FLORES dev pairs on BUCC-size splits",
        "",
        f"{produced_by('bench_auto_pairs.py', 'bench-auto-pairs')} {method}",
        "",
        *table(
            "pair | FLORES margin | P / R / F1 there | auto threshold | P / R / F1 with auto | estimated "
            "P / R | unlike | oracle F1",
            "lrrrrrrr",
            (
                f"{r['pair']} | {r['flores_margin']['threshold']:.4f} | {prf(r['flores_margin'])} | "
                f"{r['auto']['threshold']:.4f} | {prf(r['auto'])} | {r['auto']['estimated_precision']} / "
                f"{r['auto']['estimated_recall']} | {_unlike(r['auto'])} | {r['oracle']['f1']}"
                for r in rows
            ),
        ),
        "",
        conclusion(rows),
        "",
        *runs_table(rows, lambda row: row["pair"]),
        "",
    ]
    return "\n".join(lines)


def conclusion(rows: list[dict]) -> str:
    """The report's sentence: how far auto and the FLORES margin land from each split's oracle."""
    if not rows:
        return "No rows yet."

    def worst(rule: str) -> float:
        return max(row["oracle"]["f1"] - row[rule]["f1"] for row in rows)

    return (
        f"With `--threshold auto` every split lands within {worst('auto'):.2f} F1 of its oracle; at the "
        f"margin calibrated on the same FLORES pairs, up to {worst('flores_margin'):.2f} below it."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", default=",".join(PAIRS), help="source languages, to English")
    parser.add_argument("--work", type=Path, default=REPO / "bitextmine-work" / "auto-pairs")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    rows = load_rows(RESULT)
    if not args.report_only:
        measured = {row["pair"]: row for row in rows}
        for lang in args.pairs.split(","):
            measured[f"{lang}-en"] = measure(lang, args.work)
        rows = sorted(measured.values(), key=lambda row: row["pair"])
    save_results(RESULT, rows, report(rows))


if __name__ == "__main__":
    main()
