"""The probe search of an HNSW-quantized IVF index against a flat search of its centroids.

`index --list-size L` puts an HNSW graph (`IVF{N/L}_HNSW32`) in front of N / L lists, so that finding a
query's nprobe nearest centroids does not cost N / L dot products. This benchmark measures what that
search costs and how exact it is as the list count grows: in bench_scale's kept workspaces (`--keep`),
one block of en queries (the first --queries rows) searches the de index's quantizer for its nprobe
nearest centroids at several HNSW efSearch (FAISS's default is 16), and `faiss.knn` finds the exact ones
over all centroids (BLAS). Columns: µs a query, the share of the exact nprobe nearest centroids the
HNSW search returns (which lists a query scans; a missed one costs recall), and the centroids a query
is compared with (FAISS's HNSW statistics; all of them for the flat search), with the time a comparison.

    python examples/benchmarks/bench_coarse_search.py [--work DIR ...]   # or: make bench-coarse-search
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
NPROBE = 8


def timed(search, queries: np.ndarray) -> tuple[float, np.ndarray]:
    """(µs a query, ids) of `search(queries)` after a warm-up on the first 1,000."""
    import faiss

    search(queries[:1000])
    faiss.cvar.hnsw_stats.reset()
    started = time.perf_counter()
    ids = search(queries)
    return (time.perf_counter() - started) / len(queries) * 1e6, ids


def measure(work: Path, args: argparse.Namespace) -> list[dict]:
    import faiss

    from bitextmine.store import EmbeddingStore

    index = faiss.read_index(str(work / "index" / "de.faiss"))  # owns the IVF: keep it alive
    ivf = faiss.extract_index_ivf(index)
    quantizer = faiss.downcast_index(ivf.quantizer)
    hnsw = quantizer if isinstance(quantizer, faiss.IndexHNSW) else None  # else flat: nothing to compare
    centroids = (hnsw.storage if hnsw else quantizer).reconstruct_n(0, ivf.nlist)
    en = EmbeddingStore(work / "emb" / "en", "en").vectors()
    queries = np.ascontiguousarray(en.take(np.arange(min(args.queries, len(en)))), dtype=np.float32)

    def flat(q: np.ndarray) -> np.ndarray:
        return faiss.knn(q, centroids, NPROBE, metric=faiss.METRIC_INNER_PRODUCT)[1]

    flat_us, exact = timed(flat, queries)
    rows = [{"n": ivf.ntotal, "nlist": ivf.nlist, "search": "flat", "us": round(flat_us, 1), "found": 1.0}]
    rows[0]["distances"] = ivf.nlist
    for ef in args.ef if hnsw else []:
        hnsw.hnsw.efSearch = ef
        us, ids = timed(lambda q: hnsw.search(q, NPROBE)[1], queries)
        distances = faiss.cvar.hnsw_stats.ndis / len(queries)  # the stats count the timed search only
        found = np.mean([len(np.intersect1d(a, b)) for a, b in zip(ids, exact, strict=True)]) / NPROBE
        rows.append(
            {
                "n": ivf.ntotal,
                "nlist": ivf.nlist,
                "search": f"HNSW32, efSearch {ef}",
                "us": round(us, 1),
                "found": round(float(found), 3),
                "distances": round(distances),
            }
        )
    for row in rows:
        print(row, flush=True)
    return rows


def report(results: list[dict], args: argparse.Namespace) -> str:
    lines = [
        "# bench_coarse_search: finding a query's nearest IVF lists, HNSW against flat",
        "",
        produced_by("bench_coarse_search.py", "bench-coarse-search"),
        "",
        f"Workspaces: bench_scale's kept `--list-size 366` series (copies of 72,401 news sentences a side; "
        f"nlist = N / 366). {args.queries:,} en queries (one block) look for their {NPROBE} nearest "
        "centroids of the de index: with its HNSW32 quantizer at several efSearch (FAISS's default: 16), "
        "and exactly with `faiss.knn` over all centroids. Found: share of the exact nearest centroids the "
        "search returned. Distances: centroids a query is compared with (HNSW: FAISS's hnsw_stats.ndis over "
        "the timed search).",
        "",
        "| N | nlist | search | µs a query | found | distances a query | ns a distance |",
        "|---:|---:|---|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['n']:,} | {r['nlist']:,} | {r['search']} | {r['us']} | {r['found']:.3f} "
        f"| {r['distances']:,} | {r['us'] / r['distances'] * 1e3:.1f} |"
        for r in results
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_kept_workspaces(parser)
    parser.add_argument("--queries", type=int, default=65_536)
    parser.add_argument("--ef", type=lambda s: [int(v) for v in s.split(",")], default="8,16,32,64")
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_coarse_search.json")
    args = parser.parse_args()
    results = [row for work in kept_workspaces(parser, args.work) for row in measure(work, args)]
    save_results(args.out, results, report(results, args))


if __name__ == "__main__":
    main()
