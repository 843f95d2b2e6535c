"""The rows of `train_weak_languages.sh`: one per trained run (arm, seed) and one for the base model, with
held-out xsim error and Tatoeba accuracy per language (also in languages no training file has), appended
to a results JSON; its report (.md next to it) gives each arm's mean ± sd over seeds, machine by machine
(bf16 kernels differ).

Usage: python examples/benchmarks/weak_languages_rows.py RUNS_DIR RESULTS_JSON ARMS
       python examples/benchmarks/weak_languages_rows.py --report-only RESULTS_JSON
(ARMS as the script's: NAME:STEPS:FLAGS;...; a row records its arm's steps and flags.)
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import torch  # noqa: F401  (imported so that the stamp's machine names the GPU where there is one)
from benchlib import load_rows, runs_table, save_results, stamped, table

XSIM_LANGS = ("amh", "swh", "tam", "yor", "khm", "deu", "fra", "rus", "zho_simpl", "ces")
TATOEBA_LANGS = ("amh", "swh", "tam", "khm", "deu", "fra", "rus", "cmn", "ces")
UNSEEN_LANGS = ("epo", "ina", "lat", "bre", "eus", "tat", "uig", "kab")  # Tatoeba, in no training file
BASE = "base"
RUN_FILES = ("train", "xsim", "tatoeba", "unseen")  # a trained run's --json outputs, in the order written


def run_files(run_dir: Path) -> dict:
    """A run's outputs: `train --json`, `eval xsim --json`, the two `eval tatoeba --json` (tatoeba, unseen)
    and the last record of its train_log.jsonl (the base model has only xsim and unseen)."""
    files = {f.stem: json.loads(f.read_text()) for f in run_dir.glob("*.json")}
    log = run_dir / "model" / "train_log.jsonl"
    if log.is_file():
        files["log_last"] = json.loads(log.read_text().splitlines()[-1])
    return files


def row(arm: str, seed: int | None, steps: int | None, flags: str, files: dict) -> dict:
    """A run's row: xsim error (%) and Tatoeba accuracy (mean of both directions; held-out and unseen) per
    language, and the training figures."""
    result = {"arm": arm, "seed": seed, "steps": steps, "flags": flags}
    result["xsim"] = {r["lang"]: r["error_rate"] for r in files["xsim"]["rows"]}
    for name in ("tatoeba", "unseen"):
        if name in files:
            result[name] = {r["lang"]: (r["xx_to_eng"] + r["eng_to_xx"]) / 2 for r in files[name]["rows"]}
    if "train" in files:
        train, last = files["train"], files["log_last"]
        result["train"] = {"pairs": train["pairs"], "seconds": round(train["seconds"], 1)}
        result["train"] |= {
            key: round(last[key], 4) for key in ("loss", "distill/xx", "distill/en") if key in last
        }
    return result


def parse_arms(text: str) -> dict[str, tuple[int, str]]:
    """NAME:STEPS:FLAGS;... -> {name: (steps, flags)}."""
    arms = {}
    for item in filter(None, text.split(";")):
        name, steps, flags = item.split(":", 2)
        arms[name] = (int(steps), flags)
    return arms


def collect(runs: Path, arms: dict[str, tuple[int, str]]) -> list[dict]:
    """The rows of every complete run directory NAME-seedSEED under `runs` whose arm is in `arms`, and the
    base's; an incomplete run (one that failed midway) is named on stderr and left out."""
    rows = [row(BASE, None, None, "", run_files(runs / BASE))]
    for run_dir in sorted(runs.glob("*-seed*")):
        name, seed = run_dir.name.rsplit("-seed", 1)
        if name not in arms:
            continue
        missing = [f"{stem}.json" for stem in RUN_FILES if not (run_dir / f"{stem}.json").is_file()]
        if missing:
            print(f"weak_languages_rows: {run_dir} lacks {', '.join(missing)}: left out", file=sys.stderr)
            continue
        steps, flags = arms[name]
        rows.append(row(name, int(seed), steps, flags, run_files(run_dir)))
    return [stamped(r) for r in rows]


def mean_sd(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.2f} ± {sd:.2f}"


def machine_label(machine: str) -> str:
    """The GPU where the stamp names one, else the CPU model: bf16 kernels differ between them."""
    parts = [part.strip() for part in machine.split(",")]
    return next((part for part in parts if "NVIDIA" in part), parts[0])


def report(rows: list[dict]) -> str:
    """Each arm's mean ± sd over its seeds on one machine: xsim averaged over the languages, Yoruba's,
    Tatoeba averaged; then each language's mean."""
    by_arm: dict[str, list[dict]] = {}
    for r in rows:
        by_arm.setdefault(f"{r['arm']} | {machine_label(r['machine'])}", []).append(r)
    head = (
        "arm | machine | steps | flags | seeds | xsim % avg | yor xsim % | Tatoeba avg | unseen | distill/en"
    )
    summary = []
    for arm, runs in by_arm.items():
        tatoeba, unseen = (
            [statistics.mean(r[k].values()) for r in runs if k in r] for k in ("tatoeba", "unseen")
        )
        distill = [r["train"]["distill/en"] for r in runs if "distill/en" in r.get("train", {})]
        summary.append(
            " | ".join(
                [
                    arm, str(runs[0]["steps"] or "-"), f"`{runs[0]['flags']}`" if runs[0]["flags"] else "-",
                    str(len(runs)) if runs[0]["seed"] is not None else "-",
                    mean_sd([statistics.mean(r["xsim"].values()) for r in runs]),
                    mean_sd([r["xsim"]["yor"] for r in runs]),
                    mean_sd(tatoeba) if tatoeba else "-",
                    mean_sd(unseen) if unseen else "-",
                    mean_sd(distill) if distill else "-",
                ]
            )
        )  # fmt: skip
    per_lang = [
        " | ".join([arm, *(f"{statistics.mean(r['xsim'][lang] for r in runs):.2f}" for lang in XSIM_LANGS)])
        for arm, runs in by_arm.items()
    ]
    lines = [
        "# The `weak-languages` recipe over seeds: held-out xsim and Tatoeba",
        "",
        "Produced by `examples/benchmarks/train_weak_languages.sh` (rows: `weak_languages_rows.py`); what "
        "the runs are, their command and the conclusion: [training_runs.md](training_runs.md). xsim: % "
        "error, FLORES dev xx -> eng, the last 200 lines; Tatoeba: accuracy, mean of both directions, the "
        "last 200 pairs (all 168 for amh); unseen: Tatoeba accuracy in 8 languages no training file has "
        f"({', '.join(UNSEEN_LANGS)}), all pairs. distill/en: the English side's distance to the teacher "
        "at the last step (- without distill).",
        "",
        *table(head, "llrlrrrrrr", summary),
        "",
        "xsim % error by language (mean over seeds):",
        "",
        *table("arm | machine | " + " | ".join(XSIM_LANGS), "ll" + "r" * len(XSIM_LANGS), per_lang),
        "",
        *runs_table(rows, lambda r: r["arm"]),
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    if sys.argv[1] == "--report-only":
        store = Path(sys.argv[2])
        store.with_suffix(".md").write_text(report(load_rows(store)))
        return
    runs, store, arms = Path(sys.argv[1]), Path(sys.argv[2]), parse_arms(sys.argv[3])
    rows = load_rows(store) + collect(runs, arms)
    save_results(store, rows, report(rows))


if __name__ == "__main__":
    main()
