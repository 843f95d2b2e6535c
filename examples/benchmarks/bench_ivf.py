"""IVF search cost on this machine: how `index` + `mine` scale with N, and why a query costs what it does.

One subcommand a question. Each writes its rows (one a measurement, each with its date, machine, software
and commit) to results/<study>.json, keeping the rows of other settings there, and rewrites
results/<study>.md from all of them; `report` rewrites the .md files from the JSON without measuring.

  scale          How do the time and memory of `index` + `mine` grow from 100k to 10M vectors a side?
                 -> bench_scale.{json,md}
  list-scan      What does the list-by-list IVF scan cost a scanned vector, by list count and query
                 block?  -> bench_list_scan.{json,md}
  balance        Why does a query scan more vectors as N grows: copies a sentence or list count?
                 -> bench_ivf_balance.{json,md}
  scan-budget    What recall does a cap on the scan (`mine --max-codes`) cost, and how does the search
                 time a query grow with N?  -> bench_scan_budget.{json,md}
  coarse-search  HNSW or flat search for a query's nearest lists?  -> bench_coarse_search.{json,md}
  report         Rewrite the reports from the JSON.

scan-budget and coarse-search measure in the workspaces that `scale --list-size 366 --keep` leaves;
scale and balance copy the embeddings of a workspace (`make demo`, `make bench-ivf-bases`). Each
subcommand's --help says what it needs; examples/benchmarks/README.md says how long each takes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import NamedTuple

import numpy as np
from benchlib import REPO, RESULTS, distinct, load_rows, produced_by, runs_table, save_results, stamped, table

K = 4
DIM = 384
NPROBE = 8  # the nprobe every study fixes
SIGMA = 0.02
DEMO = REPO / "bitextmine-work" / "demo"
BASES = REPO / "bitextmine-work" / "bench" / "bases"  # make bench-ivf-bases
SCALE_SCRATCH = REPO / "bitextmine-work" / "bench" / "scale"
DEMO_BASES = 8_400  # sentences a side in the demo workspace, scale's default --bases
SCRIPT = "examples/benchmarks/bench_ivf.py"
CLI = [sys.executable, "-m", "bitextmine"]
PARSER_HELP = {"formatter_class": argparse.RawDescriptionHelpFormatter}
OUT = [RESULTS]  # the --results folder


# ------------------------------------------------------------------------------------------------ shared


def require_embeddings(root: Path) -> None:
    """Exit with one line naming what to run when `root` holds no de and en embeddings."""
    if all((root / "emb" / lang / "manifest.json").is_file() for lang in ("de", "en")):
        return
    how = {DEMO: "make demo", BASES: "make bench-ivf-bases"}.get(
        root.resolve(), f"bitextmine encode FILES --lang de|en --workdir {root}"
    )
    sys.exit(f"bench_ivf: no de and en embeddings in {root}: run `{how}` first")


def base_vectors(root: Path, lang: str) -> np.ndarray:
    """float32 embeddings of `lang` in the workspace `root` (all rows)."""
    from bitextmine.workspace.embeddings import EmbeddingStore

    vectors = EmbeddingStore(root / "emb" / lang, lang).vectors()
    return vectors.take(np.arange(len(vectors)))


def noisy_copies(base: np.ndarray, rows: int, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """`rows` unit vectors: rows of `base` drawn with replacement, plus gaussian noise of `sigma`."""
    picked = base[rng.integers(len(base), size=rows)]
    noisy = picked + sigma * rng.standard_normal(picked.shape, dtype=np.float32)
    return noisy / np.linalg.norm(noisy, axis=1, keepdims=True)


def workspace_vectors(work: Path, lang: str):
    """The embeddings of `lang` in the workspace `work` (ShardedVectors, memory-mapped)."""
    from bitextmine.workspace.embeddings import EmbeddingStore

    return EmbeddingStore(work / "emb" / lang, lang).vectors()


def en_queries(work: Path, rows: np.ndarray) -> np.ndarray:
    """The en vectors of `work` at `rows`, float32 and contiguous: the queries of mine's forward search."""
    return np.ascontiguousarray(workspace_vectors(work, "en").take(rows), dtype=np.float32)


def de_index(work: Path):
    """(index, its IVF or None) of the de index of `work`; keep the index alive while using the IVF."""
    import faiss

    index = faiss.read_index(str(work / "index" / "de.faiss"))
    return index, faiss.try_extract_index_ivf(index)


def exact_kth(base, queries: np.ndarray) -> np.ndarray:
    """The K-th best inner product of each query over all rows of `base` (ShardedVectors)."""
    import faiss

    heap = faiss.ResultHeap(len(queries), K, keep_max=True)
    for start, block in base.blocks(200_000):
        sims, ids = faiss.knn(queries, block, K, metric=faiss.METRIC_INNER_PRODUCT)
        heap.add_result(sims, ids + start)
    heap.finalize()
    return heap.D[:, -1]


def quantizer_name(ivf) -> str:
    """ "HNSW{M}" or "flat": the coarse quantizer, as `index` builds it."""
    import faiss

    quantizer = faiss.downcast_index(ivf.quantizer)
    return f"HNSW{quantizer.hnsw.nb_neighbors(1)}" if isinstance(quantizer, faiss.IndexHNSW) else "flat"


def kept_workspaces(work: list[Path] | None, scratch: Path, list_size: int) -> list[Path]:
    """`work`, else the workspaces `scale --list-size L --keep` left in `scratch`, by N; exits with one line
    naming the command to run when there are none, or when two series are kept at one N."""
    if work:
        return work
    found = sorted(scratch.glob(f"n*-list{list_size}*"), key=lambda p: int(p.name[1:].split("-")[0]))
    if not found:
        sys.exit(
            f"bench_ivf: no kept workspaces n*-list{list_size}* in {scratch}: run `{SCRIPT} scale "
            f"--list-size {list_size} --bases {BASES.relative_to(REPO)} --keep` first (make bench-ivf-scale)"
        )
    sizes = [p.name.split("-")[0] for p in found]
    if len(set(sizes)) < len(sizes):
        sys.exit(
            f"bench_ivf: several kept series in {scratch} ({', '.join(p.name for p in found)}): "
            "name them with --work"
        )
    return found


def add_kept_workspaces(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--work", type=Path, nargs="+", help="kept workspaces [those scale --keep left in --scratch]"
    )
    parser.add_argument("--scratch", type=Path, default=SCALE_SCRATCH, help="scale's --scratch [%(default)s]")
    parser.add_argument(
        "--list-size", type=int, default=366, help="the kept series' --list-size [%(default)s]"
    )


def elapsed(call) -> tuple[float, float]:
    """(wall, CPU) seconds `call()` took."""
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


def exponent(a: dict, b: dict, value: str, per_query: bool = False) -> float:
    """The N exponent of `value` from row `a` to row `b`; with `per_query`, of `value` x N (a time a query
    made the time of all N queries)."""
    return per_query + np.log(b[value] / a[value]) / np.log(b["n"] / a["n"])


def steps_text(series: list[dict], value: str, per_query: bool = False) -> str:
    """ "N^1.17 from 300,000 to 1,000,000 and N^1.33 from 1,000,000 to 3,000,000" over `series` by N."""
    return " and ".join(
        f"N^{exponent(a, b, value, per_query):.2f} from {a['n']:,} to {b['n']:,}"
        for a, b in itertools.pairwise(sorted(series, key=lambda r: r["n"]))
    )


def results_path(study: str) -> Path:
    """The study's JSON in the --results folder."""
    return OUT[0] / f"{STUDIES[study][0]}.json"


def write(study: str, rows: list[dict]) -> None:
    """`rows` into the study's JSON and its report next to it."""
    save_results(results_path(study), rows, STUDIES[study][1](rows))


def merged(study: str, new: list[dict], same: Callable[[dict, dict], bool]) -> list[dict]:
    """The study's saved rows without those `same` as a new one, then the new rows."""
    return [r for r in load_rows(results_path(study)) if not any(same(r, n) for n in new)] + new


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


# ------------------------------------------------------------------------------------------------- scale

SHARD_ROWS = 100_000
RECALL_QUERIES = 1000
SPEED_QUERIES = 32_768  # queries timed with FAISS's search (and the library's, one block of mine's size)


