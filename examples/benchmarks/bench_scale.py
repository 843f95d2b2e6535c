"""Mining real text at scale: shared/data/scale/de-en (1,050,592 sentences a side, 50,592 hidden pairs).

    python bench_scale.py encode                  # tier-ordered text, then `bitextmine encode` of both sides
    python bench_scale.py run --sizes 100000,... --densities set,0.01  # per subsample and index setting
    python bench_scale.py run --sizes 1050592 --settings default --without-exact  # no hours of exact search
    python bench_scale.py auto                    # `mine --threshold auto` again in recorded workspaces
    python bench_scale.py report                  # results/bench_scale_real.md from its JSON

Encoding is the long stage (hours on 2 cores) and resumes where it stopped: both sides are encoded once,
side by side, in tier order (scale_set.py), so the subsample of size N is the first N rows of each side.
Each subsample (a size, and a gold density: the set's own or lower, scale_set.density_rows) then gets a
workspace of its own into which its vectors are imported (`encode --embeddings`), and every stage runs
as its own `bitextmine` process, timed with its peak RSS.

The threshold is `calibrate`'s best-F1 threshold on the shared de-en dev split, with the same model;
imported vectors carry no model fingerprint, so it is passed to `mine` as a number. `mine` writes every
one-to-one candidate; precision, recall and F1 count those at or above the threshold against the
subsample's hidden pairs, per source of the pairs (scale_quality.py), beside the best any threshold
reaches. Then `calibrate --embeddings` on the dev split's vectors (encoded once, bf16 as the set is) stores
its gold pairs in the workspace, and a second `mine --threshold auto` (on the saved neighbour lists) learns
the threshold inside the corpus: its row gives the true P/R/F1 there and `mine`'s estimates of them.
Each index setting in SETTINGS (exact search,
`index`'s default, IVF with given lists and probes) has a workspace of its own, and its row gives the
share of exact mining's pairs (above the threshold) that it keeps: the default index must keep at least
99% of them, at the least time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import BITEXTMINE, MODEL, REPO, RESULTS, SHARED, load_rows, save_results, stamped, table
from scale_quality import SUBSETS, Hidden, Mined, quality
from scale_set import LANGS, density_rows, gold_sources, write_tier_files

WORK = Path(os.environ.get("SCALE_WORK", REPO / "bitextmine-work" / "scale"))
ENCODED = WORK / "enc"
SCALE = SHARED / "data" / "scale" / "de-en"
DEV_SPLIT = SHARED / "data" / "bucc-like" / "de-en"
SIZES = [100_000, 300_000, 1_050_592]
RESULT = RESULTS / "bench_scale_real.json"
# Index settings: (label, workspace suffix, `index` options). Exact first: the others are compared with it.
EXACT_SETTING = ("exact", "exact", ["--factory", "Flat"])
SETTINGS = [
    EXACT_SETTING,
    ("default", "default", []),
    ("list-size 1000, nprobe 16", "ivf", ["--list-size", "1000", "--nprobe", "16"]),
    ("list-size 1000, nprobe 8", "ivf8", ["--list-size", "1000", "--nprobe", "8"]),
    ("list-size 1000, nprobe 32", "ivf32", ["--list-size", "1000", "--nprobe", "32"]),
]
# Exact mining of the full set takes hours on 2 cores, more than one sitting: its neighbour jobs are
# this many queries, so a run stopped with SIGTERM (or Ctrl-C) loses at most one job's work on rerun.
EXACT_JOB_ROWS = 32_768
KIND_PAIRS = 400  # calibration pairs of the corpus's kind, as many as the dev split's gold pairs


class Interrupted(Exception):
    """SIGTERM or Ctrl-C while a `bitextmine` process ran: its figures so far are in `args[0]`."""


def _interrupt(signum: int, frame: object) -> None:
    raise Interrupted({})


def run_command(args: list[str]) -> dict:
    """Run `bitextmine ARGS` as its own process: wall and CPU seconds and peak RSS (GB), or exit on
    failure. Interrupted, it stops the process and raises Interrupted with the figures so far."""
    started = time.perf_counter()
    process = subprocess.Popen([*BITEXTMINE, "-q", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        output = process.stdout.read().decode(errors="replace")
        _, status, usage = os.wait4(process.pid, 0)
    except (Interrupted, KeyboardInterrupt):
        process.terminate()
        _, status, usage = os.wait4(process.pid, 0)
        raise Interrupted(_figures(started, usage) | {"interrupted": True}) from None
    if status != 0:
        raise SystemExit(f"bitextmine {' '.join(args)} failed:\n{output}")
    return _figures(started, usage)


def _figures(started: float, usage: os.struct_rusage) -> dict:
    return {
        "seconds": round(time.perf_counter() - started, 1),
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1),
        "peak_rss_gb": round(usage.ru_maxrss / 1e6, 2),
    }


def encode() -> None:
    """Both sides at once, each with half the cores, so that each tier is ready on both sides together
    (a run stopped after the first tier leaves the 100k subsample minable)."""
    files = write_tier_files(SCALE, SIZES, WORK / "input")
    threads = str(max(1, (os.cpu_count() or 2) // len(LANGS)))
    processes = {
        lang: subprocess.Popen(
            [
                *BITEXTMINE,
                "-q",
                "encode",
                str(files[lang]),
                "--lang",
                lang,
                "--lid",
                "off",  # every line: a size-N subsample is the first N lines of each side
                "--shard-size",
                "50000",
                "--precision",
                "bf16",
                "--threads",
                threads,
                "--model",
                str(MODEL),
                "--workdir",
                str(ENCODED),
            ]
        )
        for lang in LANGS
    }
    failed = [lang for lang, process in processes.items() if process.wait() != 0]
    if failed:
        raise SystemExit(f"encode {', '.join(failed)} failed (output above); rerun to resume")


def dev_threshold() -> float:
    """calibrate's best-F1 threshold on the shared de-en dev split (stored in WORK/dev)."""
    out = WORK / "dev-calibration.json"
    if not out.exists():
        run_command(
            [
                "calibrate",
                "--bucc",
                str(DEV_SPLIT),
                "--pair",
                "de-en",
                "--split",
                "dev",
                "--model",
                str(MODEL),
                "--workdir",
                str(WORK / "dev"),
                "--json",
                str(out),
            ]
        )
    return float(json.loads(out.read_text())["chosen"]["threshold"])


