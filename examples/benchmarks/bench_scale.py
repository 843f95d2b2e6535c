"""Mining at scale on this machine: wall time, peak RSS and recall of `bitextmine index` + `mine` at N x N.

For each N, a workspace gets N source and N target vectors (384-d float16 shards): the demo's real e5
embeddings of the de and en BUCC-format dev sentences, repeated with gaussian noise (sigma, then
re-normalised) so that every copy is a distinct vector near a real one, and a text shard per 100k rows
("de 123") so `mine` can write its output. Then, each in its own process (peak RSS from wait4):
`bitextmine index` for both languages with the library's IVF-Flat list count for N and a fixed nprobe,
and `bitextmine mine de en --threshold T`. Recall@4 compares the neighbour lists `mine` saved with exact
search for a sample of source queries. With `--list-size L` the indexes are built with
`bitextmine index --list-size L` (N / L lists; HNSW coarse quantizer above 4,096) instead: a series of
its own, to show the time at a fixed list length. `--bases WORK` copies the de and en embeddings of another
workspace instead of the demo's 8,400 a side (more distinct sentences: clusters that do not thin out into
the lists as N grows); its rows are a series of their own too, as are those of `--max-codes C` (`mine
--max-codes C`: a query scans at most C vectors of its probed lists).

Where mining at the index's nprobe would take hours here, `--mine-nprobe` mines with fewer probes: peak
RSS is the same (same index, same neighbour lists), and the row also shows the search time at the index's
nprobe estimated from the index's own recall probe (its ms per 1,000 other-language queries x 2N).

Usage: python examples/benchmarks/bench_scale.py [--sizes 100000,300000,1000000,3000000] [--nprobe 8]
       [--factory IVF8192_HNSW32,Flat | --list-size 366] [--bases WORK] [--max-codes 3660] [--mine-nprobe 1]
       [--keep] [--reuse]
       (results of other sizes and series in --out are kept)
Needs the demo workspace's embeddings (`make demo`).
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np
from benchlib import REPO, base_vectors, cpu_model, noisy_copies

RESULTS = Path(__file__).with_name("results")

DEMO = REPO / "bitextmine-work" / "demo"
DEMO_BASES = 8_400  # sentences a side in the demo workspace, the default --bases
SHARD_ROWS = 100_000
RECALL_QUERIES = 1000
SPEED_QUERIES = 32_768  # queries timed with FAISS's search and the library's
K = 4


def base_count(root: Path, lang: str) -> int:
    from bitextmine.store import EmbeddingStore

    return len(EmbeddingStore(root / "emb" / lang, lang).vectors())


def write_language(
    work: Path, lang: str, base: np.ndarray, n: int, args: argparse.Namespace, seed: int
) -> None:
    """N noisy copies of `base` rows (from the workspace `args.bases`) as embedding shards, and
    matching text shards."""
    from bitextmine.corpus import CorpusCounts, CorpusManifest, Row, SourceInfo, write_text_shards
    from bitextmine.fsutil import write_json
    from bitextmine.store import EmbeddingShard, EmbeddingStore, ModelIdentity

    demo = EmbeddingStore(args.bases / "emb" / lang, lang).model
    store = EmbeddingStore(work / "emb" / lang, lang)
    store.bind(ModelIdentity("bench-scale", demo.fingerprint, base.shape[1], demo.settings, demo.precision))
    rng = np.random.default_rng(seed)
    rows = (Row(0, i + 1, f"{lang} {i}") for i in range(n))
    text_shards = write_text_shards(rows, work / "corpora" / lang, SHARD_ROWS)
    for shard in text_shards:
        noisy = noisy_copies(base, shard.rows, args.sigma, rng)
        name = Path(shard.name).stem
        store.write_shard(EmbeddingShard(name, shard.rows, shard.sha256, 0, 0), noisy)
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


def recall_at_k(work: Path, queries: int, seed: int) -> float:
    """Share of the exact top-K target rows of sampled source rows found in mine's neighbour lists."""
    import faiss

    from bitextmine.store import EmbeddingStore

    src = EmbeddingStore(work / "emb" / "de", "de").vectors()
    tgt = EmbeddingStore(work / "emb" / "en", "en").vectors()
    rows = np.sort(np.random.default_rng(seed).choice(len(src), size=queries, replace=False))
    x = src.take(rows)
    heap = faiss.ResultHeap(len(x), K, keep_max=True)
    for start, block in tgt.blocks(200_000):
        sims, ids = faiss.knn(x, block, K, metric=faiss.METRIC_INNER_PRODUCT)
        heap.add_result(sims, ids + start)
    heap.finalize()
    kth = heap.D[:, -1]
    found = np.concatenate([np.load(p)["cos"] for p in sorted(work.glob("mined/.neighbours/*/fwd-*.npy"))])
    hits = np.nan_to_num(found[rows], nan=-np.inf) >= kth[:, None] - 1e-6
    return float(hits.mean())