def scale_parser(sub) -> None:
    parser = sub.add_parser(
        "scale",
        help="index + mine at N x N: time, peak RSS, recall",
        description="""How do the time and memory of `bitextmine index` + `mine` grow with N?

For each N, a workspace gets N source and N target vectors (384-d float16 shards): the de and en
embeddings of the --bases workspace repeated with gaussian noise (sigma, then re-normalised), and a text
shard per 100k rows ("de 123") so `mine` can write its output. Then, each in its own process (peak RSS
from wait4, anonymous RSS sampled from /proc): `bitextmine index` for both languages at a fixed nprobe
(--tuned: the library's default, the fewest probes reaching recall@4 0.95 for 1,000 queries of the other
language), `bitextmine mine de en --threshold T` at that nprobe, and the same `mine` again over its saved
neighbour lists (the selection alone). Recall@4 compares the lists `mine` saved with exact search for
1,000 source rows; the search columns time FAISS's search and bitextmine's list scan on the same en queries.

Series (each its own rows in the JSON): the library's list count for N (Flat up to 200k; --factory
overrides above), or `index --list-size L` (N / L lists; --hnsw-quantizer: an HNSW32 coarse quantizer at
every list count, as `--list-size` built before it took a flat one up to 4,096 lists); the --bases
workspace; --tuned; `mine --max-codes C`. --mine-nprobe mines with fewer probes where the fixed one would take
hours (the row's peak RSS holds for both).

Needs the --bases workspace's embeddings: the demo's (`make demo`) by default; the committed
--list-size 366 series copies bitextmine-work/bench/bases (`make bench-ivf-bases`).""",
        **PARSER_HELP,
    )
    parser.add_argument("--sizes", default="100000,300000,1000000,3000000")
    parser.add_argument("--nprobe", type=int, default=NPROBE)
    parser.add_argument(
        "--tuned",
        action="store_true",
        help="no --nprobe: `index` tunes it to recall@4 0.95 against the other language, `mine` uses it",
    )
    parser.add_argument("--sigma", type=float, default=SIGMA)
    parser.add_argument(
        "--bases", type=Path, default=DEMO, help="workspace whose embeddings are copied [the demo's]"
    )
    parser.add_argument("--threshold", type=float, default=1.03)
    parser.add_argument(
        "--scratch", type=Path, default=SCALE_SCRATCH, help="where the workspaces go [%(default)s]"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the workspaces (scan-budget, coarse-search)"
    )
    parser.add_argument("--reuse", action="store_true", help="mine in kept workspaces without re-indexing")
    parser.add_argument("--mine-nprobe", type=int, help="probes for `mine` [--nprobe]")
    parser.add_argument(
        "--max-codes", type=int, default=0, help="`mine --max-codes`: vectors a query scans at most"
    )
    parser.add_argument("--note", help="a remark stored with the rows of this run (e.g. a shared CPU)")
    parser.add_argument("--factory", help="IVF factory above 200k [the library's choice for N]")
    parser.add_argument("--list-size", type=int, help="index with `--list-size L` (IVF of N / L lists)")
    parser.add_argument(
        "--hnsw-quantizer",
        action="store_true",
        help="with --list-size: an HNSW32 coarse quantizer at every N",
    )
    parser.add_argument(
        "--selection-only",
        action="store_true",
        help="only re-measure the selection columns of saved rows, in their kept workspaces",
    )
    parser.set_defaults(run=run_scale)


def run_scale(args: argparse.Namespace) -> None:
    require_embeddings(args.bases)
    if args.hnsw_quantizer and args.list_size is None:
        sys.exit("bench_ivf: --hnsw-quantizer goes with --list-size")
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = load_rows(results_path("scale"))
    if args.selection_only:
        args.base_count = min(len(workspace_vectors(args.bases, lang)) for lang in ("de", "en"))
        for n in sizes:
            row = next(r for r in rows if scale_key(r) == scale_key(scale_settings(n, args)))
            row.update(selection_columns(workspace_dir(args, n), args, row["mine_nprobe"]))
        write("scale", rows)
        return
    bases = {lang: base_vectors(args.bases, lang) for lang in ("de", "en")}
    args.base_count = min(len(vectors) for vectors in bases.values())
    for n in sizes:
        settings = scale_settings(n, args)
        key = scale_key(settings)
        same = [r for r in rows if scale_key(r) == key]
        built = same or [r for r in rows if scale_key(r)[:-1] == key[:-1]]  # kept indexes, mined uncapped
        done = stamped(run_size(n, settings, args, bases, built[0] if built else None))
        rows = sorted([r for r in rows if r not in same] + [done], key=scale_order)
        write("scale", rows)


class Timing(NamedTuple):
    seconds: float
    rss_gb: float  # peak RSS
    anon_gb: float  # peak anonymous RSS
    stolen: float  # share of the CPUs' time the hypervisor gave to other machines
    others: float  # share of the CPU time used on this machine that went to other processes


def timed(command: list[str]) -> Timing:
    """Wall time, peak memory and CPU contention of one command in its own process; its output is
    shown only when it fails.

    Peak RSS (wait4) also counts pages of memory-mapped files, which the kernel maps many at a time
    around each random read (fault-around) and reclaims first; RssAnon, sampled every 0.2 s from
    /proc, is the process's own memory. Stolen time slows the command without showing as load."""
    started, cpu_before = time.perf_counter(), cpu_ticks()
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, text=True)
        peak_anon_kb = 0
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            peak_anon_kb = max(peak_anon_kb, anon_kb(process.pid))
            time.sleep(0.2)
        process.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        output = log.read()
    seconds, ticks = time.perf_counter() - started, cpu_ticks() - cpu_before
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{output}")
    busy = (ticks[[0, 1, 2, 5, 6]].sum() / os.sysconf("SC_CLK_TCK")) or 1.0
    own = usage.ru_utime + usage.ru_stime
    return Timing(
        seconds,
        usage.ru_maxrss / 1024**2,
        peak_anon_kb / 1024**2,
        ticks[7] / max(ticks.sum(), 1),
        max(0.0, 1 - own / busy),
    )


def cpu_ticks() -> np.ndarray:
    """The machine's CPU time counters from /proc/stat (user nice system idle iowait irq softirq steal)."""
    with open("/proc/stat") as stat:
        return np.array(stat.readline().split()[1:9], dtype=np.int64)


def anon_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            return next((int(line.split()[1]) for line in status if line.startswith("RssAnon:")), 0)
    except OSError:
        return 0


def write_language(
    work: Path, lang: str, base: np.ndarray, n: int, args: argparse.Namespace, seed: int
) -> None:
    """N noisy copies of `base` rows (from the workspace `args.bases`) as embedding shards, and
    matching text shards."""
    from bitextmine.files import write_json
    from bitextmine.text.reader import CorpusCounts, Row
    from bitextmine.workspace.corpus import CorpusManifest, SourceInfo, write_text_shards
    from bitextmine.workspace.embeddings import EmbeddingShard, EmbeddingStore, ModelIdentity

    model = EmbeddingStore(args.bases / "emb" / lang, lang).model
    store = EmbeddingStore(work / "emb" / lang, lang)
    store.bind(
        ModelIdentity("bench-scale", model.fingerprint, base.shape[1], model.settings, model.precision)
    )
    rng = np.random.default_rng(seed)
    rows = (Row(0, i + 1, f"{lang} {i}") for i in range(n))
    text_shards = write_text_shards(rows, work / "corpora" / lang, SHARD_ROWS)
    for shard in text_shards:
        noisy = noisy_copies(base, shard.rows, args.sigma, rng)
        store.write_shard(EmbeddingShard(Path(shard.name).stem, shard.rows, shard.sha256, 0, 0), noisy)
    manifest = CorpusManifest(
        lang,
        [SourceInfo(f"synthetic-{lang}", 0, 0)],
        SHARD_ROWS,
        False,
        10_000,
        text_shards,
        CorpusCounts(lines=n),
        True,
    )
    write_json(work / "corpora" / lang / "manifest.json", manifest.to_json())