@dataclass
class Subsample:
    """The first `size` rows of each side in tier order, less one side of some gold pairs at a lower
    `density` (scale_set.density_rows): the tier-order rows it keeps per side and its hidden pairs, as
    rows of what it keeps (the line numbers, less one, of the text imported into its workspace)."""

    size: int
    density: float | None
    rows: dict[str, np.ndarray]
    hidden: Hidden

    @property
    def name(self) -> str:
        return self.name_of(self.size, self.density)

    @staticmethod
    def name_of(size: int, density: float | None) -> str:
        return f"size-{size}" + ("" if density is None else f"-d{density:g}")


def subsample(size: int, density: float | None) -> Subsample:
    ids = {lang: (WORK / "input" / f"{lang}.ids").read_text().split("\n")[:size] for lang in LANGS}
    row_of = {lang: {i: row for row, i in enumerate(ids[lang])} for lang in LANGS}
    gold, sources = gold_with_sources()
    inside = [
        (row_of["de"][a], row_of["en"][b], s)
        for (a, b), s in zip(gold, sources, strict=True)
        if a in row_of["de"] and b in row_of["en"]
    ]
    gold_rows = np.array([(a, b) for a, b, _ in inside], dtype=np.int64).reshape(-1, 2)
    rows = density_rows(size, gold_rows, density)
    kept = [np.full(size, -1, np.int64) for _ in LANGS]
    for position, lang in zip(kept, LANGS, strict=True):
        position[rows[lang]] = np.arange(len(rows[lang]))
    pairs = np.stack([kept[0][gold_rows[:, 0]], kept[1][gold_rows[:, 1]]], axis=1)
    both = (pairs >= 0).all(1)
    hidden = Hidden(pairs[both, 0], pairs[both, 1], np.array([s for (*_, s) in inside])[both])
    return Subsample(size, density, rows, hidden)


