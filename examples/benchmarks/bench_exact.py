"""Mining one pair of vector sets, whole process against whole process: bitextmine's matrix-product
search (search/gemm.py) against the logic of LASER's `source/mine_bitexts.py --mode mine` (FAISS
`IndexFlatIP` k-NN both ways in float32, ratio margin, k = 4, the `max` retrieval with its one-to-one pass).

    python bench_exact.py vectors --size 100000 --out DIR   # DIR/{src,tgt}.npy: the scale set's first rows
    python bench_exact.py vectors --synthetic --size N --out DIR  # unstructured: random, 10% translations
    python bench_exact.py laser DIR OUT.tsv                 # one process: load, search, score, select, write
    python bench_exact.py bitextmine DIR OUT.tsv            # the same through bitextmine.mine_arrays
    python bench_exact.py workspace DIR OUT.tsv             # `index de`, `index en`, `mine` with defaults
    python bench_exact.py compare A.tsv B.tsv [--threshold T]  # identical pairs (at or above T)?
    python bench_exact.py time DIR --runs 2 --threshold T [--miners bitextmine,workspace]
                                                            # each miner and LASER's in turn; results/
    python bench_exact.py report                            # results/bench_exact.md from its JSON rows

Each run writes `score<TAB>src row<TAB>tgt row` for every one-to-one pair, best first. The mining
commands are timed as whole processes, alternating. The `workspace` miner mines DIR/work, into which
`time` imports the vectors first, untimed (`encode --embeddings`, one text line a row: its number), as
the other miners' vectors lie ready in DIR; it times the default pipeline, the index chosen by `index`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def laser_mine(x: np.ndarray, y: np.ndarray, k: int = 4) -> list[tuple[float, int, int]]:
    """mine_bitexts.py's mine mode, retrieval `max`, margin `ratio`, no threshold, as LASER writes it:
    FAISS flat search each way, the candidates scored one by one in Python, one-to-one by score."""
    import faiss

    def knn(queries: np.ndarray, base: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        index = faiss.IndexFlatIP(base.shape[1])
        index.add(base)
        return index.search(queries, min(k, len(base)))

    faiss.normalize_L2(x)
    faiss.normalize_L2(y)
    x2y_sim, x2y_ind = knn(x, y)
    y2x_sim, y2x_ind = knn(y, x)
    x2y_mean, y2x_mean = x2y_sim.mean(axis=1), y2x_sim.mean(axis=1)

    def scores(a, b, candidates, fwd_mean, bwd_mean):
        out = np.zeros(candidates.shape)
        for i in range(out.shape[0]):
            for j in range(out.shape[1]):
                c = candidates[i, j]
                out[i, j] = a[i].dot(b[c]) / ((fwd_mean[i] + bwd_mean[c]) / 2)
        return out

    fwd_scores = scores(x, y, x2y_ind, x2y_mean, y2x_mean)
    bwd_scores = scores(y, x, y2x_ind, y2x_mean, x2y_mean)
    fwd_best = x2y_ind[np.arange(len(x)), fwd_scores.argmax(axis=1)]
    bwd_best = y2x_ind[np.arange(len(y)), bwd_scores.argmax(axis=1)]
    pairs = np.stack(
        (np.concatenate((np.arange(len(x)), bwd_best)), np.concatenate((fwd_best, np.arange(len(y))))), axis=1
    )
    best = np.concatenate((fwd_scores.max(axis=1), bwd_scores.max(axis=1)))
    seen_src, seen_tgt, kept = set(), set(), []
    for i in np.argsort(-best):
        src, tgt = pairs[i]
        if src not in seen_src and tgt not in seen_tgt:
            seen_src.add(src)
            seen_tgt.add(tgt)
            kept.append((float(best[i]), int(src), int(tgt)))
    return kept


def bitextmine_mine(x: np.ndarray, y: np.ndarray) -> list[tuple[float, int, int]]:
    import bitextmine

    mined = bitextmine.mine_arrays(x, y)
    return list(zip(mined.score.tolist(), mined.src.tolist(), mined.tgt.tolist(), strict=True))


def workspace_mine(vectors: Path) -> list[tuple[float, int, int]]:
    """`index de`, `index en` and `mine de en` with their defaults (no threshold, no filters: every
    one-to-one pair) over DIR/work, as separate processes, from no index."""
    work = vectors / "work"
    for stale in ("index", "mined"):
        shutil.rmtree(work / stale, ignore_errors=True)
    mine = ["mine", "de", "en", "--filters", "none", "--format", "tsv", "--output", str(work / "pairs.tsv")]
    for command in (["index", "de"], ["index", "en"], mine):
        _bitextmine(*command, "-w", str(work))
    with open(work / "pairs.tsv") as fh:
        rows = [line.split("\t")[:3] for line in fh]
    return [(float(score), int(src), int(tgt)) for score, src, tgt in rows]


def import_workspace(vectors: Path) -> None:
    """DIR/work: DIR's vectors imported as de (src) and en (tgt), a text line a row holding its number."""
    work = vectors / "work"
    for side, lang in (("src", "de"), ("tgt", "en")):
        rows = len(np.load(vectors / f"{side}.npy", mmap_mode="r"))
        text = vectors / f"{lang}.txt"
        text.write_text("".join(f"{i}\n" for i in range(rows)))
        imported = ["--embeddings", str(vectors / f"{side}.npy"), "--model-name", "bench"]
        _bitextmine("encode", str(text), "-l", lang, "--lid", "off", "-w", str(work), *imported)


