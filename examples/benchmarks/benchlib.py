"""What the benchmark scripts share: where the shared data and model are, and peak RSS."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("BITEXTMINE_SHARED", REPO.parent / "shared"))
MODEL = SHARED / "models" / "multilingual-e5-small-q4"
KEPT_SCALE = REPO / "bitextmine-work" / "bench" / "scale-ls366"  # bench_scale.py --list-size 366 --keep


def peak_rss_mb() -> float:
    """This process's peak resident set size (VmHWM) in MB."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ("?" when absent)."""
    with open("/proc/cpuinfo") as fh:
        return next((line.split(":", 1)[1].strip() for line in fh if "model name" in line), "?")


def base_vectors(root: Path, lang: str) -> np.ndarray:
    """float32 embeddings of `lang` in the workspace `root` (all rows)."""
    from bitextmine.store import EmbeddingStore

    vectors = EmbeddingStore(root / "emb" / lang, lang).vectors()
    return vectors.take(np.arange(len(vectors)))


def noisy_copies(base: np.ndarray, rows: int, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """`rows` unit vectors: rows of `base` drawn with replacement, plus gaussian noise of `sigma`."""
    picked = base[rng.integers(len(base), size=rows)]
    noisy = picked + sigma * rng.standard_normal(picked.shape, dtype=np.float32)
    return noisy / np.linalg.norm(noisy, axis=1, keepdims=True)


def save_results(out: Path, results: list[dict], markdown: str) -> None:
    """`results` as {date, results} JSON at `out` and `markdown` next to it (.md), which is also printed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"date": str(datetime.date.today()), "results": results}, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown)
    print(markdown)


def produced_by(script: str, make_target: str) -> str:
    """The report line saying when, on what and by which script a result was measured."""
    return (
        f"{datetime.date.today()} — {cpu_model()}, {os.cpu_count()} cores; "
        f"python {platform.python_version()}. Produced by `examples/benchmarks/{script}` "
        f"(`make {make_target}`)."
    )


def add_kept_workspaces(parser: argparse.ArgumentParser) -> None:
    """--work: bench_scale workspaces to measure in (see `kept_workspaces`)."""
    parser.add_argument(
        "--work",
        type=Path,
        nargs="+",
        help="kept bench_scale workspaces [bitextmine-work/bench/scale-ls366/*]",
    )


def kept_workspaces(parser: argparse.ArgumentParser, work: list[Path] | None) -> list[Path]:
    """`work`, else the workspaces `bench_scale.py --list-size 366 --keep` left, by N (a usage error
    when there are none)."""
    found = work or sorted(KEPT_SCALE.glob("n*-list366-bases*"), key=lambda p: int(p.name[1:].split("-")[0]))
    if not found:
        parser.error(f"no kept workspaces in {KEPT_SCALE}: run bench_scale.py --list-size 366 --keep")
    return found