def recall_at_k(work: Path, queries: int, seed: int) -> float:
    """Share of the exact top-K target rows of sampled source rows found in mine's neighbour lists."""
    src = workspace_vectors(work, "de")
    rows = np.sort(np.random.default_rng(seed).choice(len(src), size=queries, replace=False))
    kth = exact_kth(workspace_vectors(work, "en"), src.take(rows))
    found = np.concatenate([np.load(p)["cos"] for p in sorted(work.glob("mined/.neighbours/*/fwd-*.npy"))])
    hits = np.nan_to_num(found[rows], nan=-np.inf) >= kth[:, None] - 1e-6
    return float(hits.mean())


def search_ms(work: Path, nprobe: int | None, max_codes: int, n: int) -> dict:
    """ms per query of FAISS's own search (SPEED_QUERIES queries) and of the library's `search` (list by
    list for IVF-Flat) on one block of mine's size, one after the other in this process: en queries
    (the first rows) against the de index, as mine does; and the vectors a query scans, on average."""
    from bitextmine.search.ivf_scan import list_sizes, query_block_rows, scanned_rows, search

    index, ivf = de_index(work)
    if ivf is not None:
        ivf.nprobe = nprobe or ivf.nprobe
        ivf.max_codes = max_codes
    block = min(n, query_block_rows(ivf and ivf.nlist, ivf and ivf.nprobe))
    x = en_queries(work, np.arange(block))
    times = {"search_block_rows": block}
    for name, run, queries in (
        ("faiss", index.search, x[:SPEED_QUERIES]),
        ("library", partial(search, index), x),
    ):
        run(x[:1000], K)  # warm-up: pages of the index
        started = time.perf_counter()
        run(queries, K)
        times[f"{name}_search_ms"] = round((time.perf_counter() - started) / len(queries) * 1e3, 4)
    if ivf is not None:
        _, probes = ivf.quantizer.search(x, ivf.nprobe)
        scanned = scanned_rows(list_sizes(ivf), probes, max_codes)
        times["scanned_per_query"] = round(float(scanned.sum(axis=1).mean()), 1)
    return times


def scale_factory(n: int, args: argparse.Namespace) -> str:
    from bitextmine.search.factory_choice import choose_factory

    if args.list_size is None:
        return "Flat" if n <= 200_000 else args.factory or choose_factory(n, DIM)
    factory = choose_factory(n, DIM, args.list_size)
    return re.sub(r"IVF(\d+),", r"IVF\1_HNSW32,", factory) if args.hnsw_quantizer else factory


def training_rule() -> str:
    """How the library sizes an IVF index's training sample (rows keep it: the rule changed once)."""
    from bitextmine.search.training import TRAIN_PER_LIST

    return f"{TRAIN_PER_LIST} a list"


def scale_settings(n: int, args: argparse.Namespace) -> dict:
    """The columns of a row that say which series it belongs to (see `scale_key`)."""
    factory = scale_factory(n, args)
    return {
        "n": n,
        "factory": factory,
        "list_size": args.list_size,
        "hnsw_quantizer": args.hnsw_quantizer if args.list_size else None,
        "bases": args.base_count,
        "max_codes": args.max_codes,
        "training": training_rule(),
        "tuned": args.tuned,
    }


def scale_key(r: dict) -> tuple:
    """N, then the series: list size (None: the library's list count), HNSW quantizer forced, sentences
    copied, training rule (IVF only), nprobe tuned, and mine's cap on the vectors a query scans (0: none),
    last."""
    training = r["training"] if "IVF" in r["factory"] else None
    return (
        r["n"],
        r.get("list_size"),
        bool(r.get("hnsw_quantizer")),
        r.get("bases", DEMO_BASES),
        training,
        bool(r.get("tuned")),
        r.get("max_codes") or 0,
    )


def scale_order(r: dict) -> tuple:
    """The demo's sentences first, the library's list count before fixed list lengths, earlier training
    rules first, fixed nprobe first, uncapped scans first, then by N."""
    n, list_size, hnsw, bases, training, tuned, max_codes = scale_key(r)
    return (bases != DEMO_BASES, list_size or 0, hnsw, training != training_rule(), tuned, max_codes, n)


def run_size(n: int, settings: dict, args: argparse.Namespace, bases: dict, earlier: dict | None) -> dict:
    work = workspace_dir(args, n)
    factory = settings["factory"]
    ivf = "IVF" in factory
    reused = args.reuse and reusable(work, factory)
    if reused:
        print(f"  N={n:,}: reusing the vectors and indexes in {work}", flush=True)
        result = reused_index_columns(work, earlier)
        shutil.rmtree(work / "mined", ignore_errors=True)  # with its saved lists, mine would search nothing
    else:
        result = prepare_and_index(work, n, factory, args, bases)
    mine_nprobe = (args.mine_nprobe or (None if args.tuned else args.nprobe)) if ivf else None
    seconds, rss, anon, stolen, others = timed(mine_command(work, args, mine_nprobe))
    stats = json.loads((work / "mined" / "de-en.stats.json").read_text())
    infos = [json.loads((work / "index" / f"{lang}.json").read_text()) for lang in ("de", "en")]
    tuned = {
        f"index_{info['lang']}_{key}": info[key]
        for info in infos
        for key in ("factory", "nprobe", "recall", "note")
    }
    result = {
        **settings,
        **result,
        "sigma": args.sigma,
        "threshold": args.threshold,
        "mine_s": round(seconds, 1),
        "mine_rss_gb": round(rss, 2),
        "mine_anon_gb": round(anon, 2),
        "mine_stolen": round(stolen, 3),
        "mine_others": round(others, 3),
        "s_per_million_queries": round(seconds / (2 * n) * 1e6, 1),
        "kept": stats["counts"]["kept"],
        "recall_at_4": round(recall_at_k(work, min(RECALL_QUERIES, n), seed=1), 4),
        **search_ms(work, mine_nprobe, args.max_codes, n),
        "nprobe": (infos[0]["nprobe"] if args.tuned else args.nprobe) if ivf else None,
        "mine_nprobe": mine_nprobe,
        **tuned,
        "imbalance": max((i["imbalance"] for i in infos if i.get("imbalance") is not None), default=None),
        "train_rows": infos[0]["train_rows"],
        "probe_ms_per_1000": round(sum(i["search_ms_per_1000"] for i in infos) / 2, 1),
        "reused_indexes": reused,
        "note": args.note,
        **selection_columns(work, args, mine_nprobe),
    }
    print(
        f"  N={n:,} mine: {seconds:.1f} s, peak {rss:.2f} GB, recall@4 {result['recall_at_4']}, "
        f"{stolen:.1%} stolen, {others:.1%} to other processes",
        flush=True,
    )
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return result


def workspace_dir(args: argparse.Namespace, n: int) -> Path:
    name = f"n{n}" + ("" if args.list_size is None else f"-list{args.list_size}")
    name += "-hnsw32" if args.hnsw_quantizer and args.list_size else ""
    name += "-tuned" if args.tuned else ""
    return args.scratch / (name + ("" if args.base_count == DEMO_BASES else f"-bases{args.base_count}"))


def mine_command(work: Path, args: argparse.Namespace, nprobe: int | None) -> list[str]:
    command = [*CLI, "mine", "de", "en", "-w", str(work), "--threshold", str(args.threshold)]
    command += [] if nprobe is None else ["--nprobe", str(nprobe)]
    return command + (["--max-codes", str(args.max_codes)] if args.max_codes else [])


def selection_columns(work: Path, args: argparse.Namespace, nprobe: int | None) -> dict:
    """The same `mine` again: its neighbour lists are saved, so it only selects and writes the pairs."""
    seconds, rss, anon, *_ = timed(mine_command(work, args, nprobe))
    print(f"  {work.name} selection: {seconds:.1f} s, peak {rss:.2f} GB ({anon:.2f} GB anon)", flush=True)
    return {"select_s": round(seconds, 1), "select_rss_gb": round(rss, 2), "select_anon_gb": round(anon, 2)}


def reused_index_columns(work: Path, earlier: dict | None) -> dict:
    """The index columns of the run that built the kept indexes: its row, else FAISS build seconds from
    L.json and no peak RSS (not measured by this run)."""
    if earlier is not None:
        return {key: earlier[key] for key in earlier if key.startswith(("prepare_", "index_"))}
    result: dict = {"prepare_s": None}
    for lang in ("de", "en"):
        info = json.loads((work / "index" / f"{lang}.json").read_text())
        result[f"index_{lang}_s"], result[f"index_{lang}_rss_gb"] = info["build_seconds"], None
    return result