def _bitextmine(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "bitextmine", "-q", *args], check=True)


def write_pairs(pairs: list[tuple[float, int, int]], path: Path) -> None:
    with open(path, "w") as fh:
        fh.writelines(f"{score!r}\t{src}\t{tgt}\n" for score, src, tgt in pairs)


def read_pairs(path: Path) -> dict[tuple[int, int], float]:
    with open(path) as fh:
        rows = [line.rstrip("\n").split("\t") for line in fh]
    return {(int(src), int(tgt)): float(score) for score, src, tgt in rows}


def agreement(a: Path, b: Path, threshold: float = -np.inf) -> dict:
    """How two pair files agree on the pairs scoring at least `threshold`."""
    first, second = ({p: s for p, s in read_pairs(f).items() if s >= threshold} for f in (a, b))
    worst = max((abs(first[p] - second[p]) for p in set(first) & set(second)), default=0.0)
    return {
        "pairs": [len(first), len(second)],
        "in_one_only": len(set(first) ^ set(second)),
        "share_of_first": round(len(set(first) & set(second)) / max(len(first), 1), 6),
        "score_diff": worst,
    }


def compare(a: Path, b: Path, threshold: float) -> int:
    found = agreement(a, b, threshold)
    print(
        f"{found['pairs'][0]:,} and {found['pairs'][1]:,} pairs, {found['in_one_only']:,} in one only, "
        f"scores within {found['score_diff']:.2e}"
    )
    return 0 if not found["in_one_only"] and found["score_diff"] <= 1e-6 else 1


MINERS = {"bitextmine": "mine_arrays", "workspace": "index + mine, defaults"}


