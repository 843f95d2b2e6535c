"""Recall against the vectors a query scans: more or fewer probes, or a cap on the scan (`--max-codes`).

k-means leaves IVF lists of unequal length, and queries of the other language fall more often into the
long ones, so at a fixed nprobe the vectors a query scans grow with N (bench_scale, bench_ivf_balance).
`mine --max-codes C` caps them at C a query. This benchmark asks what the cap costs: in bench_scale's
kept workspaces (`--keep`), en queries search the de index as `mine`'s forward direction does, with
bitextmine's search (probe search and list scan), and their top 4 is compared with exact search. For
each N: without a cap at several nprobe, and at a larger nprobe with caps of multiples of the nominal
scan (nprobe 8 x N / nlist, what equal lists would give). Each capped row also shows the recall the
uncapped rows reach at the same mean scan (linear interpolation between their nprobe), so a cap that
only moves along the nprobe curve shows a difference near 0. A few settings are also timed on one query
block of `mine`'s size (best of --repeats, the settings taking turns), µs a query: wall time, and the
process's CPU time over its threads, which time stolen by the hypervisor does not inflate.

    python examples/benchmarks/bench_scan_budget.py [--work DIR ...]   # or: make bench-scan-budget
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from benchlib import REPO, add_kept_workspaces, kept_workspaces, produced_by, save_results

sys.path.insert(0, str(REPO))

RESULTS = Path(__file__).parent / "results"
K = 4
NOMINAL_NPROBE = 8
TIMED = ((8, 0.0), (8, 1.25), (16, 1.25))  # (nprobe, cap as a multiple of the nominal scan; 0: none)


def exact_kth(base, queries: np.ndarray) -> np.ndarray:
    """The K-th best inner product of each query over all rows of `base` (ShardedVectors)."""
    import faiss

    heap = faiss.ResultHeap(len(queries), K, keep_max=True)
    for start, block in base.blocks(200_000):
        sims, ids = faiss.knn(queries, np.asarray(block, np.float32), K, metric=faiss.METRIC_INNER_PRODUCT)
        heap.add_result(sims, ids + start)
    heap.finalize()
    return heap.D[:, -1]


def measure(work: Path, args: argparse.Namespace) -> list[dict]:
    import faiss

    from bitextmine.index_search import list_sizes, query_block_rows, scanned_rows, search
    from bitextmine.store import EmbeddingStore

    index = faiss.read_index(str(work / "index" / "de.faiss"))
    ivf = faiss.extract_index_ivf(index)
    base = EmbeddingStore(work / "emb" / "de", "de").vectors()
    en = EmbeddingStore(work / "emb" / "en", "en").vectors()
    rows = np.sort(np.random.default_rng(1).choice(len(en), args.queries, replace=False))
    queries = np.ascontiguousarray(en.take(rows), dtype=np.float32)
    kth = exact_kth(base, queries)
    sizes = list_sizes(ivf)
    nominal = NOMINAL_NPROBE * ivf.ntotal / ivf.nlist
    settings = [(nprobe, 0) for nprobe in args.nprobes]
    settings += [(args.cap_nprobe, round(factor * nominal)) for factor in args.caps]
    timed = [(nprobe, round(factor * nominal)) for nprobe, factor in TIMED]
    settings += [s for s in timed if s not in settings]
    block = en.take(np.arange(min(len(en), query_block_rows(ivf.nlist, NOMINAL_NPROBE))))
    seconds = time_settings(index, np.ascontiguousarray(block, dtype=np.float32), timed, args.repeats)
    results = []
    for nprobe, max_codes in settings:
        ivf.nprobe, ivf.max_codes = nprobe, max_codes
        sims, _ = search(index, queries, K)
        _, probes = ivf.quantizer.search(queries, nprobe)
        row = {
            "n": ivf.ntotal,
            "nlist": ivf.nlist,
            "nprobe": nprobe,
            "max_codes": max_codes,
            "scanned": round(float(scanned_rows(sizes, probes, max_codes).sum(axis=1).mean()), 1),
            "nominal": round(nominal, 1),
            "recall_at_4": round(float((sims >= kth[:, None] - 1e-6).mean()), 4),
        }
        if (nprobe, max_codes) in seconds:
            wall, cpu = seconds[nprobe, max_codes]
            row["search_us"], row["search_cpu_us"] = (round(t / len(block) * 1e6, 1) for t in (wall, cpu))
        print(row, flush=True)
        results.append(row)
    return results


def time_settings(index, block: np.ndarray, settings: list[tuple[int, int]], repeats: int) -> dict:
    """Best (wall, CPU) seconds of bitextmine's search of `block` at each (nprobe, max_codes), taking
    turns."""
    import faiss

    from bitextmine.index_search import search

    ivf = faiss.extract_index_ivf(index)
    search(index, block[:1000], K)  # warm-up: pages of the index
    best: dict[tuple[int, int], tuple[float, float]] = {}
    for _ in range(repeats):
        for nprobe, max_codes in settings:
            ivf.nprobe, ivf.max_codes = nprobe, max_codes
            wall, cpu = time.perf_counter(), time.process_time()
            search(index, block, K)
            elapsed = (time.perf_counter() - wall, time.process_time() - cpu)
            best[nprobe, max_codes] = min(elapsed, best.get((nprobe, max_codes), elapsed))
    return best


def recall_at_same_scan(row: dict, results: list[dict]) -> float:
    """Recall of the uncapped rows of the same N interpolated at `row`'s mean scan."""
    curve = sorted(
        (r["scanned"], r["recall_at_4"]) for r in results if r["n"] == row["n"] and not r["max_codes"]
    )
    return float(np.interp(row["scanned"], [s for s, _ in curve], [r for _, r in curve]))


