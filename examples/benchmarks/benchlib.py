"""What the benchmark scripts share: where the shared data and model are, the shared BUCC-format splits
and their halves (a threshold calibrated on one half, scored on the other), a workspace's vectors, peak
RSS, and the stamp that every result row carries (`date`, `machine`, `software`, `commit`), written and
read back here. Benchmarks reach bitextmine through its public API
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
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

import bitextmine as bm

# measured on purpose: calibrate's threshold sweep, one rule at a time, on halves of a split's candidates
from bitextmine.calibration.bucc import BuccError
from bitextmine.calibration.sweep import sweep_threshold

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("BITEXTMINE_SHARED", REPO.parent / "shared"))
MODEL = SHARED / "models" / "multilingual-e5-small-q4"
RESULTS = Path(__file__).with_name("results")
STAMP = ("date", "machine", "software", "commit")
BITEXTMINE = [sys.executable, "-m", "bitextmine"]
BAGGING_DRAWS = 50


def bucc_split(pair: str, dataset: str = "bucc-like", split: str = "dev"):
    """A split of one of the shared BUCC-format data sets (`bucc-like`, `noisy-bucc`): a BuccSplit."""
    return bm.read_bucc(SHARED / "data" / dataset / pair, pair, split)


def oracle(split, encoder, workdir: Path, settings=None):
    """`evaluate_bucc` at the split's best threshold, vectors cached in the workspace `workdir`."""
    import bitextmine as bm

    settings = settings or bm.MiningSettings()
    options = bm.EvaluateOptions(settings.k, settings.margin, settings.strategy, threshold="oracle")
    return bm.evaluate_bucc(bm.Workspace(workdir), split, encoder, options)


@dataclass
class Half:
    """The one-to-one candidates mined in one half of a split (`halves`), and calibrate's threshold rules
    on them."""

    pair: str
    scores: np.ndarray  # the one-to-one candidates' margin scores
    is_gold: np.ndarray
    gold: int

    def sweep(self, target: float | None = None, plateau: float | None = None):
        """`calibrate`'s sweep of this half: best F1, the lowest threshold reaching `target` precision,
        or the middle of those within `plateau` F1 points of the best."""
        return sweep_threshold(self.scores, self.is_gold, self.gold, target, plateau)

    def threshold(self, target: float | None = None, plateau: float | None = None) -> float:
        """The sweep's threshold; where no threshold reaches `target`, the most precise one."""
        try:
            return self.sweep(target, plateau).threshold
        except BuccError:
            curve = self.sweep().curve
            return float(curve.thresholds[int(np.argmax(curve.precision()))])

    def bagged_threshold(self, rng: np.random.Generator, draws: int = BAGGING_DRAWS) -> float:
        """The median of the best-F1 thresholds of `draws` bootstrap resamples of the candidates (gold
        pairs that no candidate found stay missed)."""
        missed = self.gold - int(self.is_gold.sum())
        chosen = []
        for _ in range(draws):
            rows = rng.integers(len(self.scores), size=len(self.scores))
            gold = self.is_gold[rows]
            chosen.append(sweep_threshold(self.scores[rows], gold, missed + int(gold.sum())).threshold)
        return float(np.median(chosen))

    def plateau_width(self, points: float) -> float:
        """The range of the thresholds whose F1 is within `points` of the best."""
        curve = self.sweep().curve
        f1 = curve.f1()
        near = curve.thresholds[f1 >= f1.max() - points / 100 - 1e-12].astype(np.float64)
        return float(near.max() - near.min())

    def f1_at(self, threshold: float) -> float:
        kept = self.scores >= threshold
        true = int(self.is_gold[kept].sum())
        return 2 * true / (int(kept.sum()) + self.gold)


def halves(split, src: np.ndarray, tgt: np.ndarray, rng: np.random.Generator):
    """Two BuccSplits with their vectors: half the gold pairs each, other sentences dealt at random."""
    gold = sorted(split.gold)
    in_a = set(rng.permutation(len(gold))[: len(gold) // 2].tolist())
    gold_a = {g for i, g in enumerate(gold) if i in in_a}
    coins = [rng.random(len(side.ids)) < 0.5 for side in (split.src, split.tgt)]  # True: to half A
    out = []
    for want_a in (True, False):
        pairs = gold_a if want_a else set(gold) - gold_a
        sides, vectors = [], []
        for position, (side, vecs) in enumerate(((split.src, src), (split.tgt, tgt))):
            gold_ids = {g[position] for g in gold}
            mine_ids = {g[position] for g in pairs}
            rows = [
                k
                for k, i in enumerate(side.ids)
                if i in mine_ids or (i not in gold_ids and coins[position][k] == want_a)
            ]
            kept = {"ids": [side.ids[k] for k in rows], "sentences": [side.sentences[k] for k in rows]}
            sides.append(replace(side, **kept))
            vectors.append(vecs[rows])
        out.append((replace(split, src=sides[0], tgt=sides[1], gold=pairs), *vectors))
    return out


def mined_half(pair: str, split, src: np.ndarray, tgt: np.ndarray) -> Half:
    """The split's one-to-one candidates mined exactly (ratio margin, k = 4, max strategy)."""
    mined = bm.mine_arrays(src, tgt)
    found = zip(mined.src, mined.tgt, strict=True)
    is_gold = np.array([(split.src.ids[s], split.tgt.ids[t]) in split.gold for s, t in found], dtype=bool)
    return Half(pair, mined.score, is_gold, len(split.gold))


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