def time_both(vectors: Path, runs: int, threshold: float, miners: list[str]) -> None:
    """LASER's logic and each of `miners` as its own process, in turn, `runs` times: wall and CPU seconds,
    peak RSS; then how their pairs agree, in all and at or above `threshold` (calibrate's, for the model
    that made them), and the share of LASER's pairs each miner finds."""
    from benchlib import RESULTS, load_rows, save_results, stamped

    if "workspace" in miners and not (vectors / "work").is_dir():
        import_workspace(vectors)
    figures: dict[str, list[dict]] = {name: [] for name in ["laser", *miners]}
    for _ in range(runs):
        for name, rows in figures.items():
            rows.append(_timed([sys.executable, __file__, name, str(vectors), str(vectors / f"{name}.tsv")]))
    median = {
        name: {key: float(np.median([r[key] for r in rows])) for key in rows[0]}
        for name, rows in figures.items()
    }
    kind = (vectors / "kind").read_text().strip() if (vectors / "kind").is_file() else "scale set"
    size = len(np.load(vectors / "src.npy", mmap_mode="r"))
    path = RESULTS / "bench_exact.json"
    rows = load_rows(path)
    for miner in miners:
        pairs = (vectors / "laser.tsv", vectors / f"{miner}.tsv")
        row = {
            "vectors": kind,
            "size": size,
            "miner": MINERS[miner],
            "runs": runs,
            "median": {"laser": median["laser"], "bitextmine": median[miner]},
            "speedup_wall": round(median["laser"]["wall_s"] / median[miner]["wall_s"], 3),
            "all_pairs": agreement(*pairs),
            "threshold": threshold,
            "pairs_above_threshold": agreement(*pairs, threshold),
        }
        if miner == "workspace":
            row["indexes"] = chosen_indexes(vectors / "work")
        rows = [r for r in rows if _key(r) != _key(row)] + [stamped(row)]
    save_results(path, rows, _report(rows))


def chosen_indexes(work: Path) -> dict[str, dict]:
    """What `index` chose for each language of the last `workspace` run, and the recall it measured."""
    chosen = {}
    for lang in ("de", "en"):
        info = json.loads((work / "index" / f"{lang}.json").read_text())
        chosen[lang] = {key: info[key] for key in ("factory", "nprobe", "recall", "recall_source")}
    return chosen


def _index_cell(row: dict) -> str:
    """`index`'s choice per language: its factory, the lists probed and recall@4 where it is IVF."""
    cells = []
    for lang, info in row.get("indexes", {}).items():
        probed = f", {info['nprobe']} probes, recall@4 {info['recall']:.3f}" if info["nprobe"] else ""
        cells.append(f"{lang}: {info['factory']}{probed}")
    return "; ".join(cells)


def report() -> None:
    """bench_exact.md anew from the recorded rows."""
    from benchlib import RESULTS, load_rows, save_results

    path = RESULTS / "bench_exact.json"
    rows = load_rows(path)
    save_results(path, rows, _report(rows))


def _key(row: dict) -> tuple:
    return row.get("vectors", "scale set"), row["size"], row.get("miner", MINERS["bitextmine"])


def _timed(command: list[str]) -> dict:
    started = time.perf_counter()
    process = subprocess.Popen(command)
    _, status, usage = os.wait4(process.pid, 0)
    if status:
        raise SystemExit(f"{' '.join(command)} failed")
    return {
        "wall_s": round(time.perf_counter() - started, 2),
        "user_s": usage.ru_utime,
        "sys_s": usage.ru_stime,
        "peak_rss_mb": round(usage.ru_maxrss / 1024),
    }