def report(results: list[dict], args: argparse.Namespace) -> str:
    lines = [
        "# bench_scan_budget: recall@4 against the vectors a query scans, by nprobe and by a cap",
        "",
        produced_by("bench_scan_budget.py", "bench-scan-budget"),
        "",
        f"Workspaces: bench_scale's kept `--list-size 366` series (copies of 72,401 news sentences a "
        f"side). {args.queries:,} en queries search the de index with bitextmine's search; recall@4 is the "
        f"share of their exact top 4 found. Scanned: vectors a query scans on average, and over the "
        f"nominal nprobe {NOMINAL_NPROBE} x N / nlist. Capped rows (`mine --max-codes`, FAISS's "
        "max_codes) probe more lists and stop at the cap; 'uncapped at that scan' is the recall the "
        "uncapped rows reach at the same mean scan (interpolated between their nprobe).",
        "",
        "| N | nlist | nprobe | cap (vectors) | scanned a query | x nominal | recall@4 "
        "| uncapped at that scan | difference | search µs a query (CPU µs) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        capped = r["max_codes"] > 0
        same_scan = recall_at_same_scan(r, results) if capped else None
        cap = f"{r['max_codes']:,}" if capped else "-"
        lines.append(
            f"| {r['n']:,} | {r['nlist']:,} | {r['nprobe']} | {cap} "
            f"| {r['scanned']:,.0f} | {r['scanned'] / r['nominal']:.2f}x | {r['recall_at_4']:.4f} "
            + (f"| {same_scan:.4f} | {r['recall_at_4'] - same_scan:+.4f} " if capped else "| - | - ")
            + (f"| {r['search_us']} ({r['search_cpu_us']}) |" if "search_us" in r else "| - |")
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_kept_workspaces(parser)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--nprobes", type=lambda s: [int(v) for v in s.split(",")], default="4,6,8,10,12,16")
    parser.add_argument("--cap-nprobe", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--caps",
        type=lambda s: [float(v) for v in s.split(",")],
        default="1,1.25,1.5,2",
        help="caps as multiples of the nominal scan",
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_scan_budget.json")
    args = parser.parse_args()
    results = [row for work in kept_workspaces(parser, args.work) for row in measure(work, args)]
    save_results(args.out, results, report(results, args))


if __name__ == "__main__":
    main()