def gold_with_sources() -> tuple[list[tuple[str, str]], list[str]]:
    """The gold pairs (de id, en id) and their sources, the latter computed once into WORK/input."""
    gold = [tuple(line.split("\t")) for line in (WORK / "input" / "gold.tsv").read_text().splitlines()]
    cached = WORK / "input" / "gold-sources.txt"
    if not cached.exists():
        de = dict(
            zip(
                (WORK / "input" / "de.ids").read_text().split("\n"),
                (WORK / "input" / "de.txt").read_text(encoding="utf-8").split("\n"),
                strict=True,
            )
        )
        cached.write_text("\n".join(gold_sources(SHARED / "data" / "parallel" / "de-en", de, gold)) + "\n")
    return gold, cached.read_text().split("\n")[: len(gold)]


def size_workspace(sample: Subsample, suffix: str) -> tuple[Path, dict]:
    """WORK/NAME-SUFFIX: the subsample's sentences and vectors of each side imported; the import's figures."""
    from bitextmine.workspace.embeddings import EmbeddingStore

    root = WORK / f"{sample.name}-{suffix}"
    figures = {}
    for lang in LANGS:
        text, npy = root / "input" / f"{lang}.txt", root / "input" / f"{lang}.npy"
        if not npy.exists():
            npy.parent.mkdir(parents=True, exist_ok=True)
            vectors = EmbeddingStore(ENCODED / "emb" / lang, lang).vectors()
            if len(vectors) < sample.size:
                raise SystemExit(
                    f"{lang}: {len(vectors):,} of {sample.size:,} vectors encoded: run `encode` on"
                )
            with open(WORK / "input" / f"{lang}.txt", encoding="utf-8", newline="\n") as fh:
                lines = [next(fh) for _ in range(sample.size)]
            text.write_text("".join(lines[row] for row in sample.rows[lang]), encoding="utf-8")
            np.save(npy, vectors.take(sample.rows[lang]).astype(np.float16))
        figures[lang] = run_command(
            [
                "encode",
                str(text),
                "--lang",
                lang,
                "--lid",
                "off",
                "--embeddings",
                str(npy),
                "--model-name",
                "e5-small-q4",
                "--workdir",
                str(root / "ws"),
            ]
        )
    return root / "ws", figures


def mine_in(workspace: Path, index_args: list[str], resumable: bool) -> dict:
    """Index both languages and mine every one-to-one candidate, from scratch (a rerun of `mine` would
    reuse the neighbour lists), unless `resumable` and WORK/.../RESUME (the index figures and the mine runs
    so far) says a run was stopped: then `mine` goes on from its saved neighbour jobs, and its figures add
    up over the runs."""
    resume = workspace / "RESUME.json"
    figures = json.loads(resume.read_text()) if resumable and resume.exists() else {}
    if not figures:
        for made in ("index", "mined"):
            shutil.rmtree(workspace / made, ignore_errors=True)
        figures = {
            f"index_{lang}": run_command(["index", lang, "--workdir", str(workspace), *index_args])
            for lang in LANGS
        }
        figures["factory"] = json.loads((workspace / "index" / "de.json").read_text())["factory"]
        figures["mine_runs"] = []
    mine = [
        "mine",
        "de",
        "en",
        "--filters",
        "none",
        "--workdir",
        str(workspace),
        "-o",
        str(mined_file(workspace)),
    ]
    try:
        figures["mine_runs"].append(run_command(mine + ["--job-rows", str(EXACT_JOB_ROWS)] * resumable))
    except Interrupted as stopped:
        if resumable:
            resume.write_text(json.dumps(figures | {"mine_runs": figures["mine_runs"] + [stopped.args[0]]}))
        raise SystemExit(f"stopped; {'rerun to resume' if resumable else 'nothing kept'}") from None
    resume.unlink(missing_ok=True)
    runs = figures.pop("mine_runs")
    figures["mine"] = {
        "seconds": round(sum(r["seconds"] for r in runs), 1),
        "cpu_seconds": round(sum(r["cpu_seconds"] for r in runs), 1),
        "peak_rss_gb": max(r["peak_rss_gb"] for r in runs),
        "runs": len(runs),
    }
    return figures