def _report(rows: list[dict]) -> str:
    lines = [
        "# Mining: bitextmine against LASER's mine_bitexts.py logic",
        "",
        "Produced by `bench_exact.py time` (`make bench-exact`): the same vectors (the first N of each "
        "side of the real scale set, or unstructured synthetic ones: random, a tenth of the targets noisy "
        "copies of sources), each miner a whole process (`index + mine`: `index de`, `index en` and `mine` "
        "over a workspace the vectors were imported into beforehand), k = 4, ratio margin, max retrieval. "
        "Index chosen: what `index` chose for each language (for IVF, the lists it probes and the recall@4 "
        "it measured). Largest score difference: over the pairs at or above the threshold that both find; "
        "a workspace keeps its vectors in float16, which moves the scores that much and swaps pairs of "
        "near-equal scores. LASER's pairs kept: the share of its pairs at or above the threshold that the "
        "miner finds.",
        "",
        "| vectors | a side | miner | index chosen | LASER logic, wall s | bitextmine, wall s | speedup "
        "| peak RSS MB (LASER / bitextmine) | pairs in one only: all / at or above the threshold "
        "| largest score difference | LASER's pairs kept | run |",
        "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in sorted(rows, key=_key):
        m, every, kept = r["median"], r["all_pairs"], r["pairs_above_threshold"]
        share = kept.get("share_of_first")
        lines.append(
            f"| {r.get('vectors', 'scale set')} | {r['size']:,} | {r.get('miner', MINERS['bitextmine'])} "
            f"| {_index_cell(r)} | {m['laser']['wall_s']:.1f} | {m['bitextmine']['wall_s']:.1f} "
            f"| {r['speedup_wall']:.2f}x "
            f"| {m['laser']['peak_rss_mb']:.0f} / {m['bitextmine']['peak_rss_mb']:.0f} "
            f"| {every['in_one_only']} of {every['pairs'][0]:,} "
            f"/ {kept['in_one_only']} of {kept['pairs'][0]:,} (>= {r['threshold']:.4f}) "
            f"| {kept['score_diff']:.1e} | {'' if share is None else f'{share:.2%}'} "
            f"| {r['date']}, {r['machine']}, {r['commit']} |"
        )
    return "\n".join(lines) + "\n"


def save_vectors(size: int, out: Path) -> None:
    """The first `size` vectors of each side of the scale workspace (`bench_scale.py`'s encoding)."""
    from bench_scale import ENCODED
    from benchlib import workspace_vectors

    out.mkdir(parents=True, exist_ok=True)
    for side, lang in (("src", "de"), ("tgt", "en")):
        rows = workspace_vectors(ENCODED, lang, size)
        rows /= np.linalg.norm(
            rows, axis=1, keepdims=True
        )  # unit in float32: LASER's normalize_L2 keeps them
        np.save(out / f"{side}.npy", rows)


def save_synthetic(size: int, out: Path, dim: int = 384, seed: int = 0) -> None:
    """Unstructured unit vectors: random directions, the first tenth of the targets noisy copies of the
    sources they translate (cosine about 0.8), so that mining has pairs to find among no clusters."""
    rng = np.random.default_rng(seed)
    src, tgt = (rng.standard_normal((size, dim), dtype=np.float32) for _ in range(2))
    planted = size // 10
    tgt[:planted] = src[:planted] / np.sqrt(dim) + 0.75 * tgt[:planted] / np.sqrt(dim)
    out.mkdir(parents=True, exist_ok=True)
    for side, rows in (("src", src), ("tgt", tgt)):
        np.save(out / f"{side}.npy", rows / np.linalg.norm(rows, axis=1, keepdims=True))
    (out / "kind").write_text("synthetic\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    vectors = sub.add_parser("vectors")
    vectors.add_argument("--size", type=int, default=100_000)
    vectors.add_argument("--out", type=Path, required=True)
    vectors.add_argument("--synthetic", action="store_true", help="unstructured random vectors")
    for name in ("laser", "bitextmine", "workspace"):
        miner = sub.add_parser(name)
        miner.add_argument("vectors", type=Path)
        miner.add_argument("out", type=Path)
    comparison = sub.add_parser("compare")
    comparison.add_argument("a", type=Path)
    comparison.add_argument("b", type=Path)
    comparison.add_argument("--threshold", type=float, default=-np.inf)
    timing = sub.add_parser("time")
    timing.add_argument("vectors", type=Path)
    timing.add_argument("--runs", type=int, default=2)
    timing.add_argument("--threshold", type=float, default=-np.inf)
    timing.add_argument("--miners", default="bitextmine", help="comma-separated: bitextmine, workspace")
    sub.add_parser("report")
    args = parser.parse_args()
    if args.command == "vectors":
        (save_synthetic if args.synthetic else save_vectors)(args.size, args.out)
    elif args.command == "compare":
        sys.exit(compare(args.a, args.b, args.threshold))
    elif args.command == "time":
        time_both(args.vectors, args.runs, args.threshold, args.miners.split(","))
    elif args.command == "report":
        report()
    elif args.command == "workspace":
        write_pairs(workspace_mine(args.vectors), args.out)
    else:
        x, y = (np.load(args.vectors / f"{side}.npy") for side in ("src", "tgt"))
        mine = laser_mine if args.command == "laser" else bitextmine_mine
        write_pairs(mine(x, y), args.out)


if __name__ == "__main__":
    main()
