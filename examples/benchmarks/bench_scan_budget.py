"""Recall against the vectors a query scans: more or fewer probes, or a cap on the scan (`--max-codes`).

k-means leaves IVF lists of unequal length, and queries of the other language fall more often into the
long ones, so at a fixed nprobe the vectors a query scans grow with N (bench_scale, bench_ivf_balance).
`mine --max-codes C` caps them at C a query. This benchmark asks what the cap costs: in bench_scale's
kept workspaces (`--keep`), en queries search the de index as `mine`'s forward direction does, with
bitextmine's search (probe search and list scan), and their top 4 is compared with exact search. For
each N: without a cap at several nprobe, and at a larger nprobe with caps of multiples of the nominal
scan (nprobe 8 x N / nlist, what equal lists would give). Each capped row also shows the recall the
uncapped rows reach at the same mean scan (linear interpolation between their nprobe), so a cap that
only moves along the nprobe curve shows a difference near 0.

A few settings are also timed, to see how a query's search cost grows with N: each workspace's de index
and one en query block of `mine`'s size are loaded together, and the sizes and settings take turns
(best of --repeats), so that a change in the VM's speed during the run touches every size alike. µs a
query: the probe search alone (the coarse quantizer's), the whole search (probe search and list scan),
and the whole search's CPU time over the process's threads, which time stolen by the hypervisor does not
inflate.

    python examples/benchmarks/bench_scan_budget.py [--work DIR ...]   # or: make bench-scan-budget
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from functools import partial
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

    from bitextmine.index_search import list_sizes, scanned_rows, search
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
    settings += [s for s in timed_settings(ivf) if s not in settings]
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
        print(row, flush=True)
        results.append(row)
    return results


def timed_settings(ivf) -> list[tuple[int, int]]:
    """The (nprobe, max_codes) of TIMED for `ivf`'s nominal scan."""
    nominal = NOMINAL_NPROBE * ivf.ntotal / ivf.nlist
    return [(nprobe, round(factor * nominal)) for nprobe, factor in TIMED]


def time_interleaved(works: list[Path], repeats: int) -> list[dict]:
    """Best µs a query of the probe search and of bitextmine's whole search (wall, CPU) at each timed
    setting of each workspace, with every workspace's index and query block loaded at once and the sizes
    and settings taking turns."""
    import faiss

    from bitextmine.index_search import query_block_rows, search
    from bitextmine.store import EmbeddingStore

    loaded = []
    for work in works:
        index = faiss.read_index(str(work / "index" / "de.faiss"))
        ivf = faiss.extract_index_ivf(index)
        en = EmbeddingStore(work / "emb" / "en", "en").vectors()
        block = en.take(np.arange(min(len(en), query_block_rows(ivf.nlist, NOMINAL_NPROBE))))
        block = np.ascontiguousarray(block, dtype=np.float32)
        search(index, block[:1000], K)  # warm-up: pages of the index
        loaded.append((index, ivf, block))
    best: dict[tuple[int, int, int], dict] = {}
    for _ in range(repeats):
        for index, ivf, block in loaded:
            for nprobe, max_codes in timed_settings(ivf):
                ivf.nprobe, ivf.max_codes = nprobe, max_codes
                probe, _ = elapsed(partial(ivf.quantizer.search, block, nprobe))
                wall, cpu = elapsed(partial(search, index, block, K))
                us = [round(t / len(block) * 1e6, 1) for t in (probe, wall, cpu)]
                row = {"n": ivf.ntotal, "nlist": ivf.nlist, "quantizer": quantizer_name(ivf)}
                row |= {"nprobe": nprobe, "max_codes": max_codes}
                row |= {"block": len(block), "probe_us": us[0], "search_us": us[1], "search_cpu_us": us[2]}
                key = (ivf.ntotal, nprobe, max_codes)
                kept = best.setdefault(key, row)
                for field in ("probe_us", "search_us", "search_cpu_us"):
                    kept[field] = min(kept[field], row[field])
    for row in best.values():
        print(row, flush=True)
    return list(best.values())