def reusable(work: Path, factory: str) -> bool:
    """A kept workspace whose two indexes were completed with `factory`."""
    paths = [work / "index" / f"{lang}.json" for lang in ("de", "en")]
    return all(p.is_file() and json.loads(p.read_text())["factory"] == factory for p in paths)


def prepare_and_index(work: Path, n: int, factory: str, args: argparse.Namespace, bases: dict) -> dict:
    """Fresh vectors for both languages, then `bitextmine index` for each in its own timed process."""
    from bitextmine.search.factory_choice import choose_factory

    shutil.rmtree(work, ignore_errors=True)
    started = time.perf_counter()
    for seed, lang in enumerate(("de", "en")):
        write_language(work, lang, bases[lang], n, args, seed)
    result: dict = {"prepare_s": round(time.perf_counter() - started, 1)}
    by_list_size = args.list_size is not None and factory == choose_factory(n, DIM, args.list_size)
    default = args.tuned and args.list_size is None and args.factory is None  # may give way to Flat
    for lang, other in (("de", "en"), ("en", "de")):
        command = [*CLI, "index", lang, "-w", str(work), "--queries-from", other]
        if not default:
            command += ["--list-size", str(args.list_size)] if by_list_size else ["--factory", factory]
        command += ["--nprobe", str(args.nprobe)] if "IVF" in factory and not args.tuned else []
        seconds, rss, anon, stolen, others = timed(command)
        result[f"index_{lang}_s"], result[f"index_{lang}_rss_gb"] = round(seconds, 1), round(rss, 2)
        result[f"index_{lang}_anon_gb"] = round(anon, 2)
        result[f"index_{lang}_stolen"] = round(stolen, 3)
        result[f"index_{lang}_others"] = round(others, 3)
        print(f"  N={n:,} index {lang}: {seconds:.1f} s, peak {rss:.2f} GB, {stolen:.1%} stolen", flush=True)
    return result


def series_name(r: dict) -> str:
    """The series of a row: sentences copied, index rule, training rule where not today's, cap."""
    _, list_size, hnsw, bases, training, tuned, max_codes = scale_key(r)
    parts = [f"{bases:,} sentences", f"--list-size {list_size}" if list_size else "library's list count"]
    parts[-1] += " (HNSW32)" if hnsw else ""
    parts += [f"trained on {training}"] if training not in (None, training_rule()) else []
    parts += ["nprobe tuned"] if tuned else []
    parts += [f"--max-codes {max_codes:,}"] if max_codes else []
    return ", ".join(parts)


def list_length(r: dict) -> float | None:
    """Vectors per inverted list if the lists were equal (None: Flat)."""
    nlist = re.search(r"IVF(\d+)", r["factory"])
    return None if nlist is None else r["n"] / int(nlist.group(1))


def ns_per_scanned_vector(r: dict) -> float | None:
    """mine's time a query over the vectors a query scans: listed (nprobe x N / nlist; N for Flat) x the
    list imbalance, or, with a cap, what the search columns' en queries scanned."""
    if r.get("max_codes"):
        scanned = r["scanned_per_query"]
    elif list_length(r) is None:
        scanned = r["n"]
    elif r.get("imbalance") is not None and (r.get("mine_nprobe") or r["nprobe"]):
        scanned = r.get("mine_nprobe") or r["nprobe"]
        scanned *= list_length(r) * r["imbalance"]
    else:
        return None
    return r["s_per_million_queries"] * 1e3 / scanned


def report_scale(rows: list[dict]) -> str:
    from bitextmine.search.recall_tuning import TARGET_RECALL

    series: dict[str, list[dict]] = {}
    for r in rows:
        series.setdefault(series_name(r), []).append(r)
    ordered = [r for members in series.values() for r in members]
    growth = [
        f"{name}: {steps_text([r for r in members if at_fixed_nprobe(r)], 'mine_s')}"
        for name, members in series.items()
        if sum(at_fixed_nprobe(r) for r in members) > 1
    ]
    peak = max(rows, key=lambda r: r["mine_rss_gb"])
    index_peak = max(r.get(f"index_{lang}_rss_gb") or 0 for r in rows for lang in ("de", "en"))
    searched = [r for r in ordered if r.get("faiss_search_ms")]
    speedups = [r["faiss_search_ms"] / r["library_search_ms"] for r in searched]
    lines = [
        "# bench_scale: `index` + `mine` at N x N",
        "",
        produced_by(f"{SCRIPT} scale", "bench-ivf-scale"),
        "",
        "Vectors: copies of a workspace's real e5 embeddings (de and en) with gaussian noise (sigma "
        f"{'/'.join(sorted({_cell(r.get('sigma', SIGMA)) for r in rows}))}, re-normalised), 384-d float16. "
        "Each command in its own process; nprobe fixed, or (nprobe tuned) the library's default: the fewest "
        f"probes reaching recall@4 {TARGET_RECALL} for 1,000 queries of the other language. Recall@4: mine's "
        f"saved neighbour lists against exact search for {RECALL_QUERIES:,} source rows.",
        "",
        "## How does `mine`'s time grow with N?",
        "",
        f"Mining time against N per side (linear is N^1): {'; '.join(growth) or 'one size a series'}.",
        "",
        *table(
            "series | N per side | index | list length | list imbalance | nprobe (index / mine) | mine s "
            "| ms a query | ns a scanned vector | recall@4 | pairs kept",
            "lrlrrrrrrrr",
            (
                f"{series_name(r)} | {r['n']:,} | {r['factory']} | {_cell(_rounded(list_length(r), 1))} "
                f"| {_cell(r.get('imbalance'))} | {_probes(r)} | {r['mine_s']} "
                f"| {r['s_per_million_queries'] / 1e3:.3f} | {_cell(_rounded(ns_per_scanned_vector(r), 0))} "
                f"| {r['recall_at_4']} | {r['kept']:,}"
                for r in ordered
            ),
        ),
        "",
        "ms a query: `mine`'s seconds over its 2N queries. ns a scanned vector: over the vectors a query "
        "scans, nprobe x list length x imbalance (N for Flat; capped rows: what the search columns' en "
        "queries scanned).",
        "",
        "## What do `index` and `mine` take in time and memory?",
        "",
        f"`mine` peaked at {peak['mine_rss_gb']:g} GB RSS ({_cell(peak.get('mine_anon_gb'))} GB its own) "
        f"at {peak['n']:,} x {peak['n']:,} ({series_name(peak)}), `index` at {index_peak:g} GB; the target "
        "at 3M x 3M is 8 GB.",
        "",
        *table(
            "series | N per side | index s (de / en) | index peak GB (anon) | mine peak GB (anon) "
            "| selection s (anon GB)",
            "lrrrrr",
            (
                f"{series_name(r)} | {r['n']:,} | {r['index_de_s']} / {r['index_en_s']} "
                f"| {_peak(r, 'index_de', 'index_en')} | {_peak(r, 'mine')} "
                f"| {_peak(r, 'select', column='s')}"
                for r in ordered
            ),
        ),
        "",
        "Peak RSS from wait4 counts mapped pages of the embedding files; in brackets the peak of RssAnon "
        "sampled every 0.2 s, the process's own memory. Selection: the same `mine` again over its saved "
        "neighbour lists (scoring, one-to-one selection, writing).",
    ]
    tuned = [r for r in ordered if r.get("tuned")]
    if tuned:
        lines += [
            "",
            f"## At the library's default: nprobe tuned to recall@4 {TARGET_RECALL}",
            "",
            *table(
                "series | N per side | index | nprobe de / en | index's recall@4 de / en | mine recall@4 "
                "| index s (de / en) | mine s | index peak GB (anon) | mine peak GB (anon)",
                "lrlrrrrrrr",
                (
                    f"{series_name(r)} | {r['n']:,} | {_built(r)} | {_tuned_pair(r, 'nprobe')} "
                    f"| {_tuned_pair(r, 'recall')} | {r['recall_at_4']} "
                    f"| {r['index_de_s']} / {r['index_en_s']} | {r['mine_s']} "
                    f"| {_peak(r, 'index_de', 'index_en')} | {_peak(r, 'mine')}"
                    for r in tuned
                ),
            ),
            "",
            "Without --factory or --list-size, `index` builds what it chooses, and replaces an IVF-Flat that "
            "searched slower than exact search by Flat. "
            "The index's recall@4: what `index` measured at its nprobe for 1,000 queries of the other "
            "language (mine's forward search is en queries against the de index). A row's `index_*_note` in "
            "the JSON says where the target was not reached even probing every list.",
        ]
    if searched:
        lines += [
            "",
            "## How does bitextmine's list scan compare with FAISS's search?",
            "",
            f"On the same en queries against the de index, FAISS's search took {min(speedups):.1f}x to "
            f"{max(speedups):.1f}x the time of bitextmine's list-by-list scan.",
            "",
            *table(
                "series | N per side | block | FAISS ms a query | bitextmine ms a query | FAISS / bitextmine "
                "| vectors scanned a query | bitextmine ns a scanned vector",
                "lrrrrrrr",
                (
                    f"{series_name(r)} | {r['n']:,} | {r['search_block_rows']:,} "
                    f"| {r['faiss_search_ms']:.3f} "
                    f"| {r['library_search_ms']:.3f} | {r['faiss_search_ms'] / r['library_search_ms']:.1f} "
                    f"| {r['scanned_per_query']:,.0f} "
                    f"| {r['library_search_ms'] * 1e6 / r['scanned_per_query']:.1f}"
                    for r in searched
                ),
            ),
            "",
            f"FAISS searched the first {SPEED_QUERIES:,} en queries, bitextmine one block of `mine`'s size, "
            "one after the other in the benchmark's process after `mine`.",
        ]
    if any(r.get("note") for r in rows):
        lines += [
            "",
            "A row's `note` in the JSON says how it ran where that matters (a shared CPU, a later session).",
        ]
    return "\n".join([*lines, "", *runs_table(rows, _size_label)]) + "\n"


