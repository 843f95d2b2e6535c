"""Cost of bitextmine's IVF-Flat list scan per scanned vector, by list count and query block size.

`index_search.scan_lists` scores each probed list once for all the queries of a block that probe it,
with one matrix product. Here every list holds exactly --list-size random vectors and every query
probes --nprobe distinct lists drawn uniformly, so the vectors a query scans do not depend on the list
count and neither should the time, if the scan were linear. The probe search (the coarse quantizer)
is not timed. For each list count the same queries are scanned in blocks of 65,536 (`mine`'s block
before 2026-11-22) and in blocks of `query_block_rows` (mine's block now), best of --repeats runs.

    python examples/benchmarks/bench_list_scan.py            # or: make bench-list-scan
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from benchlib import REPO, produced_by, save_results

sys.path.insert(0, str(REPO))

RESULTS = Path(__file__).parent / "results"
DIM, K = 384, 4
OLD_BLOCK_ROWS = 65_536


def balanced_ivf(nlist: int, size: int, seed: int):
    """An inner-product IndexIVFFlat of `nlist` lists of `size` random unit vectors each (no training:
    the scan never reads the centroids)."""
    import faiss

    rng = np.random.default_rng(seed)
    ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(DIM), DIM, nlist, faiss.METRIC_INNER_PRODUCT)
    ivf.is_trained = True
    pool = rng.standard_normal((64 * size, DIM), dtype=np.float32)  # lists share 64 distinct contents
    pool /= np.linalg.norm(pool, axis=1, keepdims=True)
    for list_no in range(nlist):
        codes = np.ascontiguousarray(pool[(list_no % 64) * size : (list_no % 64 + 1) * size])
        ids = np.arange(list_no * size, (list_no + 1) * size, dtype=np.int64)
        ivf.invlists.add_entries(list_no, size, faiss.swig_ptr(ids), faiss.swig_ptr(codes.view(np.uint8)))
    ivf.ntotal = nlist * size
    return ivf


def uniform_probes(rows: int, nlist: int, nprobe: int, seed: int) -> np.ndarray:
    """`nprobe` distinct lists a query, uniform over the `nlist` lists."""
    rng = np.random.default_rng(seed)
    probes = rng.integers(nlist, size=(rows, nprobe))
    while True:
        ordered = np.sort(probes, axis=1)
        repeated = (np.diff(ordered, axis=1) == 0).any(axis=1)
        if not repeated.any():
            return probes
        probes[repeated] = rng.integers(nlist, size=(int(repeated.sum()), nprobe))


def time_scan(ivf, queries: np.ndarray, probes: np.ndarray, block: int, repeats: int) -> float:
    """Best seconds over `repeats` runs to scan all the queries, `block` at a time."""
    from bitextmine.index_search import scan_lists

    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for first in range(0, len(queries), block):
            scan_lists(ivf, queries[first : first + block], probes[first : first + block], K)
        best = min(best, time.perf_counter() - started)
    return best


def measure(nlist: int, args: argparse.Namespace) -> list[dict]:
    from bitextmine.index_search import query_block_rows

    ivf = balanced_ivf(nlist, args.list_size, seed=nlist)
    new_block = query_block_rows(nlist, args.nprobe)
    rows = max(new_block, OLD_BLOCK_ROWS)
    rng = np.random.default_rng(1)
    queries = rng.standard_normal((rows, DIM), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    probes = uniform_probes(rows, nlist, args.nprobe, seed=2)
    scanned = rows * args.nprobe * args.list_size
    results = []
    for block in sorted({OLD_BLOCK_ROWS, new_block}):
        seconds = time_scan(ivf, queries, probes, block, args.repeats)
        results.append(
            {
                "nlist": nlist,
                "list_size": args.list_size,
                "nprobe": args.nprobe,
                "block_rows": block,
                "mine_block": block == new_block,
                "queries_a_list": round(block * args.nprobe / nlist, 1),
                "us_a_query": round(seconds / rows * 1e6, 2),
                "ns_a_vector": round(seconds / scanned * 1e9, 2),
            }
        )
        print(results[-1], flush=True)
    return results


def report(results: list[dict], args: argparse.Namespace) -> str:
    lines = [
        "# bench_list_scan: bitextmine's IVF-Flat list scan, time per scanned vector",
        "",
        produced_by("bench_list_scan.py", "bench-list-scan"),
        "",
        f"Lists of exactly {args.list_size} random 384-d vectors; each query probes {args.nprobe} distinct "
        "lists drawn uniformly, so every query scans the same number of vectors at every list count. "
        "Probe search not timed. Best of "
        f"{args.repeats} runs over the same queries (at least 65,536 and one block of mine's size). "
        "Block 65,536 is `mine`'s fixed block before 2026-11-22; the block marked `mine` is "
        "`index_search.query_block_rows(nlist, nprobe)`.",
        "",
        "| nlist | block rows | queries a probed list | µs a query | ns a scanned vector "
        "| vs blocks of 65,536 |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for nlist in sorted({r["nlist"] for r in results}):
        rows = [r for r in results if r["nlist"] == nlist]
        old = next(r for r in rows if r["block_rows"] == OLD_BLOCK_ROWS)
        for r in rows:
            mark = " (mine)" if r["mine_block"] else ""
            speedup = "-" if r is old else f"{old['ns_a_vector'] / r['ns_a_vector']:.2f}x faster"
            lines.append(
                f"| {nlist:,} | {r['block_rows']:,}{mark} | {r['queries_a_list']:,.0f} "
                f"| {r['us_a_query']:.1f} | {r['ns_a_vector']:.2f} | {speedup} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nlists", default="820,2732,8197", help="list counts (300k, 1M, 3M rows of 366)")
    parser.add_argument("--list-size", type=int, default=366)
    parser.add_argument("--nprobe", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_list_scan.json")
    args = parser.parse_args()
    results = [row for nlist in map(int, args.nlists.split(",")) for row in measure(nlist, args)]
    save_results(args.out, results, report(results, args))


if __name__ == "__main__":
    main()