def quantizer_name(ivf) -> str:
    """ "HNSW{M}" or "flat": the coarse quantizer, as `index` builds it."""
    import faiss

    quantizer = faiss.downcast_index(ivf.quantizer)
    return f"HNSW{quantizer.hnsw.nb_neighbors(1)}" if isinstance(quantizer, faiss.IndexHNSW) else "flat"


def elapsed(call) -> tuple[float, float]:
    """(wall, CPU) seconds `call()` took."""
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


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
        "| uncapped at that scan | difference |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    recall_rows = [r for r in results if "recall_at_4" in r]
    for r in recall_rows:
        capped = r["max_codes"] > 0
        same_scan = recall_at_same_scan(r, recall_rows) if capped else None
        lines.append(
            f"| {r['n']:,} | {r['nlist']:,} | {r['nprobe']} | {cap_text(r)} "
            f"| {r['scanned']:,.0f} | {r['scanned'] / r['nominal']:.2f}x | {r['recall_at_4']:.4f} "
            + (f"| {same_scan:.4f} | {r['recall_at_4'] - same_scan:+.4f} |" if capped else "| - | - |")
        )
    return "\n".join(lines + timing_report([r for r in results if "probe_us" in r])) + "\n"


def cap_text(row: dict) -> str:
    return f"{row['max_codes']:,}" if row["max_codes"] else "-"


def timing_report(rows: list[dict]) -> list[str]:
    """The timing table, and how a query's search time grew with N at each setting."""
    lines = [
        "",
        "Search time, all sizes loaded at once and taking turns, µs a query (each column's best of the "
        "repeats): the probe search alone, the list scan (whole search minus probe search) and the whole "
        "search, in brackets its CPU time over the process's threads. Block: the queries searched at "
        "once (`mine`'s block for that nlist).",
        "",
        "| N | nlist | quantizer | nprobe | cap (vectors) | block | probe search µs | list scan µs "
        "| search µs (CPU µs) |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['n']:,} | {r['nlist']:,} | {r['quantizer']} | {r['nprobe']} | {cap_text(r)} | {r['block']:,} "
        f"| {r['probe_us']} "
        f"| {r['search_us'] - r['probe_us']:.1f} | {r['search_us']} ({r['search_cpu_us']}) |"
        for r in rows
    ]
    lines.append("")
    for nprobe, factor in TIMED:
        series = sorted(
            (r for r in rows if r["nprobe"] == nprobe and bool(r["max_codes"]) == bool(factor)),
            key=lambda r: r["n"],
        )
        if len(series) > 1:
            lines.append(f"- {growth_text(series, nprobe, factor)}")
    return lines


def growth_text(series: list[dict], nprobe: int, factor: float) -> str:
    """How the search time a query of `series` (one setting, by N) grew, and the N exponent of the time
    of searching all N queries, between consecutive sizes."""
    setting = f"nprobe {nprobe}" + (f", capped at {factor}x the nominal scan" if factor else "")
    steps = []
    for a, b in itertools.pairwise(series):
        exponent = 1 + np.log(b["search_us"] / a["search_us"]) / np.log(b["n"] / a["n"])
        probe = b["probe_us"] - a["probe_us"]
        steps.append(
            f"{a['n']:,} to {b['n']:,}: {a['search_us']} to {b['search_us']} µs a query "
            f"({probe:+.1f} µs of it in the probe search), all N queries ~ N^{exponent:.2f}"
        )
    return f"{setting}: " + "; ".join(steps) + "."


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
    works = kept_workspaces(parser, args.work)
    results = [row for work in works for row in measure(work, args)]
    results += time_interleaved(works, args.repeats)
    save_results(args.out, results, report(results, args))


if __name__ == "__main__":
    main()