def _built(r: dict) -> str:
    """The factory, or each language's where `index` replaced a slower IVF-Flat by Flat."""
    built = [r.get(f"index_{lang}_factory", r["factory"]) for lang in ("de", "en")]
    return r["factory"] if built == [r["factory"]] * 2 else f"{built[0]} / {built[1]} (de / en)"


def _tuned_pair(r: dict, key: str) -> str:
    return " / ".join(_cell(r.get(f"index_{lang}_{key}")) for lang in ("de", "en"))


def _size_label(r: dict) -> str:
    return f"{r['n']:,}" + (f" (--max-codes {r['max_codes']:,})" if r.get("max_codes") else "")


def _probes(r: dict) -> str:
    if r["nprobe"] is None:
        return "-"
    if r.get("tuned") and not r.get("mine_nprobe"):
        return f"{r['index_de_nprobe']} / {r['index_en_nprobe']} (de / en)"
    return f"{r['nprobe']} / {r.get('mine_nprobe') or r['nprobe']}"


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _peak(r: dict, *commands: str, column: str = "") -> str:
    """The largest peak RSS (or `column`, e.g. seconds) of some commands' columns, with the largest
    anonymous peak in brackets where measured."""
    main = [r.get(f"{c}_{column or 'rss_gb'}") for c in commands]
    anon = [r.get(f"{c}_anon_gb") for c in commands]
    most = max((v for v in main if v is not None), default=None)
    most_anon = max((v for v in anon if v is not None), default=None)
    return _cell(most) + ("" if most_anon is None else f" ({most_anon:g})")


def at_fixed_nprobe(r: dict) -> bool:
    """Whether `mine` probed what the series does at every N: its fixed nprobe, or each index's tuned one."""
    if r.get("tuned"):
        return not r.get("mine_nprobe")
    return r.get("mine_nprobe", r["nprobe"]) == r["nprobe"]


# --------------------------------------------------------------------------------------------- list-scan

OLD_BLOCK_ROWS = 65_536  # mine's fixed query block before 2026-11-22


def list_scan_parser(sub) -> None:
    parser = sub.add_parser(
        "list-scan",
        help="the list scan's time a scanned vector by list count and query block",
        description="""What does bitextmine's list-by-list IVF scan cost a scanned vector?

`search.ivf_scan.scan_lists` scores each probed list once for all the queries of a block that probe it,
with one matrix product. Here every list holds exactly --list-size random vectors and every query
probes --nprobe distinct lists drawn uniformly, so the vectors a query scans do not depend on the list
count and neither should the time, if the scan were linear. The probe search is not timed. For each list
count the same queries are scanned in blocks of 65,536 (mine's block before 2026-11-22) and in blocks of
`query_block_rows` (mine's block now), best of --repeats runs.

Needs nothing but memory: ~4.6 GB of lists at 8,197 lists of 366.""",
        **PARSER_HELP,
    )
    parser.add_argument("--nlists", default="820,2732,8197", help="list counts (300k, 1M, 3M rows of 366)")
    parser.add_argument("--list-size", type=int, default=366)
    parser.add_argument("--nprobe", type=int, default=NPROBE)
    parser.add_argument("--repeats", type=int, default=3)
    parser.set_defaults(run=run_list_scan)


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
        repeated = (np.diff(np.sort(probes, axis=1), axis=1) == 0).any(axis=1)
        if not repeated.any():
            return probes
        probes[repeated] = rng.integers(nlist, size=(int(repeated.sum()), nprobe))


def time_scan(ivf, queries: np.ndarray, probes: np.ndarray, block: int, repeats: int) -> float:
    """Best seconds over `repeats` runs to scan all the queries, `block` at a time."""
    from bitextmine.search.ivf_scan import scan_lists

    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for first in range(0, len(queries), block):
            scan_lists(ivf, queries[first : first + block], probes[first : first + block], K)
        best = min(best, time.perf_counter() - started)
    return best


def run_list_scan(args: argparse.Namespace) -> None:
    from bitextmine.search.ivf_scan import query_block_rows

    new = []
    for nlist in map(int, args.nlists.split(",")):
        ivf = balanced_ivf(nlist, args.list_size, seed=nlist)
        mine_block = query_block_rows(nlist, args.nprobe)
        count = max(mine_block, OLD_BLOCK_ROWS)
        rng = np.random.default_rng(1)
        queries = rng.standard_normal((count, DIM), dtype=np.float32)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        probes = uniform_probes(count, nlist, args.nprobe, seed=2)
        scanned = count * args.nprobe * args.list_size
        for block in sorted({OLD_BLOCK_ROWS, mine_block}):
            seconds = time_scan(ivf, queries, probes, block, args.repeats)
            row = {
                "nlist": nlist,
                "list_size": args.list_size,
                "nprobe": args.nprobe,
                "block_rows": block,
                "mine_block": block == mine_block,
                "queries_a_list": round(block * args.nprobe / nlist, 1),
                "us_a_query": round(seconds / count * 1e6, 2),
                "ns_a_vector": round(seconds / scanned * 1e9, 2),
                "repeats": args.repeats,
            }
            print(row, flush=True)
            new.append(stamped(row))
    settings = ("nlist", "list_size", "nprobe", "block_rows")
    write("list-scan", merged("list-scan", new, lambda a, b: all(a[s] == b[s] for s in settings)))