def dev_vectors() -> Path:
    """WORK/dev-vectors: the shared de-en dev split's sentence vectors, encoded once as the scale set's
    are (bf16), in the files `calibrate --embeddings DIR` reads."""
    out = WORK / "dev-vectors"
    if not (out / "de-en.dev.en.npy").exists():
        from bitextmine.calibration.bucc import read_bucc
        from bitextmine.encoder.encoder import SentenceEncoder

        encoder = SentenceEncoder.load(str(MODEL), precision="bf16")
        split = read_bucc(DEV_SPLIT, "de-en", "dev")
        out.mkdir(parents=True, exist_ok=True)
        for side in (split.src, split.tgt):
            np.save(out / f"de-en.dev.{side.lang}.npy", encoder.encode(side.sentences).vectors)
    return out


def kind_split(sample: Subsample) -> tuple[Path, Path] | None:
    """Calibration pairs of the corpus's kind: a BUCC-format split of KIND_PAIRS of the set's hidden pairs
    outside the subsample (a random draw: the set's mix of news and captions) and its vectors, as
    `calibrate --bucc --embeddings` reads them; None where every hidden pair is inside (the whole set)."""
    from bitextmine.workspace.embeddings import EmbeddingStore

    ids = {lang: (WORK / "input" / f"{lang}.ids").read_text().split("\n") for lang in LANGS}
    row_of = {lang: {i: row for row, i in enumerate(ids[lang])} for lang in LANGS}
    outside = [(row_of["de"][a], row_of["en"][b]) for a, b in gold_with_sources()[0]]
    outside = [pair for pair in outside if min(pair) >= sample.size]
    if len(outside) < KIND_PAIRS:
        return None
    chosen = np.array(outside)[np.random.default_rng(0).permutation(len(outside))[:KIND_PAIRS]]
    split, vectors = WORK / f"kind-{sample.size}" / "split", WORK / f"kind-{sample.size}" / "vectors"
    if not (vectors / "de-en.dev.en.npy").exists():
        for directory in (split, vectors):
            directory.mkdir(parents=True, exist_ok=True)
        lines = {
            lang: (WORK / "input" / f"{lang}.txt").read_text(encoding="utf-8").split("\n") for lang in LANGS
        }
        for side, lang in enumerate(LANGS):
            rows = chosen[:, side]
            text = "".join(f"{lang}-{n:09d}\t{lines[lang][row]}\n" for n, row in enumerate(rows, 1))
            (split / f"de-en.dev.{lang}").write_text(text, encoding="utf-8")
            store = EmbeddingStore(ENCODED / "emb" / lang, lang).vectors()
            np.save(vectors / f"de-en.dev.{lang}.npy", store.take(rows).astype(np.float32))
        gold = "".join(f"de-{n:09d}\ten-{n:09d}\n" for n in range(1, len(chosen) + 1))
        (split / "de-en.dev.gold").write_text(gold)
    return split, vectors


def mine_auto(
    workspace: Path, resumable: bool, out: Path, *options: str, calibration: tuple[Path, Path] | None = None
) -> dict:
    """`mine --threshold auto` (with `options`) into `out` after `calibrate` on `calibration` (a BUCC split
    and its vectors; default: the dev split's): the threshold it learns inside the corpus and its
    estimates (its stats). Another run of `mine`, which reuses the neighbour lists (searched in jobs of
    the first run's rows: `resumable` as for `mine_in`)."""
    split, vectors = calibration or (DEV_SPLIT, dev_vectors())
    calibrate = ["calibrate", "--bucc", str(split), "--pair", "de-en", "--workdir", str(workspace)]
    run_command([*calibrate, "--embeddings", str(vectors), "--model-name", "e5-small-q4"])
    mine = ["mine", "de", "en", "--threshold", "auto", "--filters", "none", "--workdir", str(workspace)]
    rows = ["--job-rows", str(EXACT_JOB_ROWS)] * resumable
    figures = run_command([*mine, "-o", str(out), *options, *rows])
    stats = json.loads((workspace / "mined" / "de-en.stats.json").read_text())
    keys = ("estimated_precision", "estimated_recall", "calibration_unlike")
    counts = {key: stats["counts"][key] for key in keys}
    return {**stats["threshold"], **counts, "seconds": figures["seconds"]}


def mined_file(workspace: Path) -> Path:
    return workspace / "mined" / "de-en.tsv"


def precision_candidates(path: Path) -> Mined:
    """Every candidate of `mine --min-precision 0 --format jsonl`, scored by its regional precision."""
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    src, tgt = (np.array([r[f"{side}_line"] - 1 for r in records], np.int64) for side in ("src", "tgt"))
    return Mined(src, tgt, np.array([r["precision"] for r in records]))