def search_ms(work: Path, nprobe: int | None, max_codes: int, n: int) -> dict:
    """ms per query of FAISS's own search (SPEED_QUERIES queries) and of the library's `search` (list by
    list for IVF-Flat) on one block of mine's size, one after the other in this process: en queries
    (the first rows) against the de index, as mine does; and the vectors a query scans, on average."""
    import faiss

    from bitextmine.index_search import list_sizes, query_block_rows, scanned_rows, search
    from bitextmine.store import EmbeddingStore

    index = faiss.read_index(str(work / "index" / "de.faiss"))
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None and nprobe is not None:
        ivf.nprobe = nprobe
    if ivf is not None:
        ivf.max_codes = max_codes
    block = min(n, query_block_rows(ivf and ivf.nlist, ivf and ivf.nprobe))
    x = EmbeddingStore(work / "emb" / "en", "en").vectors().take(np.arange(block))
    times = {"search_block_rows": block}
    for name, run, queries in (
        ("faiss", index.search, x[:SPEED_QUERIES]),
        ("library", lambda q, k: search(index, q, k), x),
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


CLI = [sys.executable, "-m", "bitextmine"]


def run_size(n: int, args: argparse.Namespace, bases: dict[str, np.ndarray], earlier: dict | None) -> dict:
    from bitextmine.index import choose_factory

    work = workspace_dir(args, n)
    if args.list_size is not None:
        factory = choose_factory(n, 384, args.list_size)
    else:
        factory = "Flat" if n <= 200_000 else args.factory or choose_factory(n, 384)
    ivf = "IVF" in factory
    reused = args.reuse and reusable(work, factory)
    if reused:
        print(f"  N={n:,}: reusing the vectors and indexes in {work}", flush=True)
        result = reused_index_columns(work, earlier)
        shutil.rmtree(work / "mined", ignore_errors=True)  # with its saved lists, mine would search nothing
    else:
        result = prepare_and_index(work, n, factory, args, bases)
    mine_nprobe = (args.mine_nprobe or args.nprobe) if ivf else None
    seconds, rss, anon, stolen, others = timed(mine_command(work, args, mine_nprobe))
    stats = json.loads((work / "mined" / "de-en.stats.json").read_text())
    infos = [json.loads((work / "index" / f"{lang}.json").read_text()) for lang in ("de", "en")]
    result.update(
        n=n,
        factory=factory,
        list_size=args.list_size,
        bases=args.base_count,
        max_codes=args.max_codes,
        mine_s=round(seconds, 1),
        mine_rss_gb=round(rss, 2),
        mine_anon_gb=round(anon, 2),
        mine_stolen=round(stolen, 3),
        mine_others=round(others, 3),
        s_per_million_queries=round(seconds / (2 * n) * 1e6, 1),
        kept=stats["counts"]["kept"],
        recall_at_4=round(recall_at_k(work, min(RECALL_QUERIES, n), seed=1), 4),
        **search_ms(work, mine_nprobe, args.max_codes, n),
        nprobe=args.nprobe if ivf else None,
        mine_nprobe=mine_nprobe,
        imbalance=max((v for v in (index_imbalance(work, i) for i in infos) if v is not None), default=None),
        train_rows=infos[0]["train_rows"],
        training=training_rule(),
        probe_ms_per_1000=round(sum(i["search_ms_per_1000"] for i in infos) / 2, 1),
        reused_indexes=reused,
        note=args.note,
        **selection_columns(work, args, mine_nprobe),
    )
    print(
        f"  N={n:,} mine: {seconds:.1f} s, peak {rss:.2f} GB, recall@4 {result['recall_at_4']}, "
        f"{stolen:.1%} stolen, {others:.1%} to other processes",
        flush=True,
    )
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return result


def training_rule() -> str:
    """How the library sizes an IVF index's training sample (rows keep it: the rule changed once)."""
    from bitextmine.index import TRAIN_PER_LIST

    return f"{TRAIN_PER_LIST} a list"


def workspace_dir(args: argparse.Namespace, n: int) -> Path:
    name = f"n{n}" + ("" if args.list_size is None else f"-list{args.list_size}")
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


def index_imbalance(work: Path, info: dict) -> float | None:
    """The list imbalance `index` stored, or computed here for indexes built before it was stored."""
    import faiss

    from bitextmine.index import list_imbalance

    if "IVF" not in info["factory"] or info.get("imbalance") is not None:
        return info.get("imbalance")
    return list_imbalance(faiss.read_index(str(work / "index" / f"{info['lang']}.faiss")))


def reusable(work: Path, factory: str) -> bool:
    """A kept workspace whose two indexes were completed with `factory`."""
    paths = [work / "index" / f"{lang}.json" for lang in ("de", "en")]
    return all(p.is_file() and json.loads(p.read_text())["factory"] == factory for p in paths)


def prepare_and_index(work: Path, n: int, factory: str, args: argparse.Namespace, bases: dict) -> dict:
    """Fresh vectors for both languages, then `bitextmine index` for each in its own timed process."""
    shutil.rmtree(work, ignore_errors=True)
    started = time.perf_counter()
    for seed, lang in enumerate(("de", "en")):
        write_language(work, lang, bases[lang], n, args, seed)
    result: dict = {"prepare_s": round(time.perf_counter() - started, 1)}
    for lang, other in (("de", "en"), ("en", "de")):
        command = [*CLI, "index", lang, "-w", str(work), "--queries-from", other]
        command += ["--factory", factory] if args.list_size is None else ["--list-size", str(args.list_size)]
        if "IVF" in factory:
            command += ["--nprobe", str(args.nprobe)]
        seconds, rss, anon, stolen, others = timed(command)
        result[f"index_{lang}_s"], result[f"index_{lang}_rss_gb"] = round(seconds, 1), round(rss, 2)
        result[f"index_{lang}_anon_gb"] = round(anon, 2)
        result[f"index_{lang}_stolen"] = round(stolen, 3)
        result[f"index_{lang}_others"] = round(others, 3)
        print(f"  N={n:,} index {lang}: {seconds:.1f} s, peak {rss:.2f} GB, {stolen:.1%} stolen", flush=True)
    return result


def report(results: list[dict], args: argparse.Namespace) -> str:
    import faiss
    import torch

    cpu = cpu_model()
    lines = [
        "# bench_scale: `index` + `mine` at N x N on this machine",
        "",
        f"{datetime.date.today()} — {cpu}, {os.cpu_count()} cores; python {platform.python_version()}, "
        f"torch {torch.__version__}, faiss {faiss.__version__}. Produced by "
        "`examples/benchmarks/bench_scale.py` (`make bench-scale`).",
        "",
        f"Vectors: the demo's real e5 embeddings (de and en dev, 8,400 each) repeated with gaussian noise "
        f"(sigma {args.sigma}, re-normalised), 384-d float16 shards of {SHARD_ROWS:,}. Index: `Flat` up to "
        f"200k, else the library's IVF-Flat list count for N with a fixed nprobe {args.nprobe}; each command "
        "in its own process, peak RSS from wait4 (in brackets, where measured, the peak of RssAnon "
        "sampled every 0.2 s: the process's own memory without mapped file pages). Recall@4: mine's "
        f"saved neighbour lists vs exact search for {RECALL_QUERIES:,} sampled source sentences. List "
        "imbalance: FAISS's imbalance factor of the inverted lists (the larger of the two indexes; 1 = equal "
        "lists). ns per listed vector: mine's time per query divided by the vectors its probes list if "
        "lists were equal (nprobe x N / nlist; N for Flat); per scanned vector: divided by that times the "
        "imbalance, the mean length of a list picked as the vectors fall (where the imbalance is known; "
        "rows with a cap, `<= C vectors`: by the vectors the search columns' en queries scanned under it). "
        "Training rows a list: the k-means sample of `index` over the list count (the library took 64 a "
        "list before 2026-11-22 and 256 a list since, at least 100k rows in both).",
        "",
        "| N per side | sentences copied | index | list length | training rows a list "
        "| nprobe (index / mine) | list imbalance "
        "| index de s | index peak GB (anon) "
        "| mine s | mine peak GB (anon) | selection s (anon GB) | s per 1M queries "
        "| search ms a query: FAISS / bitextmine | ns per listed vector "
        "| ns per scanned vector | recall@4 | pairs kept |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        probes = "-" if r["nprobe"] is None else f"{r['nprobe']} / {r.get('mine_nprobe', r['nprobe'])}"
        probes += f", <= {r['max_codes']:,} vectors" if r.get("max_codes") else ""
        langs = ("de", "en")
        index_peak = _peak(
            [r[f"index_{lang}_rss_gb"] for lang in langs], [r.get(f"index_{lang}_anon_gb") for lang in langs]
        )
        mine_peak = _peak([r["mine_rss_gb"]], [r.get("mine_anon_gb")])
        lines.append(
            f"| {r['n']:,} | {r.get('bases', DEMO_BASES):,} | {r['factory']} "
            f"| {_cell(_rounded(list_length(r)))} | {_cell(_rounded(train_per_list(r)))} | {probes} "
            f"| {_cell(r.get('imbalance'))} | {r['index_de_s']} "
            f"| {index_peak} | {r['mine_s']} | {mine_peak} | {_selection(r)} | {r['s_per_million_queries']} "
            f"| {_search_speeds(r)} "
            f"| {ns_per_listed_vector(r):.0f} | {_cell(_whole(ns_per_scanned_vector(r)))} "
            f"| {r['recall_at_4']} | {r['kept']:,} |"
        )
    return "\n".join([*lines, "", *notes(results)]) + "\n"


def row_key(r: dict) -> tuple[int, int | None, int, str, int]:
    """N and the series: the list size (None: the library's rule), the sentences copied, the training
    sample rule and mine's cap on the vectors a query scans (0: none)."""
    return (r["n"], r.get("list_size"), r.get("bases", DEMO_BASES), r["training"], r.get("max_codes") or 0)


def row_order(r: dict) -> tuple[bool, int, bool, int, int]:
    """The demo's sentences first, the library's index rule before fixed list sizes, earlier training
    rules first, uncapped scans first, then by N."""
    n, list_size, bases, training, max_codes = row_key(r)
    return (bases != DEMO_BASES, list_size or 0, training != training_rule(), max_codes, n)


def list_length(r: dict) -> float | None:
    """Vectors per inverted list if the lists were equal (None: Flat)."""
    nlist = re.search(r"IVF(\d+)", r["factory"])
    return None if nlist is None else r["n"] / int(nlist.group(1))


def train_per_list(r: dict) -> float | None:
    """Training rows per inverted list (None: Flat)."""
    length = list_length(r)
    return None if length is None else r["train_rows"] * length / r["n"]


def listed_vectors(r: dict) -> float:
    """Vectors one query's probes list when the inverted lists are equal (every vector for Flat)."""
    length = list_length(r)
    return r["n"] if length is None else r.get("mine_nprobe", r["nprobe"]) * length


def ns_per_listed_vector(r: dict) -> float:
    return r["s_per_million_queries"] * 1e3 / listed_vectors(r)


def ns_per_scanned_vector(r: dict) -> float | None:
    """Per vector a query scans when it falls into lists as the vectors do: listed x imbalance; with a
    cap (max_codes), per vector the benchmark's en queries scanned."""
    if r.get("max_codes"):
        return r["s_per_million_queries"] * 1e3 / r["scanned_per_query"]
    return None if r.get("imbalance") is None else ns_per_listed_vector(r) / r["imbalance"]


def _whole(value: float | None) -> int | None:
    return None if value is None else round(value)


def _peak(rss: list[float | None], anon: list[float | None]) -> str:
    """The largest peak RSS of some commands, with the largest anonymous peak where measured."""
    most_rss = max((v for v in rss if v is not None), default=None)
    most_anon = max((v for v in anon if v is not None), default=None)
    return _cell(most_rss) + ("" if most_anon is None else f" ({most_anon:g})")


def _search_speeds(r: dict) -> str:
    if r.get("faiss_search_ms") is None:
        return "-"
    return f"{r['faiss_search_ms']:.3f} / {r['library_search_ms']:.3f}"


def _selection(r: dict) -> str:
    return "-" if r.get("select_s") is None else f"{r['select_s']} ({r['select_anon_gb']:g})"


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def at_fixed_nprobe(r: dict) -> bool:
    return r.get("mine_nprobe", r["nprobe"]) == r["nprobe"]


def notes(results: list[dict]) -> list[str]:
    """Scaling read off the table, the 8 GB target, fewer-probe rows, and the 1B x 1B extrapolation."""
    fixed = [r for r in results if at_fixed_nprobe(r)]
    default = [r for r in fixed if row_key(r)[1:3] == (None, DEMO_BASES)]
    if len(default) < 2:
        return []
    small, large = default[-2], default[-1]
    lines = [_scaling_note(small, large)]
    series = sorted({row_key(r)[1:] for r in fixed if r.get("list_size")})
    lines += [_list_size_note(*key, fixed) for key in series]
    lines.append(_work_note([r for r in fixed if "IVF" in r["factory"]]))
    lines += [_fewer_probes_note(r, large) for r in results if not at_fixed_nprobe(r)]
    lines += [_search_note(results), _peak_note(results), _selection_note(results), _recall_note(large)]
    lines += [_reuse_note(r) for r in results if r.get("reused_indexes") and r["index_de_rss_gb"] is None]
    lines += [f"- {_row_name(r)}: {r['note']}" for r in results if r.get("note")]
    lines += [_contention_note(r) for r in results if "mine_stolen" in r]
    lines.append(_extrapolation_note(large))
    return lines


def _scaling_note(small: dict, large: dict) -> str:
    exponent = np.log(large["mine_s"] / small["mine_s"]) / np.log(large["n"] / small["n"])
    mixed = (
        f"; the two sizes use different indexes ({small['factory']} vs {large['factory']}), so this "
        "exponent mixes configurations."
        if small["factory"] != large["factory"]
        else "."
    )
    return (
        f"- Mining time grew as N^{exponent:.2f} from {small['n']:,} to {large['n']:,} per side at nprobe "
        f"{large['nprobe']} (linear would be N^1; IVF with nlist ~ sqrt(N) at fixed nprobe scans "
        "~N * nprobe / nlist ~ sqrt(N) vectors per query, so N^1.5 is the expected trend for the search; "
        f"Flat below 200k is N^2){mixed}"
    )


def _work_note(ivf: list[dict]) -> str:
    """How the time per query compares with the work it does, over the IVF rows at fixed nprobe."""
    listed = [ns_per_listed_vector(r) for r in ivf]
    scanned = [v for v in (ns_per_scanned_vector(r) for r in ivf) if v is not None]
    return (
        f"- Per vector listed by the probes (nprobe x N / nlist), mining cost {min(listed):.0f}-"
        f"{max(listed):.0f} ns over the IVF rows at fixed nprobe ({', '.join(f'{c:.0f}' for c in listed)})"
        + (
            f"; per vector scanned (listed x imbalance), {min(scanned):.0f}-{max(scanned):.0f} ns where "
            f"the imbalance is known ({', '.join(f'{c:.0f}' for c in scanned)})"
            if scanned
            else ""
        )
        + ". Time per query follows the list length N / nlist, which the library's nlist ~ 4 sqrt(N) lets "
        "grow like sqrt(N) and `index --list-size L` holds at L, and the list imbalance, which grew with N "
        "in every series here (N grows by copying a fixed set of sentences; at one N the imbalance grows "
        "with the copies of each sentence, and at equal copies with nlist: bench_ivf_balance.md). "
        "With FAISS's search the cost per scanned vector also rose with the working set."
    )


def _list_size_note(size: int, bases: int, training: str, max_codes: int, fixed: list[dict]) -> str:
    """Scaling at one fixed list length: the `--list-size` rows of copies of `bases` sentences, and
    default-rule rows of the same copies, training and cap whose lists are within 1% of that length."""
    same = [r for r in fixed if row_key(r)[2:] == (bases, training, max_codes)]
    by_n = {r["n"]: r for r in same if r.get("list_size") is None and _near(list_length(r), size)}
    by_n.update({r["n"]: r for r in same if r.get("list_size") == size})
    series = [by_n[n] for n in sorted(by_n)]
    steps = [
        f"N^{np.log(b['mine_s'] / a['mine_s']) / np.log(b['n'] / a['n']):.2f} from {a['n']:,} to {b['n']:,}"
        for a, b in itertools.pairwise(series)
    ]
    per_query = ", ".join(
        f"{r['s_per_million_queries'] / 1e3:.3f} ms at {r['n']:,} (imbalance {_cell(r.get('imbalance'))})"
        for r in series
    )
    recall = ", ".join(f"{r['recall_at_4']:g}" for r in series)
    capped = f", at most {max_codes:,} vectors scanned a query (`mine --max-codes`)" if max_codes else ""
    factories = " or ".join(
        sorted({re.sub(r"IVF\d+", f"IVF{{N/{size}}}", r["factory"]) for r in series if r.get("list_size")})
    )
    borrowed = [
        f"the {r['n']:,} point is the row built with {r['factory']} ({list_length(r):.1f} vectors a list)"
        for r in series
        if r.get("list_size") is None
    ]
    return (
        f"- **At a fixed list length** (`index --list-size {size}`: {factories}; copies of "
        f"{bases:,} sentences a side; trained on {training}{capped}), mining "
        f"time grew as {' and '.join(steps) or 'n/a'} per side at nprobe {series[-1]['nprobe']} (linear is "
        f"N^1); time per query: {per_query}; recall@4 {recall}."
        + "".join(f" {text[0].upper()}{text[1:]}." for text in borrowed)
    )


def _row_name(r: dict) -> str:
    n, list_size, bases, training, max_codes = row_key(r)
    series = (
        ([f"--list-size {list_size}"] if list_size else [])
        + ([f"{bases:,} sentences"] if bases != DEMO_BASES else [])
        + ([f"trained on {training}"] if training != training_rule() and "IVF" in r["factory"] else [])
        + ([f"--max-codes {max_codes:,}"] if max_codes else [])
    )
    return f"{n:,}" + (f" ({', '.join(series)})" if series else "")


def _near(length: float | None, size: int) -> bool:
    return length is not None and abs(length / size - 1) < 0.01


def _fewer_probes_note(r: dict, fixed: dict) -> str:
    """What a row mined with fewer probes would have cost at the index's nprobe, from the index's probe."""
    estimate = r["probe_ms_per_1000"] * 2 * r["n"] / 1000 / 1000
    exponent = np.log(estimate / fixed["mine_s"]) / np.log(r["n"] / fixed["n"])
    return (
        f"- {r['n']:,}: mined at nprobe {r['mine_nprobe']} instead of {r['nprobe']} to fit this machine's "
        f"time: {r['mine_s']:,.0f} s measured. **Estimate, not a measurement:** the indexes' recall "
        f"probes searched {r['probe_ms_per_1000']:,.0f} ms per 1,000 other-language queries at nprobe "
        f"{r['nprobe']}, "
        f"so the {2 * r['n']:,} queries would take ~{estimate:,.0f} s of search at nprobe {r['nprobe']} "
        f"(N^{exponent:.2f} from {fixed['n']:,}). Peak RSS does not depend on nprobe: the same index is "
        "loaded and the same neighbour lists are kept."
        + (
            f" The list imbalance {r['imbalance']:g} is part of why: a query scans on average that many "
            "times N * nprobe / nlist vectors, more where queries fall in the largest lists."
            if r.get("imbalance")
            else ""
        )
    )


def _cells_by_size(results: list[dict], column: str, cell: Callable[[dict], str]) -> str:
    """`cell` of each row that has `column`, by N, comma-separated ("" when none has it)."""
    measured = sorted((r for r in results if r.get(column) is not None), key=lambda r: r["n"])
    return ", ".join(cell(r) for r in measured)


def _search_note(results: list[dict]) -> str:
    cells = _cells_by_size(
        results,
        "faiss_search_ms",
        lambda r: f"{r['faiss_search_ms'] / r['library_search_ms']:.1f}x at {_row_name(r)}",
    )
    if not cells:
        return "- Search columns: not measured (no row has them)."
    scanned = _cells_by_size(
        results,
        "scanned_per_query",
        lambda r: (
            f"{r['library_search_ms'] * 1e6 / r['scanned_per_query']:.1f} ns "
            f"({r['scanned_per_query']:,.0f} vectors, blocks of {r['search_block_rows']:,}) at {_row_name(r)}"
        ),
    )
    blocks = f" Its time a scanned vector (probe search included): {scanned}." if scanned else ""
    return (
        "- Search columns: en queries against the de index at mine's nprobe: the first "
        f"{SPEED_QUERIES:,} searched by FAISS's own `search`, then one block of mine's size (it grows with "
        "nlist / nprobe; rows without `search_block_rows`: the same 32,768 queries) by bitextmine's "
        "(`index_search.py`: IVF-Flat scanned list by list, each probed list scored once per block with "
        "one matrix product), one after the other in the benchmark's process after `mine`. bitextmine's "
        f"was faster by {cells}.{blocks} "
        "Rows without them were mined with FAISS's search."
    )


def _peak_note(results: list[dict]) -> str:
    peak = max(r["mine_rss_gb"] for r in results)
    at_3m = [r for r in results if r["n"] >= 3_000_000]
    measured = f"; measured {at_3m[-1]['mine_rss_gb']:.2f} GB at {at_3m[-1]['n']:,})" if at_3m else ")"
    anon = sorted((r for r in results if r.get("mine_anon_gb")), key=lambda r: r["n"])
    own = (
        f" In brackets, the anonymous part (the process's own memory; {anon[-1]['mine_anon_gb']:.2f} GB at "
        f"{anon[-1]['n']:,}): the rest are pages of the memory-mapped embeddings, which the kernel maps "
        "16 at a time around each row read for exact re-ranking (fault-around). They are clean page "
        "cache, unmapped as the gather goes and reclaimed first under memory pressure."
        if anon
        else ""
    )
    return f"- Peak RSS of `mine`: {peak:.2f} GB over all sizes (target at 3M x 3M: <= 8 GB{measured}.{own}"


def _selection_note(results: list[dict]) -> str:
    cells = _cells_by_size(
        results, "select_s", lambda r: f"{r['select_s']:g} s and {r['select_anon_gb']:g} GB at {_row_name(r)}"
    )
    if not cells:
        return "- Selection: not measured (no row has the selection columns)."
    return (
        "- Selection column: the same `mine` run again over its saved neighbour lists, which only scores "
        "the candidates, takes them one-to-one and writes the pairs; in brackets its anonymous memory "
        f"({cells}). It reads the lists 1M queries at a time and keeps what grows with N (means, "
        "used flags, sorted candidate runs) in memory-mapped scratch files: its own memory grows only "
        "until the block (1M queries) and the merge window (4M candidates over all runs) are full, "
        "which they are from 3M a side."
    )


def _recall_note(r: dict) -> str:
    copies = r["n"] // r.get("bases", DEMO_BASES)
    return (
        f"- Recall@4 at nprobe {r['nprobe']} is low ({r['recall_at_4']} at {r['n']:,}): each of the "
        f"{r.get('bases', DEMO_BASES):,} "
        f"real vectors has ~{copies:,} noisy copies at {r['n']:,}, so the exact top 4 are near-ties among "
        "copies spread over many lists, and a few probes miss most of them. `bitextmine index` without "
        "`--nprobe` tunes the probes on the other language's vectors to reach recall 0.95 and pays "
        "proportionally more search time; this benchmark fixes nprobe to look at scaling."
    )


def _contention_note(r: dict) -> str:
    """How much of the CPUs `mine` had, measured from /proc/stat during the run."""
    return (
        f"- {_row_name(r)}: during `mine`, {r['mine_stolen']:.1%} of the CPUs' time was stolen by the "
        f"hypervisor and {r['mine_others']:.1%} of the busy CPU time went to other processes."
    )


def _reuse_note(r: dict) -> str:
    return (
        f"- {r['n']:,}: the indexes were kept from an earlier run (`--keep`, `--reuse`); their seconds are "
        "FAISS build times from L.json and their peak RSS was not measured by this run."
    )


def _extrapolation_note(large: dict) -> str:
    per_query = large["mine_s"] / (2 * large["n"])  # seconds per query, measured at the largest fixed N
    # IVF at fixed nprobe with nlist ~ sqrt(N): each query scans N * nprobe / nlist ~ sqrt(N) vectors and
    # compares with nlist ~ sqrt(N) centroids, so the per-query cost grows like sqrt(N).
    billion = 2e9 * per_query * np.sqrt(1e9 / large["n"]) / 3600
    cpu_rate, gpu_rate = (
        encode_rate(RESULTS / f"{stem}.md") for stem in ("bench_encode", "bench_encode_cuda")
    )
    encoding = "encoding (2e9 sentences"
    if cpu_rate:
        encoding += (
            f"; {cpu_rate:,.0f} sentences/s here in bf16, so {2e9 / cpu_rate / 3600:,.0f} 2-core hours"
        )
    if gpu_rate:
        encoding += f"; {gpu_rate:,.0f}/s measured on one H100, so {2e9 / gpu_rate / 3600:,.0f} GPU-hours"
    return (
        "- **Extrapolation, not a measurement** — 1B x 1B sentences: 2e9 queries at "
        f"{per_query * 1e3:.2f} ms each (this 2-core machine at {large['n']:,}) x sqrt(1e9 / {large['n']:,}) "
        f"for the larger lists = {billion:,.0f} machine-hours of search on this kind of 2-core VM. Split "
        "into `mine --job-rows` jobs (e.g. 2,000 jobs of 1M queries), that is "
        f"{billion / 2000:,.1f} h per job; on GPUs, FAISS IVF search is commonly one to two orders of "
        f"magnitude faster than 2 CPU cores (not measured here: no FAISS GPU build could be installed on "
        f"the lent H100), i.e. roughly {billion / 100:,.0f}-{billion / 10:,.0f} GPU-hours, plus "
        f"{encoding}, e5-small packed bf16, bench_encode) and index building. At 1B rows the automatic "
        "index is OPQ48,IVF262144,PQ48 (56 B a vector: 56 GB per language), split by `index --max-memory` "
        f"into shards that each job searches in turn.{_selection_extrapolation(large)}"
    )


def _selection_extrapolation(large: dict) -> str:
    """The candidate selection runs in one process after the jobs; its work is linear in N."""
    if large.get("select_s") is None:
        return ""
    hours = large["select_s"] * 1e9 / large["n"] / 3600
    return (
        f" The selection then runs in one process: {large['select_s']:g} s at {large['n']:,}, linear in N, "
        f"so ~{hours:,.1f} h at 1B x 1B, with up to ~140 GB of scratch disk (40 B per pooled candidate, "
        "9 B per sentence)."
    )


def encode_rate(md: Path, variant: str = "(e) packed, bf16") -> float | None:
    """Sentences/s of `variant` in a bench_encode report, None when the report or row is absent."""
    if not md.is_file():
        return None
    lines = md.read_text().splitlines()
    header = next((line for line in lines if line.startswith("| variant |")), None)
    row = next((line for line in lines if line.startswith(f"| {variant} |")), None)
    if header is None or row is None:
        return None
    column = [cell.strip() for cell in header.split("|")].index("sentences/s")
    return float(row.split("|")[column].replace(",", ""))


def remeasure_selection(args: argparse.Namespace) -> None:
    saved = json.loads(args.out.read_text())
    for n in (int(s) for s in args.sizes.split(",")):
        key = (n, args.list_size, args.base_count, training_rule(), args.max_codes)
        row = next(r for r in saved["results"] if row_key(r) == key)
        row.update(selection_columns(workspace_dir(args, n), args, row["mine_nprobe"]))
    args.out.write_text(json.dumps(saved, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="100000,300000,1000000,3000000")
    parser.add_argument("--nprobe", type=int, default=8)
    parser.add_argument("--sigma", type=float, default=0.02)
    parser.add_argument(
        "--bases",
        type=Path,
        default=DEMO,
        help="workspace whose de and en embeddings are copied [the demo's]",
    )
    parser.add_argument("--threshold", type=float, default=1.03)
    parser.add_argument("--scratch", type=Path, default=REPO / "bitextmine-work" / "bench" / "scale")
    parser.add_argument("--keep", action="store_true", help="keep the workspaces")
    parser.add_argument("--reuse", action="store_true", help="mine in kept workspaces without re-indexing")
    parser.add_argument("--mine-nprobe", type=int, help="probes for `mine` [default: --nprobe]")
    parser.add_argument(
        "--max-codes", type=int, default=0, help="`mine --max-codes`: vectors a query scans at most [no cap]"
    )
    parser.add_argument("--note", help="a remark stored with the rows of this run (e.g. a shared CPU)")
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_scale.json")
    parser.add_argument("--factory", help="IVF factory above 200k [default: the library's choice for N]")
    parser.add_argument(
        "--list-size", type=int, help="index with `--list-size L` (IVF of N / L lists), a series of its own"
    )
    parser.add_argument("--report-only", action="store_true", help="rewrite the .md from the .json")
    parser.add_argument(
        "--selection-only",
        action="store_true",
        help="only re-measure the selection columns of existing rows, in their kept workspaces",
    )
    args = parser.parse_args()
    if args.selection_only:
        args.base_count = min(base_count(args.bases, lang) for lang in ("de", "en"))
        remeasure_selection(args)
    if args.report_only or args.selection_only:
        args.out.with_suffix(".md").write_text(report(json.loads(args.out.read_text())["results"], args))
        return
    bases = {lang: base_vectors(args.bases, lang) for lang in ("de", "en")}
    args.base_count = min(len(vectors) for vectors in bases.values())
    earlier = json.loads(args.out.read_text())["results"] if args.out.is_file() else []
    for n in (int(s) for s in args.sizes.split(",")):
        key = (n, args.list_size, args.base_count, training_rule(), args.max_codes)
        same = [r for r in earlier if row_key(r) == key]
        built = same or [r for r in earlier if row_key(r)[:4] == key[:4]]  # kept indexes, mined uncapped
        done = run_size(n, args, bases, built[0] if built else None)
        results = sorted([r for r in earlier if r not in same] + [done], key=row_order)
        earlier = results
        args.out.write_text(
            json.dumps({"date": str(datetime.date.today()), "results": results}, indent=2) + "\n"
        )
        args.out.with_suffix(".md").write_text(report(results, args))
    print(report(results, args))


if __name__ == "__main__":
    main()