def report_list_scan(rows: list[dict]) -> str:
    rows = sorted(rows, key=lambda r: (r["nlist"], r["block_rows"]))
    mine = [r for r in rows if r["mine_block"]]
    old = {r["nlist"]: r for r in rows if r["block_rows"] == OLD_BLOCK_ROWS}
    slower = [
        (old[r["nlist"]]["ns_a_vector"] / r["ns_a_vector"], r["nlist"])
        for r in mine
        if old.get(r["nlist"]) not in (None, r)
    ]
    ratio, at = max(slower, default=(None, None))
    ns = [r["ns_a_vector"] for r in mine]
    lines = [
        "# bench_list_scan: bitextmine's IVF-Flat list scan, time a scanned vector",
        "",
        produced_by(f"{SCRIPT} list-scan", "bench-ivf-list-scan"),
        "",
        "## Does the scan's cost a vector stay flat as the list count grows, and what block does it need?",
        "",
        f"With `mine`'s block the scan cost {min(ns):.2f} to {max(ns):.2f} ns a scanned vector from "
        f"{mine[0]['nlist']:,} to {mine[-1]['nlist']:,} lists"
        + (
            f"; blocks of {OLD_BLOCK_ROWS:,} took up to {ratio:.2f}x as long (at {at:,} lists)."
            if ratio
            else "."
        ),
        "",
        *table(
            f"nlist | block rows | queries a probed list | µs a query | ns a scanned vector "
            f"| vs blocks of {OLD_BLOCK_ROWS:,}",
            "rrrrrr",
            (
                f"{r['nlist']:,} | {r['block_rows']:,}{' (mine)' if r['mine_block'] else ''} "
                f"| {r['queries_a_list']:,.0f} | {r['us_a_query']:.1f} | {r['ns_a_vector']:.2f} "
                f"| {_faster(old.get(r['nlist']), r)}"
                for r in rows
            ),
        ),
        "",
        f"Lists of exactly {distinct(rows, 'list_size')} random 384-d vectors; each query probes "
        f"{distinct(rows, 'nprobe')} distinct lists drawn uniformly. Probe search not timed. Best of "
        f"{distinct(rows, 'repeats')} runs over the same queries (at least 65,536 and one block of mine's "
        "size); (mine): `search.ivf_scan.query_block_rows(nlist, nprobe)`.",
    ]
    return "\n".join([*lines, "", *runs_table(rows)]) + "\n"


def _faster(old: dict | None, r: dict) -> str:
    return "-" if old is None or old is r else f"{old['ns_a_vector'] / r['ns_a_vector']:.2f}x faster"


# ----------------------------------------------------------------------------------------------- balance

BALANCE_QUERIES = 20_000
# (N, distinct sentences): equal copies at different list counts, and different copies at one N
DEFAULT_RUNS = "72400:72400,300000:72400,300000:21700,1000000:72400,73200:1785,300000:7300,1000000:24400"


def balance_parser(sub) -> None:
    parser = sub.add_parser(
        "balance",
        help="IVF list balance by copies a sentence and by list count",
        description="""Why does a query scan more vectors as N grows: copies a sentence, or list count?

scale reaches N vectors a side by repeating a fixed set of real embeddings with small noise, so a larger
N also means more copies of each sentence. This separates the two: it trains `IVF{N / list size}_HNSW32,
Flat` (inner product, the library's `training_rows` sample) on noisy copies of a random subset of the
--bases de embeddings, for several (N, distinct sentences) pairs, and reports FAISS's imbalance factor of
the lists, how many vectors en queries (noisy copies of all en embeddings) scan at nprobe 8 relative to
equal lists, and the time of bitextmine's search (probe search and list scan) of one block of such
queries of `mine`'s size.

Needs the --bases workspace's embeddings, at least as many de sentences as the runs' distinct counts:
bitextmine-work/bench/bases (`make bench-ivf-bases`) by default.""",
        **PARSER_HELP,
    )
    parser.add_argument(
        "--bases", type=Path, default=BASES, help="workspace whose embeddings are copied [%(default)s]"
    )
    parser.add_argument("--runs", default=DEFAULT_RUNS, help="N:distinct pairs, comma-separated")
    parser.add_argument("--list-size", type=int, default=366)
    parser.add_argument("--sigma", type=float, default=SIGMA)
    parser.set_defaults(run=run_balance)


def run_balance(args: argparse.Namespace) -> None:
    require_embeddings(args.bases)
    de, en = base_vectors(args.bases, "de"), base_vectors(args.bases, "en")
    new = []
    for run in args.runs.split(","):
        n, distinct = map(int, run.split(":"))
        new.append(stamped(measure_balance(n, min(distinct, len(de)), de, en, args)))
    settings = ("n", "distinct", "list_size", "sigma", "de_count")
    write("balance", merged("balance", new, lambda a, b: all(a.get(s) == b.get(s) for s in settings)))


def measure_balance(n: int, distinct: int, de: np.ndarray, en: np.ndarray, args: argparse.Namespace) -> dict:
    import faiss

    from bitextmine.search.ivf_scan import list_sizes, query_block_rows, search
    from bitextmine.search.training import training_rows

    rng = np.random.default_rng(n + distinct)
    subset = de[np.sort(rng.choice(len(de), distinct, replace=False))]
    base = noisy_copies(subset, n, args.sigma, rng)
    queries = noisy_copies(en, BALANCE_QUERIES, args.sigma, rng)
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
    search(index, block[:1000], K)  # warm-up
    search_s, _ = elapsed(partial(search, index, block, K))
    row = {
        "n": n,
        "distinct": distinct,
        "copies": round(n / distinct, 1),
        "nlist": ivf.nlist,
        "factory": factory,
        "train_rows": len(sample),
        "imbalance": round(ivf.invlists.imbalance_factor(), 3),
        "en_scan": round(en_scan / (NPROBE * n / ivf.nlist), 3),
        "search_us": round(search_s / len(block) * 1e6, 1),
        "ns_a_scanned": round(search_s / len(block) / en_scan * 1e9, 2),
        "seconds": round(time.perf_counter() - started, 1),
        "list_size": args.list_size,
        "sigma": args.sigma,
        "nprobe": NPROBE,
        "queries": BALANCE_QUERIES,
        "de_count": len(de),
        "en_count": len(en),
    }
    print(row, flush=True)
    return row


def report_balance(rows: list[dict]) -> str:
    header = (
        "N | nlist | distinct sentences | copies a sentence | imbalance | en scan | search µs a query "
        "| ns a scanned vector"
    )

    def cells(r: dict) -> str:
        return (
            f"{r['n']:,} | {r['nlist']:,} | {r['distinct']:,} | {r['copies']:.1f} | {r['imbalance']:.3f} "
            f"| {r['en_scan']:.3f}x | {r['search_us']:.1f} | {r['ns_a_scanned']:.2f}"
        )

    by_n = [sorted(g, key=lambda r: r["copies"]) for g in _groups(rows, lambda r: r["n"])]
    by_copies = [sorted(g, key=lambda r: r["nlist"]) for g in _groups(rows, lambda r: round(r["copies"]))]
    copies_text = "; ".join(
        f"at {g[0]['n']:,} vectors ({g[0]['nlist']:,} lists) "
        + ", ".join(f"{r['en_scan']:.2f}x at {r['copies']:g} copies" for r in g)
        for g in by_n
    )
    lists_text = "; ".join(
        f"at ~{round(g[0]['copies'])} copies "
        + ", ".join(f"{r['en_scan']:.2f}x at {r['nlist']:,} lists" for r in g)
        for g in by_copies
    )
    lines = [
        "# bench_ivf_balance: IVF list balance by copies a sentence and by list count",
        "",
        produced_by(f"{SCRIPT} balance", "bench-ivf-balance"),
        "",
        f"en scan: the vectors en queries scan at nprobe {distinct(rows, 'nprobe')} over those of equal "
        "lists (nprobe x N / nlist). Base: noisy copies of a random subset of a workspace's de embeddings "
        f"({distinct(rows, 'de_count')} sentences); index "
        f"`IVF(N / {distinct(rows, 'list_size')})_HNSW32,Flat` trained on the library's sample for N. "
        "Search: bitextmine's `search` (probe search and list scan) of one block of `mine`'s size of en "
        "queries, comparable within one run only.",
        "",
    ]
    for question, text, groups in (
        ("At one N, does a query scan more when each sentence has more copies?", copies_text, by_n),
        ("At equal copies, does a query scan more when there are more lists?", lists_text, by_copies),
    ):
        lines += ["", f"## {question}", ""]
        if groups:
            lines += [
                f"en scan {text}.",
                "",
                *table(header, "rrrrrrrr", (cells(r) for g in groups for r in g)),
            ]
        else:
            lines += ["No two rows to compare."]
    return "\n".join([*lines, "", *runs_table(rows)]) + "\n"