def mined_candidates(path: Path) -> Mined:
    """Every candidate `mine` wrote: rows (line numbers less one, from the ids PATH:LINE) and score."""
    src, tgt, score = [], [], []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            fields = line.rstrip("\n").split("\t")
            score.append(float(fields[0]))
            src.append(int(fields[3].rsplit(":", 1)[1]) - 1)
            tgt.append(int(fields[4].rsplit(":", 1)[1]) - 1)
    return Mined(np.array(src, np.int64), np.array(tgt, np.int64), np.array(score))


def pairs_at(mined: Mined, threshold: float) -> set[tuple[int, int]]:
    kept = mined.score >= threshold
    return set(zip(mined.src[kept].tolist(), mined.tgt[kept].tolist(), strict=True))


def run(sizes: list[int], densities: list[float | None], names: list[str], exact: bool = True) -> None:
    """Mine each subsample (size, density) with exact search and the settings named in `names` (all if
    empty): one row per subsample and setting, replacing that row. Without `exact`, no exact mining
    (hours at 1M on 2 cores) and no share of its pairs, unless its pairs are recorded."""
    signal.signal(signal.SIGTERM, _interrupt)
    threshold = dev_threshold()
    rows = load_rows(RESULT)
    for size in sizes:
        for density in densities:
            sample = subsample(size, density)
            exact_pairs: set[tuple[int, int]] = set()
            for label, suffix, args in SETTINGS:
                if names and suffix not in names and label != EXACT_SETTING[0]:
                    continue
                if label == EXACT_SETTING[0] and EXACT_SETTING[1] not in names:
                    recorded = recorded_exact_pairs(sample, rows, threshold)
                    if recorded is not None or not exact:
                        exact_pairs = recorded or set()
                        continue
                workspace, imported = size_workspace(sample, suffix)
                figures = mine_in(workspace, args, resumable=label == EXACT_SETTING[0])
                mined = mined_candidates(mined_file(workspace))
                pairs = pairs_at(mined, threshold)
                exact_pairs = pairs if label == EXACT_SETTING[0] else exact_pairs
                row = {"size": size, "density": density, "setting": label, "threshold": threshold}
                row["load_average"] = round(os.getloadavg()[0], 1)  # other work on the machine slows stages
                row |= {"import": imported, **figures, "quality": quality(mined, sample.hidden, threshold)}
                row |= {key: row["quality"]["all"][key] for key in ("gold", "precision", "recall", "f1")}
                row["auto"] = auto_figures(workspace, mined, sample, label == EXACT_SETTING[0])
                row["mined"] = len(pairs)
                row["share_of_exact_pairs"] = (
                    round(len(pairs & exact_pairs) / len(exact_pairs), 4) if exact_pairs else None
                )
                key = (size, density, label)
                rows = [r for r in rows if _row_key(r) != key] + [stamped(row)]
                save_results(RESULT, rows, report(rows))


def auto_figures(workspace: Path, mined: Mined, sample: Subsample, resumable: bool) -> dict:
    """`mine_auto`'s figures, with the quality of the pairs it kept and their own stamp; the oracles of the
    margin (over `mined`, the row's candidates) and of the regional precision (every candidate's, from
    `mine --min-precision 0`)."""
    auto = mine_auto(workspace, resumable, workspace.parent / "at-auto.tsv")
    at_auto = kept_quality(workspace.parent / "at-auto.tsv", sample)
    margin = quality(mined, sample.hidden, np.inf)
    every = workspace.parent / "at-precision.jsonl"
    mine_auto(workspace, resumable, every, "--min-precision", "0")
    kind = kind_figures(workspace, sample, resumable)
    regional = quality(precision_candidates(every), sample.hidden, auto["value"])
    if prf_of(regional["all"]) != prf_of(at_auto["all"]):
        raise SystemExit(f"{every}: the precisions at {auto['value']} keep other pairs than `mine` kept")
    oracles = {
        s: {"regional_oracle_f1": q["oracle_f1"], "regional_oracle": q["oracle_threshold"]}
        for s, q in regional.items()
    }
    quality_by_subset = {s: margin[s] | prf_of(at_auto[s]) | oracles[s] for s in SUBSETS}
    return stamped(auto | {"quality": quality_by_subset} | ({} if kind is None else {"kind": kind}))


