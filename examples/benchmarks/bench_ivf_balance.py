"""IVF list balance of bench_scale's vectors: by copies per distinct sentence, and by list count.

bench_scale reaches N vectors a side by repeating a fixed set of real embeddings with small noise, so a
larger N also means more copies of each sentence. This benchmark separates the two: it trains the IVF
that bench_scale's `--list-size` rows were built with (`IVF{N / list size}_HNSW32,Flat`, inner product,
`index.training_rows` sampled rows) on noisy copies of a random subset of the de embeddings, for several
(N, distinct sentences) pairs, and reports FAISS's imbalance factor of the lists and how many vectors en
queries (noisy copies of all en embeddings, as in bench_scale) scan at nprobe 8, relative to equal
lists, and times bitextmine's search (probe search and list scan) of one block of such queries of
`mine`'s size.

    python examples/benchmarks/bench_ivf_balance.py [--bases WORK]   # or: make bench-ivf-balance
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from benchlib import REPO, base_vectors, noisy_copies, produced_by, save_results

RESULTS = Path(__file__).parent / "results"
QUERIES = 20_000
NPROBE = 8
# (N, distinct sentences): equal copies at different list counts, and different copies at one N
DEFAULT_RUNS = "72400:72400,300000:72400,300000:21700,1000000:72400,73200:1785,300000:7300,1000000:24400"


def measure(n: int, distinct: int, de: np.ndarray, en: np.ndarray, args: argparse.Namespace) -> dict:
    import faiss

    from bitextmine.index import training_rows
    from bitextmine.index_search import list_sizes, query_block_rows, search

    rng = np.random.default_rng(n + distinct)
    subset = de[np.sort(rng.choice(len(de), distinct, replace=False))]
    base = noisy_copies(subset, n, args.sigma, rng)
    queries = noisy_copies(en, QUERIES, args.sigma, rng)
    block = noisy_copies(en, min(n, query_block_rows(n // args.list_size, NPROBE)), args.sigma, rng)
    factory = f"IVF{n // args.list_size}_HNSW32,Flat"
    index = faiss.index_factory(base.shape[1], factory, faiss.METRIC_INNER_PRODUCT)
    started = time.perf_counter()
    sample = np.sort(rng.choice(n, training_rows(factory, n, base.shape[1]), replace=False))
    index.train(base[sample])
    index.add(base)
    ivf = faiss.extract_index_ivf(index)
    sizes = list_sizes(ivf)
    _, probes = ivf.quantizer.search(queries, NPROBE)
    en_scan = float(sizes[probes].sum(axis=1).mean())
    ivf.nprobe = NPROBE
    search(index, block[:1000], 4)  # warm-up
    timed = time.perf_counter()
    search(index, block, 4)
    search_s = time.perf_counter() - timed
    row = {
        "n": n,
        "distinct": distinct,
        "copies": round(n / distinct, 1),
        "nlist": ivf.nlist,
        "train_rows": len(sample),
        "imbalance": round(ivf.invlists.imbalance_factor(), 3),
        "en_scan": round(en_scan / (NPROBE * n / ivf.nlist), 3),
        "search_us": round(search_s / len(block) * 1e6, 1),
        "ns_a_scanned": round(search_s / len(block) / en_scan * 1e9, 2),
        "seconds": round(time.perf_counter() - started, 1),
    }
    print(row, flush=True)
    return row


def report(results: list[dict], args: argparse.Namespace) -> str:
    lines = [
        "# bench_ivf_balance: IVF list balance by copies per sentence and by list count",
        "",
        produced_by("bench_ivf_balance.py", "bench-ivf-balance"),
        "",
        f"Base: noisy copies (sigma {args.sigma}, as bench_scale) of a random subset of the "
        f"{args.de_count:,} "
        f"de embeddings of `{args.bases.name}`; index `IVF(N / {args.list_size})_HNSW32,Flat` trained on the "
        f"library's sample for N. Imbalance: FAISS's imbalance factor (1 = equal lists). en scan: vectors "
        f"{QUERIES:,} en queries (noisy copies of the {args.en_count:,} en embeddings) list at nprobe "
        f"{NPROBE}, over nprobe x N / nlist. Search: bitextmine's `search` (probe search and list scan) of "
        "one block of mine's size of en queries, µs a query and ns a vector scanned (en scan x nprobe x "
        "N / nlist); the search rows of one run can be compared with each other, not with other runs.",
        "",
        "| N | distinct sentences | copies a sentence | nlist | training rows | imbalance | en scan "
        "| search µs a query | ns a scanned vector |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(results, key=lambda r: (r["copies"], r["n"])):
        lines.append(
            f"| {r['n']:,} | {r['distinct']:,} | {r['copies']:.1f} | {r['nlist']:,} | {r['train_rows']:,} "
            f"| {r['imbalance']:.3f} | {r['en_scan']:.3f}x | {r['search_us']:.1f} | {r['ns_a_scanned']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--bases",
        type=Path,
        default=REPO / "bitextmine-work" / "demo",
        help="workspace whose embeddings are copied",
    )
    parser.add_argument("--runs", default=DEFAULT_RUNS, help="N:distinct pairs, comma-separated")
    parser.add_argument("--list-size", type=int, default=366)
    parser.add_argument("--sigma", type=float, default=0.02)
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_ivf_balance.json")
    args = parser.parse_args()
    de, en = base_vectors(args.bases, "de"), base_vectors(args.bases, "en")
    args.de_count, args.en_count = len(de), len(en)
    runs = [tuple(map(int, run.split(":"))) for run in args.runs.split(",")]
    results = [measure(n, min(distinct, len(de)), de, en, args) for n, distinct in runs]
    save_results(args.out, results, report(results, args))


if __name__ == "__main__":
    main()