def _groups(rows: list[dict], key: Callable[[dict], object]) -> list[list[dict]]:
    """`rows` grouped by `key`, in the order of their first rows; only groups of two or more."""
    groups: dict[object, list[dict]] = {}
    for r in rows:
        groups.setdefault(key(r), []).append(r)
    return [g for g in groups.values() if len(g) > 1]


# ------------------------------------------------------------------------------------------- scan-budget

NOMINAL_NPROBE = NPROBE
TIMED = ((8, 0.0), (8, 1.25), (16, 1.25))  # (nprobe, cap as a multiple of the nominal scan; 0: none)


def scan_budget_parser(sub) -> None:
    parser = sub.add_parser(
        "scan-budget",
        help="recall against vectors scanned, by nprobe and by a cap; search time a query by N",
        description="""What recall does a cap on the scan (`mine --max-codes`) cost, and how does a query's
search time grow with N?

k-means leaves IVF lists of unequal length, and queries of the other language fall more often into the
long ones, so at a fixed nprobe the vectors a query scans grow with N (scale, balance). `mine
--max-codes C` caps them at C a query. In each kept workspace, --queries en queries search the de index
as mine's forward direction does, with bitextmine's search, and their top 4 is compared with exact
search: without a cap at several nprobe, and at --cap-nprobe with caps of multiples of the nominal scan
(nprobe 8 x N / nlist). A capped row's recall is compared with the recall the uncapped rows reach at
the same mean scan (interpolated between their nprobe).

Then a few settings are timed with every workspace's index and one en block of `mine`'s size loaded
together, sizes and settings taking turns (best of --repeats), so that a change in the VM's speed
touches every size alike: the probe search alone, the whole search, and its CPU time.

Needs the workspaces `scale --list-size 366 --keep` leaves (one a size), or --work DIR...: run
`make bench-ivf-scale` first (hours). The timing holds every index at once (~7 GB at 3M).""",
        **PARSER_HELP,
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
    parser.set_defaults(run=run_scan_budget)


def run_scan_budget(args: argparse.Namespace) -> None:
    works = kept_workspaces(args.work, args.scratch, args.list_size)
    new = [stamped(row) for work in works for row in measure_scan_budget(work, args)]
    new += [stamped(row) for row in time_interleaved(works, args.repeats)]
    # a run replaces every row of the sizes it measured: the timing rows are only comparable within one run
    sizes = {r["n"] for r in new}
    write("scan-budget", merged("scan-budget", new, lambda a, b: a["n"] in sizes))


def timed_settings(ivf) -> list[tuple[int, int]]:
    """The (nprobe, max_codes) of TIMED for `ivf`'s nominal scan."""
    nominal = NOMINAL_NPROBE * ivf.ntotal / ivf.nlist
    return [(nprobe, round(factor * nominal)) for nprobe, factor in TIMED]


def measure_scan_budget(work: Path, args: argparse.Namespace) -> list[dict]:
    from bitextmine.search.ivf_scan import list_sizes, scanned_rows, search

    index, ivf = de_index(work)
    en = workspace_vectors(work, "en")
    queries = en_queries(work, np.sort(np.random.default_rng(1).choice(len(en), args.queries, replace=False)))
    kth = exact_kth(workspace_vectors(work, "de"), queries)
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
            "quantizer": quantizer_name(ivf),
            "queries": args.queries,
        }
        print(row, flush=True)
        results.append(row)
    return results


def time_interleaved(works: list[Path], repeats: int) -> list[dict]:
    """Best µs a query of the probe search and of bitextmine's whole search (wall, CPU) at each timed
    setting of each workspace, with every workspace's index and query block loaded at once and the sizes
    and settings taking turns."""
    from bitextmine.search.ivf_scan import query_block_rows, search

    loaded = []
    for work in works:
        index, ivf = de_index(work)
        block = en_queries(work, np.arange(min(ivf.ntotal, query_block_rows(ivf.nlist, NOMINAL_NPROBE))))
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
                row |= {"nprobe": nprobe, "max_codes": max_codes, "repeats": repeats}
                row |= {"block": len(block), "probe_us": us[0], "search_us": us[1], "search_cpu_us": us[2]}
                kept = best.setdefault((ivf.ntotal, nprobe, max_codes), row)
                for field in ("probe_us", "search_us", "search_cpu_us"):
                    kept[field] = min(kept[field], row[field])
    for row in best.values():
        print(row, flush=True)
    return list(best.values())


def recall_at_same_scan(row: dict, rows: list[dict]) -> float:
    """Recall of the uncapped rows of the same N interpolated at `row`'s mean scan."""
    curve = sorted(
        (r["scanned"], r["recall_at_4"]) for r in rows if r["n"] == row["n"] and not r["max_codes"]
    )
    return float(np.interp(row["scanned"], [s for s, _ in curve], [r for _, r in curve]))


def _cap(row: dict) -> str:
    return f"{row['max_codes']:,}" if row["max_codes"] else "-"


def report_scan_budget(rows: list[dict]) -> str:
    recall = [r for r in rows if "recall_at_4" in r]
    timing = [r for r in rows if "probe_us" in r]
    difference = {id(r): r["recall_at_4"] - recall_at_same_scan(r, recall) for r in recall if r["max_codes"]}
    low, high = min(difference.values(), default=0.0), max(difference.values(), default=0.0)
    verdict = "about what fewer probes cost" if max(-low, high) <= 0.02 else "more or less than fewer probes"

    def same_scan(r: dict) -> str:
        d = difference.get(id(r))
        return "- | -" if d is None else f"{r['recall_at_4'] - d:.4f} | {d:+.4f}"

    lines = [
        "# bench_scan_budget: recall@4 against the vectors a query scans, and search time a query by N",
        "",
        produced_by(f"{SCRIPT} scan-budget", "bench-ivf-scan-budget"),
        "",
        f"Workspaces: scale's kept `--list-size 366` series ({distinct(recall, 'quantizer')} coarse "
        f"quantizer). {distinct(recall, 'queries')} en queries search the de index with bitextmine's search; "
        "recall@4 is the share of their exact top 4 found. Nominal scan: nprobe 8 x N / nlist, what equal "
        "lists would give.",
        "",
        "## What recall does a cap on the scan cost, against fewer probes?",
        "",
        f"A capped search's recall@4 was {low:+.4f} to {high:+.4f} off what uncapped searches reach at the "
        f"same mean scan by probing fewer lists: a cap costs {verdict}.",
        "",
        *table(
            "N | nlist | nprobe | cap (vectors) | scanned a query | x nominal | recall@4 "
            "| uncapped at that scan | difference",
            "rrrrrrrrr",
            (
                f"{r['n']:,} | {r['nlist']:,} | {r['nprobe']} | {_cap(r)} | {r['scanned']:,.0f} "
                f"| {r['scanned'] / r['nominal']:.2f}x | {r['recall_at_4']:.4f} | {same_scan(r)}"
                for r in recall
            ),
        ),
    ]
    if timing:
        lines += [
            "",
            "## How does a query's search time grow with N?",
            "",
            f"{_growth_text(timing)}.",
            "",
            *table(
                "N | nlist | quantizer | nprobe | cap (vectors) | block | probe search µs | list scan µs "
                "| search µs (CPU µs)",
                "rrlrrrrrr",
                (
                    f"{r['n']:,} | {r['nlist']:,} | {r['quantizer']} | {r['nprobe']} | {_cap(r)} "
                    f"| {r['block']:,} | {r['probe_us']} | {r['search_us'] - r['probe_us']:.1f} "
                    f"| {r['search_us']} ({r['search_cpu_us']})"
                    for r in timing
                ),
            ),
            "",
            "All sizes loaded at once and taking turns; each column is its own best of the repeats. List "
            "scan: whole search minus probe search; CPU µs: over the process's threads, which time stolen "
            "by the hypervisor does not inflate. Block: the queries searched at once (`mine`'s block).",
        ]
    return "\n".join([*lines, "", *runs_table(rows)]) + "\n"