def kind_figures(workspace: Path, sample: Subsample, resumable: bool) -> dict | None:
    """`mine_auto` calibrated on pairs of the corpus's kind (`kind_split`), and the true P / R / F1 of the
    pairs it kept; None where the subsample holds every hidden pair. Calibrates the workspace again on
    the dev split after it (the workspace's calibration stays the dev split's)."""
    calibration = kind_split(sample)
    if calibration is None:
        return None
    out = workspace.parent / "at-kind.tsv"
    try:
        kind = mine_auto(workspace, resumable, out, calibration=calibration)
    finally:
        dev = ["calibrate", "--bucc", str(DEV_SPLIT), "--pair", "de-en", "--workdir", str(workspace)]
        run_command([*dev, "--embeddings", str(dev_vectors()), "--model-name", "e5-small-q4"])
    return kind | prf_of(kept_quality(out, sample)["all"])


def kept_quality(path: Path, sample: Subsample) -> dict[str, dict]:
    """`quality` (per subset) of the pairs a `mine` run wrote to `path`, every one of them kept."""
    kept = mined_candidates(path)
    return quality(Mined(kept.src, kept.tgt, np.ones(len(kept.src))), sample.hidden, 0.5)


def prf_of(row: dict) -> dict:
    return {key: row[key] for key in ("precision", "recall", "f1")}


def add_auto(rows: list[dict]) -> list[dict]:
    """The recorded rows whose workspaces are still there, with `mine --threshold auto` run again over
    their saved neighbour lists (no search), for a change of the threshold rule alone."""
    updated = []
    for row in rows:
        workspace = WORK / f"{Subsample.name_of(row['size'], row.get('density'))}-{_suffix(row)}" / "ws"
        if mined_file(workspace).exists():
            sample = subsample(row["size"], row.get("density"))
            mined = mined_candidates(mined_file(workspace))
            resumable = row["setting"] == EXACT_SETTING[0]
            row = row | {"auto": auto_figures(workspace, mined, sample, resumable)}
        updated.append(row)
    return updated


def _suffix(row: dict) -> str:
    return next(suffix for label, suffix, _ in SETTINGS if label == row["setting"])


def _row_key(row: dict) -> tuple:
    return row["size"], row.get("density"), row.get("setting")


def recorded_exact_pairs(
    sample: Subsample, rows: list[dict], threshold: float
) -> set[tuple[int, int]] | None:
    """Exact mining's pairs of the subsample from its recorded run (its row and its output still there),
    so that another setting is compared with them without mining exactly again (hours at 1M; pass
    `--settings exact` to redo it); None if there are none."""
    out = mined_file(WORK / f"{sample.name}-{EXACT_SETTING[1]}" / "ws")
    recorded = any(_row_key(r) == (sample.size, sample.density, EXACT_SETTING[0]) for r in rows)
    return pairs_at(mined_candidates(out), threshold) if recorded and out.exists() else None


