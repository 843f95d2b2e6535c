"""What the benchmark scripts share: where the shared data and model are, the shared BUCC-format splits,
a workspace's vectors, peak RSS, and the stamp that every result row carries (`date`, `machine`,
`software`, `commit`), written and read back here. Benchmarks reach bitextmine through its public API
(`import bitextmine`) or its command line (`BITEXTMINE`)."""

from __future__ import annotations

import datetime
import functools
import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

import bitextmine as bm

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("BITEXTMINE_SHARED", REPO.parent / "shared"))
MODEL = SHARED / "models" / "multilingual-e5-small-q4"
RESULTS = Path(__file__).with_name("results")
STAMP = ("date", "machine", "software", "commit")
BITEXTMINE = [sys.executable, "-m", "bitextmine"]


def bucc_split(pair: str, dataset: str = "bucc-like", split: str = "dev"):
    """A split of one of the shared BUCC-format data sets (`bucc-like`, `noisy-bucc`): a BuccSplit."""
    return bm.read_bucc(SHARED / "data" / dataset / pair, pair, split)


def oracle(split, encoder, workdir: Path, settings=None):
    """`evaluate_bucc` at the split's best threshold, vectors cached in the workspace `workdir`."""
    import bitextmine as bm

    settings = settings or bm.MiningSettings()
    options = bm.EvaluateOptions(settings.k, settings.margin, settings.strategy, threshold="oracle")
    return bm.evaluate_bucc(bm.Workspace(workdir), split, encoder, options)


def cli_json(*args: str) -> dict:
    """The --json summary of the command `bitextmine ARGS` (quiet; its printed summary goes to stderr)."""
    command = [*BITEXTMINE, "-q", *args, "--json", "-"]
    return json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)


def workspace_vectors(workdir: Path, lang: str, rows: int) -> np.ndarray:
    """The first `rows` vectors of `lang` in a workspace, float32, read as docs/design.md lays them out:
    WORK/emb/LANG/shard-NNNNN.npy (float16 rows in corpus order), complete once its .json record exists."""
    parts, have = [], 0
    for shard in sorted(bm.Workspace(workdir).embedding_dir(lang).glob("shard-*.npy")):
        if have >= rows or not shard.with_suffix(".json").is_file():
            break
        parts.append(np.load(shard, mmap_mode="r")[: rows - have].astype(np.float32))
        have += len(parts[-1])
    if have < rows:
        raise SystemExit(f"{workdir}: {have:,} vectors of {lang!r} encoded, {rows:,} needed")
    return np.concatenate(parts)


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


def ram_gb() -> float:
    """The machine's memory (MemTotal) in GB."""
    with open("/proc/meminfo") as fh:
        return next(int(line.split()[1]) / 1024**2 for line in fh if line.startswith("MemTotal:"))


def machine() -> str:
    """CPU model, cores and RAM, and the GPU where this process's torch sees one:
    "AMD EPYC, 2 cores, 24 GB RAM" or "..., NVIDIA H100 80GB HBM3"."""
    text = f"{cpu_model()}, {os.cpu_count()} cores, {ram_gb():.0f} GB RAM"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        text += f", {torch.cuda.get_device_name()}"
    return text


def software() -> str:
    """Python and the versions of the numeric libraries this process has imported."""
    versions = [f"python {platform.python_version()}"]
    for name in ("numpy", "faiss", "torch"):
        module = sys.modules.get(name)
        if module is not None:
            versions.append(f"{name} {getattr(module, '__version__', '?')}")
    return ", ".join(versions)


@functools.cache
def commit() -> str:
    """`git rev-parse --short HEAD`, with "-dirty" when tracked files outside results/ have changes (the
    results a run writes do not make its next row dirty); "unknown" outside a git checkout."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout

    try:
        head = git("rev-parse", "--short", "HEAD").strip()
        changes = git(
            "status", "--porcelain", "--untracked-files=no", "--", ".", f":!{RESULTS.relative_to(REPO)}"
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if changes.strip() else "")


def stamp() -> dict:
    """When, on what and at which commit a row was measured: the fields every result row carries."""
    return {
        "date": str(datetime.date.today()),
        "machine": machine(),
        "software": software(),
        "commit": commit(),
    }


def stamped(row: dict) -> dict:
    """`row` with today's stamp (see `stamp`) after its own fields."""
    return {**row, **stamp()}


def load_rows(path: Path) -> list[dict]:
    """The rows of a results JSON ({"results": [...]}); [] when the file is absent."""
    return json.loads(path.read_text())["results"] if path.is_file() else []


def save_rows(path: Path, rows: list[dict] | dict[str, dict]) -> None:
    """`rows` as {"results": rows} at `path`, or, keyed by name (bench_train), as that dict; every row must
    carry the stamp (a row measured now: `stamped`)."""
    listed = rows if isinstance(rows, list) else list(rows.values())
    unstamped = [row for row in listed if any(key not in row for key in STAMP)]
    if unstamped:
        raise ValueError(f"{len(unstamped)} rows without {', '.join(STAMP)}, e.g. {unstamped[0]}")
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"results": rows} if isinstance(rows, list) else rows
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def save_results(path: Path, rows: list[dict], markdown: str) -> None:
    """`rows` at `path` (see `save_rows`) and `markdown` next to it (.md), which is also printed."""
    save_rows(path, rows)
    path.with_suffix(".md").write_text(markdown)
    print(markdown)


def produced_by(command: str, make_target: str) -> str:
    """The report line naming the command and make target that produce (and rewrite) a report."""
    return f"Produced by `{command}` (`make {make_target}`); each row's date, machine and commit: the JSON."


def distinct(rows: list[dict], field: str) -> str:
    """The distinct values of `field` over `rows` for a report's text, "/"-separated ("?": not recorded)."""
    values = sorted({row.get(field) for row in rows}, key=str)
    return "/".join("?" if v is None else f"{v:,}" if isinstance(v, int | float) else str(v) for v in values)


def table(header: str, align: str, rows: Iterable[str]) -> list[str]:
    """A markdown table from "a | b" strings: `align` has a letter a column, "l" (left) or "r" (right)."""
    rule = "|" + "|".join("---" if a == "l" else "---:" for a in align) + "|"
    return [f"| {header} |", rule, *(f"| {row} |" for row in rows)]


def runs_table(rows: list[dict], label: Callable[[dict], str] | None = None) -> list[str]:
    """Where the rows come from: a line for each distinct (date, machine, software, commit), with its rows'
    labels (`label(row)`) or their count."""
    runs: dict[tuple, list[dict]] = {}
    for row in rows:
        runs.setdefault(tuple(str(row.get(key, "?")) for key in STAMP), []).append(row)
    return [
        "Rows by run:",
        "",
        *table(
            "date | machine | software | commit | rows",
            "lllll",
            (
                " | ".join([*run, ", ".join(map(label, members)) if label else str(len(members))])
                for run, members in sorted(runs.items())
            ),
        ),
    ]