def _growth_text(rows: list[dict]) -> str:
    """How the time of searching all N queries grew with N at each timed setting, in one sentence."""
    parts = []
    for nprobe, factor in TIMED:
        series = [r for r in rows if r["nprobe"] == nprobe and bool(r["max_codes"]) == bool(factor)]
        if len(series) > 1:
            setting = f"nprobe {nprobe}" + (f" capped at {factor}x the nominal scan" if factor else "")
            probe = ", ".join(f"{b['probe_us'] - a['probe_us']:+.1f}" for a, b in itertools.pairwise(series))
            growth = steps_text(series, "search_us", per_query=True)
            parts.append(f"{growth} at {setting} ({probe} µs a query in the probe search)")
    return "Searching all N queries grew as " + "; ".join(parts) if parts else "One size timed"


# ----------------------------------------------------------------------------------------- coarse-search


def coarse_search_parser(sub) -> None:
    parser = sub.add_parser(
        "coarse-search",
        help="finding a query's nearest lists: HNSW32 by efSearch against a flat search",
        description="""HNSW or flat search for a query's nearest IVF lists?

In each kept workspace, one block of en queries (the first --queries rows) looks for its nprobe nearest
centroids of the de index: through an HNSW32 graph over the centroids at several efSearch (FAISS's
default is 16) and exactly with `faiss.knn` over all centroids (BLAS). The graph is the index's own
quantizer where it has one, else one built here over its centroids as `IVF{n}_HNSW32` builds it.
Columns: µs a query, the share of the exact nearest centroids found (a missed one costs recall), and
the centroids a query is compared with (FAISS's hnsw_stats).

Needs the workspaces `scale --list-size 366 --keep` leaves (one a size), or --work DIR...: run
`make bench-ivf-scale` first (hours).""",
        **PARSER_HELP,
    )
    add_kept_workspaces(parser)
    parser.add_argument("--queries", type=int, default=65_536)
    parser.add_argument("--ef", type=lambda s: [int(v) for v in s.split(",")], default="8,16,32,64")
    parser.set_defaults(run=run_coarse_search)


def run_coarse_search(args: argparse.Namespace) -> None:
    new = [
        stamped(r)
        for work in kept_workspaces(args.work, args.scratch, args.list_size)
        for r in measure_coarse(work, args)
    ]
    write(
        "coarse-search",
        merged("coarse-search", new, lambda a, b: (a["n"], a["search"]) == (b["n"], b["search"])),
    )


def hnsw_timed(search, queries: np.ndarray) -> tuple[float, np.ndarray]:
    """(µs a query, ids) of `search(queries)` after a warm-up on the first 1,000, HNSW statistics reset."""
    import faiss

    search(queries[:1000])
    faiss.cvar.hnsw_stats.reset()
    started = time.perf_counter()
    ids = search(queries)
    return (time.perf_counter() - started) / len(queries) * 1e6, ids


def measure_coarse(work: Path, args: argparse.Namespace) -> list[dict]:
    import faiss

    _index, ivf = de_index(work)  # the index owns the IVF: keep it alive
    quantizer = faiss.downcast_index(ivf.quantizer)
    own = isinstance(quantizer, faiss.IndexHNSW)
    centroids = (quantizer.storage if own else quantizer).reconstruct_n(0, ivf.nlist)
    if not own:  # `--list-size` takes a flat quantizer up to 4,096 lists: the graph IVF{n}_HNSW32 would have
        quantizer = faiss.IndexHNSWFlat(centroids.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
        quantizer.add(centroids)
    queries = en_queries(work, np.arange(min(args.queries, ivf.ntotal)))
    common = {"n": ivf.ntotal, "nlist": ivf.nlist, "queries": len(queries), "nprobe": NPROBE}

    def flat(q: np.ndarray) -> np.ndarray:
        return faiss.knn(q, centroids, NPROBE, metric=faiss.METRIC_INNER_PRODUCT)[1]

    flat_us, exact = hnsw_timed(flat, queries)
    rows = [{**common, "search": "flat", "us": round(flat_us, 1), "found": 1.0, "distances": ivf.nlist}]
    for ef in args.ef:
        quantizer.hnsw.efSearch = ef
        us, ids = hnsw_timed(lambda q: quantizer.search(q, NPROBE)[1], queries)
        found = np.mean([len(np.intersect1d(a, b)) for a, b in zip(ids, exact, strict=True)]) / NPROBE
        rows.append(
            {
                **common,
                "search": f"HNSW32, efSearch {ef}",
                "us": round(us, 1),
                "found": round(float(found), 3),
                "distances": round(faiss.cvar.hnsw_stats.ndis / len(queries)),  # the timed search only
                "graph": "the index's quantizer" if own else "built over the centroids",
            }
        )
    for row in rows:
        print(row, flush=True)
    return rows


def report_coarse_search(rows: list[dict]) -> str:
    flat = {r["n"]: r for r in rows if r["search"] == "flat"}
    default = [r for r in rows if r["search"] == "HNSW32, efSearch 16" and r["n"] in flat]
    faster = ", ".join(f"{r['nlist']:,}" for r in default if flat[r["n"]]["us"] < r["us"]) or "no"
    slower = ", ".join(f"{r['nlist']:,}" for r in default if flat[r["n"]]["us"] >= r["us"]) or "no"
    found = ", ".join(f"{r['found']:.3f}" for r in default)
    nlists = ", ".join(f"{r['nlist']:,}" for r in default)
    lines = [
        "# bench_coarse_search: finding a query's nearest IVF lists, HNSW against flat",
        "",
        produced_by(f"{SCRIPT} coarse-search", "bench-ivf-coarse-search"),
        "",
        "## HNSW or flat search for a query's nearest lists?",
        "",
        f"The flat search was faster than HNSW32 at FAISS's default efSearch 16 at {faster} lists and slower "
        f"at {slower} lists; at efSearch 16 it found {found} of the exact nearest lists at {nlists} lists.",
        "",
        *table(
            "N | nlist | search | µs a query | found | distances a query | ns a distance",
            "rrlrrrr",
            (
                f"{r['n']:,} | {r['nlist']:,} | {r['search']} | {r['us']} | {r['found']:.3f} "
                f"| {r['distances']:,} | {r['us'] / r['distances'] * 1e3:.1f}"
                for r in rows
            ),
        ),
        "",
        "Workspaces: scale's kept `--list-size 366` series (nlist = N / 366); "
        f"{distinct(rows, 'queries')} en queries (one block) look for their {distinct(rows, 'nprobe')} "
        "nearest centroids of the de index. "
        "Found: share of the exact nearest centroids returned. Distances: centroids a query is compared "
        "with (HNSW: FAISS's hnsw_stats.ndis over the timed search).",
    ]
    return "\n".join([*lines, "", *runs_table(rows)]) + "\n"


# ------------------------------------------------------------------------------------------------ report

STUDIES: dict[str, tuple[str, Callable[[list[dict]], str]]] = {
    "scale": ("bench_scale", report_scale),
    "list-scan": ("bench_list_scan", report_list_scan),
    "balance": ("bench_ivf_balance", report_balance),
    "scan-budget": ("bench_scan_budget", report_scan_budget),
    "coarse-search": ("bench_coarse_search", report_coarse_search),
}


def report_parser(sub) -> None:
    parser = sub.add_parser(
        "report",
        help="rewrite the .md reports from the JSON, measuring nothing",
        description="Rewrite results/STUDY.md from results/STUDY.json for the named studies [all].",
    )
    parser.add_argument("studies", nargs="*", metavar="STUDY", help=f"{', '.join(STUDIES)} [all]")
    parser.set_defaults(run=run_report)


def run_report(args: argparse.Namespace) -> None:
    unknown = [study for study in args.studies if study not in STUDIES]
    if unknown:
        sys.exit(f"bench_ivf report: no study {', '.join(unknown)} (studies: {', '.join(STUDIES)})")
    for study in args.studies or STUDIES:
        path = results_path(study)
        if path.is_file() or args.studies:
            path.with_suffix(".md").write_text(STUDIES[study][1](load_rows(path)))
            print(f"wrote {path.with_suffix('.md')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, **PARSER_HELP)
    parser.add_argument(
        "--results", type=Path, default=RESULTS, help="folder of the JSON and .md [%(default)s]"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")
    for add in (
        scale_parser,
        list_scan_parser,
        balance_parser,
        scan_budget_parser,
        coarse_search_parser,
        report_parser,
    ):
        add(sub)
    args = parser.parse_args()
    OUT[0] = args.results
    args.run(args)


if __name__ == "__main__":
    main()