def report(rows: list[dict]) -> str:
    lines = [
        "# Mining real text at scale (de-en, shared/data/scale)",
        "",
        "Produced by `make bench-scale-real` (examples/benchmarks/bench_scale.py). Each stage is one "
        "`bitextmine` process; time in seconds (index: both languages), peak RSS in GB over the index and "
        "mine processes. P/R/F1 against the subsample's hidden pairs with calibrate's dev-split threshold; "
        "the last figure is the share of exact mining's pairs (at or above the threshold) each index keeps "
        "(blank: the run mined no exact pairs to compare with, `--without-exact`). "
        f"The exact rows mine in neighbour jobs of {EXACT_JOB_ROWS:,} queries, so that a stopped run resumes "
        "(the default, where it picks exact search, mines in one job, faster); exact mining of the full set "
        "ran in parts: its time is the sum over the runs, which redoes at most one unfinished job per stop, "
        "with its CPU seconds beside it. "
        "Density: the subsample's gold pairs per sentence where lowered (one side of the other gold pairs "
        "dropped: scale_set.py); blank: the set's own (4.8%). What `mine` estimates without the hidden "
        "pairs is in the next section, where it learns the threshold inside the corpus.",
        "",
    ]
    ordered = sorted(rows, key=_report_order)
    body = []
    for r in ordered:
        stages = [r["index_de"], r["index_en"], r["mine"]]
        body.append(
            f"{r['size']:,} | {_density(r)} | {r['setting']} | {r['factory']} | "
            f"{r['index_de']['seconds'] + r['index_en']['seconds']:.0f} | {_mine_seconds(r['mine'])} | "
            f"{max(s['peak_rss_gb'] for s in stages):.2f} | {r['precision']} | {r['recall']} | {r['f1']} | "
            f"{_share(r)} | {r['date']}, {r['machine']}, {r['commit']}{_load(r)}"
        )
    lines += table(
        "sentences a side | density | setting | index | index s | mine s | peak RSS GB | P | R | F1 "
        "| exact's pairs kept | run",
        "rrllrrrrrrrl",
        body,
    )
    lines += _auto_section(ordered)
    lines += [
        "",
        "## Per source of the hidden pairs",
        "",
        "Every one-to-one candidate mined, scored per source (scale_quality.py): P/R/F1 at the dev "
        "threshold; the best F1 any threshold reaches (oracle) and that threshold; the ceiling, the share "
        "of the source's hidden pairs among the candidates at any score. A source's precision counts the "
        "candidates that touch one of its sentences; `all` counts every candidate.",
        "",
    ]
    body = [
        f"{r['size']:,} | {_density(r)} | {r['setting']} | {subset} | {q['gold']:,} | "
        f"{q['precision']} / {q['recall']} / {q['f1']} | {q['oracle_f1']} at {q['oracle_threshold']:.4f} | "
        f"{q['ceiling']}"
        for r in ordered
        if "quality" in r
        for subset, q in ((subset, r["quality"][subset]) for subset in SUBSETS)
    ]
    lines += table(
        "sentences a side | density | setting | source | hidden pairs | P / R / F1 at the dev threshold "
        "| oracle F1 at threshold | ceiling",
        "rrllrrrr",
        body,
    )
    return "\n".join(lines) + "\n"


def _auto_section(rows: list[dict]) -> list[str]:
    """The rows' `mine --threshold auto` runs: the threshold learned inside the corpus, its true and its
    estimated P/R/F1, per source."""
    lines = [
        "",
        "## The threshold learned inside the corpus (`mine --threshold auto`)",
        "",
        "After `calibrate` on the dev split's vectors, `mine --threshold auto` plants the split's gold "
        "pairs in the corpus and keeps the pairs whose regional precision (mining/regional_precision.py, "
        "in [0, 1]) reaches half the best F1 those pairs estimate, and 0.25 (docs/design.md, thresholds at "
        "scale). "
        "True P / R / F1 of the pairs kept against the hidden pairs, per source; what `mine` estimated "
        "without them (the recall: the share of the planted pairs it finds); how unlike the planted pairs' "
        "regions are to those of the corpus's translations (`calibration_unlike`: the share that would have "
        "to move, less a random draw's; `mine` notes it from 0.25); the best F1 any single "
        "threshold on the regional precision reaches, and where (`mine --min-precision 0` writes every "
        "candidate's precision); the best F1 of any margin threshold.",
        "",
    ]
    body = [
        f"{r['size']:,} | {_density(r)} | {r['setting']} | {subset} | {a['value']:.4f} | "
        f"{q['precision']} / {q['recall']} / {q['f1']} | "
        + (
            f"{a['estimated_precision']} / {a['estimated_recall']} | {_unlike(a)}"
            if subset == "all"
            else " | "
        )
        + f" | {_regional_oracle(q)} | {q['oracle_f1']} | {a['date']}, {a['machine']}, {a['commit']}"
        for r in rows
        if "auto" in r
        for subset, q in ((subset, r["auto"]["quality"][subset]) for subset in SUBSETS)
        for a in (r["auto"],)
    ]
    return (
        lines
        + table(
            "sentences a side | density | setting | source | threshold | P / R / F1 | estimated P / R "
            "| unlike | best F1 on the precision, at | margin's best F1 | run",
            "rrllrrrrrrl",
            body,
        )
        + _kind_section(rows)
    )


def _kind_section(rows: list[dict]) -> list[str]:
    """The rows' `mine --threshold auto` calibrated on pairs of the corpus's kind."""
    lines = [
        "",
        "### Calibrated on pairs of the corpus's kind",
        "",
        f"The same, after `calibrate` on {KIND_PAIRS} of the set's hidden pairs that lie outside the "
        "subsample (drawn at random: the set's mix of news and captions; `kind_split`), as a user "
        "calibrates on own pairs like the corpus's: the planted pairs then stand for the corpus's "
        "translations, and the estimated recall for its recall. None at 1,050,592 (every hidden pair is "
        "in the corpus).",
        "",
    ]
    body = [
        f"{r['size']:,} | {_density(r)} | {r['setting']} | {k['value']:.4f} | "
        f"{k['precision']} / {k['recall']} / {k['f1']} | {k['estimated_precision']} / "
        f"{k['estimated_recall']} | {k['estimated_recall'] - k['recall']:+.1f} | {_unlike(k)} | {a['date']}, "
        f"{a['machine']}, {a['commit']}"
        for r in rows
        if "kind" in r.get("auto", {})
        for a, k in ((r["auto"], r["auto"]["kind"]),)
    ]
    return lines + table(
        "sentences a side | density | setting | threshold | P / R / F1 | estimated P / R | estimated R less "
        "true R | unlike | run",
        "rrlrrrrrl",
        body,
    )


def _unlike(auto: dict) -> str:
    """How unlike the planted pairs were to the corpus's translations (blank: recorded before it was)."""
    return "" if auto.get("calibration_unlike") is None else f"{auto['calibration_unlike']:.2f}"


def _regional_oracle(quality: dict) -> str:
    """The best F1 on the regional precision and its threshold (blank: recorded before it was measured)."""
    if "regional_oracle_f1" not in quality:
        return ""
    return f"{quality['regional_oracle_f1']} at {quality['regional_oracle']:.4f}"


def _report_order(row: dict) -> tuple:
    order = [label for label, _, _ in SETTINGS]
    density = row.get("density")
    return row["size"], density is not None, -(density or 0), order.index(row["setting"])


def _load(row: dict) -> str:
    """The machine's load average as the row was recorded, where it was (2 cores: above 2, stages waited)."""
    return "" if row.get("load_average") is None else f", load {row['load_average']}"


def _share(row: dict) -> str:
    """The share of exact mining's pairs kept; blank where the subsample was not mined exactly."""
    return "" if row.get("share_of_exact_pairs") is None else f"{row['share_of_exact_pairs']:.2%}"


def _density(row: dict) -> str:
    return "" if row.get("density") is None else f"{row['density']:.1%}"


def _mine_seconds(mine: dict) -> str:
    """Wall seconds; for a run in parts also its CPU seconds, which other work on the machine between
    and during the parts does not inflate (on 2 busy cores, wall is about CPU / 2)."""
    runs = mine.get("runs", 1)
    parts = f" ({runs} runs, {mine['cpu_seconds']:,.0f} CPU s)" if runs > 1 else ""
    return f"{mine['seconds']:.0f}{parts}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("encode")
    runner = sub.add_parser("run")
    runner.add_argument("--sizes", default=",".join(map(str, SIZES)))
    runner.add_argument(
        "--densities",
        default="set",
        help="gold densities, comma-separated: 'set' (the set's own) or a share such as 0.01 (one side of "
        "the other gold pairs dropped)",
    )
    runner.add_argument(
        "--settings",
        default="",
        help="default, ivf, ivf8, ivf32 (comma-separated; exact runs first unless its pairs are recorded, "
        "or when named)",
    )
    runner.add_argument(
        "--without-exact",
        action="store_true",
        help="no exact mining where its pairs are not recorded (the share of them kept left blank)",
    )
    sub.add_parser("auto", help="rerun `mine --threshold auto` in the recorded rows' workspaces")
    sub.add_parser("report")
    args = parser.parse_args()
    if args.command == "encode":
        encode()
    elif args.command == "run":
        densities = [None if d == "set" else float(d) for d in args.densities.split(",")]
        names = [s for s in args.settings.split(",") if s]
        run([int(s) for s in args.sizes.split(",")], densities, names, exact=not args.without_exact)
    else:
        rows = load_rows(RESULT)
        rows = add_auto(rows) if args.command == "auto" else rows
        save_results(RESULT, rows, report(rows))


if __name__ == "__main__":
    main()
