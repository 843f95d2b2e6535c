"""The GPU path, checked in one run of at most 8 minutes on one GPU (issue: the GPU path ready to run).

What a device machine can be sent is small (64 MiB with the wheels), so the shared model's weights
(145 MB) and the scale set's vectors cannot travel. The run therefore uses:
- a model of the shared model's shape (its config and real tokenizer, carried; random weights built on
  the machine): attention kernels and throughput depend on the shape, not on the weights' values;
- SENTENCES real sentences of the scale set (carried, zstd): what encoding speed is measured on;
- synthetic unit vectors for mining (planted noisy pairs among random ones), made on the machine.

Sections, each a row in OUT/gpu_check.json (and gpu_check.md):
1. attention: the packed encoder with each backend (xFormers block-diagonal, torch varlen, SDPA) in bf16
   against the padded Hugging Face forward in fp32, cosine per sentence;
2. encode: packed encoding (auto backend, bf16) against sentence-transformers (bf16) on the sentences;
3. mine-1m: exact mining (search/gemm.py) of 1M x 1M vectors on the GPU, and the pairs of a 100k x 100k
   subsample against the same mining on the CPU;
4. search-plans: exact search of SWEEP_QUERIES queries against 1M vectors with each block shape and
   grouped top-k of PLANS (the rate of each), and the time of each stage of one product block;
5. mine-10m: exact search of 10M queries against 10M vectors for a fixed time with the fastest plan of
   search-plans, the rate and GPU memory, and the time the whole 10M x 10M mining (both directions)
   takes at that rate;
6. workspace-mine: the command line end to end on the GPU (`encode`, exact `index`, `mine --device
   cuda`) on WORKSPACE_ROWS sentences a side, and every one-to-one candidate against `mine --device cpu`
   on the same workspace.

`--dry-run` runs every section at toy sizes on the CPU (the test suite does), so the script is known to
work before a GPU is lent.
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import BITEXTMINE, RESULTS, stamped

from bitextmine import SentenceEncoder, mine_arrays

# measured on purpose: the matrix-product search itself (search/gemm.py), streamed for a fixed time
from bitextmine.search.gemm import ArrayVectors, GemmPlan, gemm_neighbours

SIZES = {  # full run / dry run
    "attention_sentences": (2_000, 40),
    "encode_sentences": (200_000, 60),
    "mine_rows": (1_000_000, 3_000),
    "compare_rows": (100_000, 1_000),
    "big_rows": (10_000_000, 20_000),
    "big_seconds": (90.0, 5.0),
    "sweep_rows": (1_000_000, 5_000),
    "sweep_queries": (65_536, 512),
    "dim": (384, 32),
    "workspace_rows": (50_000, 30),
}
PAIR_SHARE = 50_592 / 1_050_592  # the scale set's share of hidden pairs
BACKENDS = ("xformers", "varlen", "sdpa")
MAX_TOKENS = (4096, 32768)  # tokens a packed batch: the default, and a GPU-sized one
# search-plans: (query rows, base rows) of a product block x (columns a group, levels) of `block_top`
BLOCKS = ((32_768, 262_144), (65_536, 131_072), (16_384, 524_288), (32_768, 131_072), (65_536, 262_144))
GROUPS = ((32, 1), (64, 1), (128, 1), (256, 1), (64, 2))
CHECKED_QUERIES = 1024  # queries whose neighbours each plan must give as the float32 products do


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--report", action="store_true", help="rewrite gpu_check.md from --out's JSON")
    parser.add_argument("--model-shape", type=Path, help="a model dir without weights")
    parser.add_argument("--sentences", type=Path, help="one sentence a line (.zst or text)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--dry-run", action="store_true", help="toy sizes on the CPU")
    parser.add_argument("--big-seconds", type=float, help="mine-10m's search time [default: 90]")
    parser.add_argument(
        "--sections",
        default="attention,encode,mine-1m,search-plans,mine-10m,workspace-mine",
        help="comma-separated",
    )
    args = parser.parse_args()
    if args.report:
        rows = json.loads((args.out / "gpu_check.json").read_text())
        (args.out / "gpu_check.md").write_text(report(rows))
        return
    if args.model_shape is None or args.sentences is None:
        parser.error("--model-shape and --sentences are needed to run the check")
    size = {name: pair[1 if args.dry_run else 0] for name, pair in SIZES.items()}
    size["big_seconds"] = args.big_seconds or size["big_seconds"]
    device = "cpu" if args.dry_run else "cuda"
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as scratch:
        model = build_model(args.model_shape, Path(scratch) / "model", tiny=args.dry_run)
        sentences = read_sentences(args.sentences)
        dim = size["dim"]
        sections: list[tuple[str, Callable[[], dict]]] = [
            ("attention", lambda: attention_row(model, sentences[: size["attention_sentences"]], device)),
            ("encode", lambda: encode_row(model, sentences[: size["encode_sentences"]], device)),
            ("mine-1m", lambda: mine_row(size["mine_rows"], size["compare_rows"], size["dim"], device)),
            (
                "search-plans",
                lambda: plans_row(size["sweep_rows"], size["sweep_queries"], size["dim"], device),
            ),
            ("mine-10m", lambda: big_row(size["big_rows"], size["big_seconds"], dim, device, rows)),
            ("workspace-mine", lambda: workspace_row(model, sentences, size["workspace_rows"], device)),
        ]
        for name, run in sections:
            if name not in args.sections.split(","):
                continue
            rows.append(run_section(name, run, device))
            save(rows, args.out, args.dry_run)


def run_section(name: str, run: Callable[[], dict], device: str) -> dict:
    """The section's row, or the error it stopped on (the other sections still run)."""
    print(f"== {name}", flush=True)
    started = time.perf_counter()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    try:
        row = {"section": name, **run()}
    except Exception as exc:  # a failed section is a result too: it is reported, not hidden
        traceback.print_exc()
        row = {"section": name, "error": f"{type(exc).__name__}: {exc}"}
    row["seconds"] = round(time.perf_counter() - started, 1)
    if device == "cuda":
        row["gpu_peak_gb"] = round(torch.cuda.max_memory_allocated() / 1e9, 2)
    print(json.dumps(row), flush=True)
    return row


def build_model(shape: Path, out: Path, tiny: bool) -> Path:
    """A model dir of `shape`'s architecture and tokenizer with random weights (seeded)."""
    from transformers import AutoConfig, AutoModel

    shutil.copytree(shape, out, copy_function=shutil.copyfile)
    for path in [out, *out.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)  # the shared model's files are read-only
    config = AutoConfig.from_pretrained(out)
    if tiny:
        config.num_hidden_layers, config.hidden_size, config.intermediate_size = 2, 32, 64
        config.num_attention_heads = 4
    torch.manual_seed(0)
    AutoModel.from_config(config).save_pretrained(out)
    return out


def read_sentences(path: Path) -> list[str]:
    data = path.read_bytes()
    if path.suffix == ".zst":
        import zstandard

        data = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)).read()
    return data.decode("utf-8").split("\n")[:-1]


def attention_row(model: Path, sentences: list[str], device: str) -> dict:
    reference = padded_forward(model, sentences, device)
    row: dict = {"sentences": len(sentences), "reference": "padded Hugging Face forward, fp32"}
    for backend in BACKENDS:
        try:
            encoder = SentenceEncoder.load(
                str(model), device=device, packed=True, attention=backend, precision="bf16"
            )
            vectors = encoder.encode(sentences).vectors
        except Exception as exc:
            row[backend] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        cos = np.einsum("nd,nd->n", vectors, reference)
        row[backend] = {"mode": encoder.mode, "min_cos": float(cos.min()), "mean_cos": float(cos.mean())}
    return row


def padded_forward(model: Path, sentences: list[str], device: str, batch: int = 64) -> np.ndarray:
    """The reference: mean pooling over the padded Hugging Face forward in fp32, 'query: ' prefix."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    net = AutoModel.from_pretrained(model).to(device).eval()
    out = []
    with torch.inference_mode():
        for start in range(0, len(sentences), batch):
            texts = ["query: " + s for s in sentences[start : start + batch]]
            inputs = tokenizer(texts, padding=True, truncation=True, max_length=512, return_tensors="pt")
            inputs = inputs.to(device)
            hidden = net(**inputs).last_hidden_state.float()
            mask = inputs["attention_mask"].unsqueeze(-1).float()
            pooled = (hidden * mask).sum(1) / mask.sum(1)
            out.append(torch.nn.functional.normalize(pooled, dim=-1).cpu().numpy())
    return np.concatenate(out)


def encode_row(model: Path, sentences: list[str], device: str) -> dict:
    from sentence_transformers import SentenceTransformer

    packed = {}
    for max_tokens in MAX_TOKENS:
        encoder = SentenceEncoder.load(
            str(model), device=device, packed=True, precision="bf16", max_tokens=max_tokens
        )
        encoder.encode(sentences[:1000])  # warm-up: kernels, allocator
        started = time.perf_counter()
        ours = encoder.encode(sentences).vectors
        packed[max_tokens] = time.perf_counter() - started
    packed_seconds = min(packed.values())
    st = SentenceTransformer(str(model), device=device, model_kwargs={"dtype": torch.bfloat16})
    st.encode(sentences[:1000], prompt="query: ", batch_size=256)
    started = time.perf_counter()
    theirs = st.encode(sentences, prompt="query: ", batch_size=256, normalize_embeddings=True)
    st_seconds = time.perf_counter() - started
    cos = np.einsum("nd,nd->n", ours, np.asarray(theirs, dtype=np.float32))
    return {
        "sentences": len(sentences),
        "packed": {
            "mode": encoder.mode,
            "sent_per_s_by_max_tokens": {n: round(len(sentences) / t) for n, t in packed.items()},
        },
        "sentence_transformers": {"batch_size": 256, "sent_per_s": round(len(sentences) / st_seconds)},
        "speedup": round(st_seconds / packed_seconds, 2),
        "min_cos_vs_st": float(cos.min()),
    }


def planted_pairs(rows: int, dim: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Random unit vectors a side (float16 values, as the shards store them); the first rows *
    PAIR_SHARE target rows are noisy copies of source rows (cosine ~0.9), then both sides shuffled."""
    rng = np.random.default_rng(seed)
    src = unit(rng.standard_normal((rows, dim), dtype=np.float32))
    tgt = unit(rng.standard_normal((rows, dim), dtype=np.float32))
    pairs = int(rows * PAIR_SHARE)
    tgt[:pairs] = unit(src[:pairs] + 0.5 * unit(rng.standard_normal((pairs, dim), dtype=np.float32)))
    return src, tgt[rng.permutation(rows)]


def unit(x: np.ndarray) -> np.ndarray:
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float16).astype(np.float32)


def mine_row(rows: int, compare_rows: int, dim: int, device: str) -> dict:
    src, tgt = planted_pairs(rows, dim)
    started = time.perf_counter()
    mined = mine_arrays(src, tgt, device=device)
    seconds = time.perf_counter() - started
    small_src, small_tgt = planted_pairs(compare_rows, dim, seed=1)
    on_device = mine_arrays(small_src, small_tgt, device=device)
    started = time.perf_counter()
    on_cpu = mine_arrays(small_src, small_tgt, device="cpu")
    cpu_seconds = time.perf_counter() - started
    same = np.array_equal(on_device.src, on_cpu.src) and np.array_equal(on_device.tgt, on_cpu.tgt)
    differing = pair_set(on_device) ^ pair_set(on_cpu)
    return {
        "rows": rows,
        "dim": dim,
        "mine_seconds": round(seconds, 1),
        "candidates": len(mined.src),
        "compare_rows": compare_rows,
        "pairs_identical_to_cpu": bool(same),
        "pairs_in_one_only": len(differing),
        "max_score_diff_vs_cpu": float(np.abs(on_device.score - on_cpu.score).max()) if same else None,
        "cpu_mine_seconds": round(cpu_seconds, 1),
        "cpu": GemmPlan.for_device("cpu").describe(),
    }


def pair_set(mined) -> set[tuple[int, int]]:
    return set(zip(mined.src.tolist(), mined.tgt.tolist(), strict=True))


def near_queries(rows: int, queries: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Random unit base rows, and queries that are noisy copies of some of them (float16 values)."""
    generator = torch.Generator().manual_seed(2)
    base = torch.nn.functional.normalize(torch.randn(rows, dim, generator=generator), dim=1)
    near = base[torch.randperm(rows, generator=generator)[: min(rows, queries)]]
    near = near + 0.3 * torch.nn.functional.normalize(torch.randn(near.shape, generator=generator))
    near = torch.nn.functional.normalize(near, dim=1)
    return base.half().float().numpy(), near.half().float().numpy()


def plans_row(rows: int, n_queries: int, dim: int, device: str) -> dict:
    """Each plan's rate (best of two runs) over the same queries and base, and one block's stages."""
    from bitextmine.search.gemm import ArrayVectors

    base, queries = near_queries(rows, n_queries, dim)
    default = GemmPlan.for_device(device)
    want = reference_ids(queries[:CHECKED_QUERIES], base, device)
    rates, unlike = {}, {}
    for (query_rows, base_rows), (group, levels) in itertools.product(BLOCKS, GROUPS):
        plan = replace(default, query_rows=query_rows, base_rows=base_rows, group=group, levels=levels)
        seconds = []
        for _ in range(2):
            started = time.perf_counter()
            found = gemm_neighbours(lambda: [(0, queries)], len(queries), ArrayVectors(base), 4, plan)
            seconds.append(time.perf_counter() - started)
        rates[plan_name(plan)] = round(len(queries) / min(seconds))
        unlike[plan_name(plan)] = int((found.ids[: len(want)] != want).any(axis=1).sum())
        if device == "cuda":
            torch.cuda.empty_cache()
    best = max(rates, key=rates.get)
    return {
        "base_rows": rows,
        "queries": len(queries),
        "queries_per_s_by_plan": rates,
        "checked_queries": len(want),
        "rows_unlike_fp32_reference_by_plan": unlike,
        "fastest": best,
        "default": plan_name(default),
        "stage_ms": stage_times(
            default, min(default.query_rows, len(queries)), min(default.base_rows, rows), dim, device
        ),
    }


def reference_ids(queries: np.ndarray, base: np.ndarray, device: str) -> np.ndarray:
    """The top 4 rows of each query by float32 products (TF32 off), in base chunks on `device`."""
    torch.backends.cuda.matmul.allow_tf32 = False
    q = torch.from_numpy(queries).to(device)
    sims, ids = [], []
    for start in range(0, len(base), 262_144):
        block = torch.from_numpy(base[start : start + 262_144]).to(device)
        top = torch.topk(q @ block.T, min(4, len(block)), dim=1)
        sims.append(top.values)
        ids.append(top.indices + start)
    best = torch.topk(torch.cat(sims, dim=1), 4, dim=1).indices
    return torch.gather(torch.cat(ids, dim=1), 1, best).cpu().numpy()


def plan_name(plan: GemmPlan) -> str:
    return f"{plan.query_rows}x{plan.base_rows} group {plan.group} levels {plan.levels}"


def parse_plan(name: str, device: str) -> GemmPlan:
    rows, _, group, _, levels = name.split()
    query_rows, base_rows = map(int, rows.split("x"))
    default = GemmPlan.for_device(device)
    return replace(default, query_rows=query_rows, base_rows=base_rows, group=int(group), levels=int(levels))


def stage_times(plan: GemmPlan, rows: int, cols: int, dim: int, device: str) -> dict:
    """Milliseconds of each stage for one block of `plan` (mean of 5, after a warm-up): the product, the
    group maxima along rows (one direction: strided groups as `block_top` takes them, and consecutive
    columns for comparison) and along columns (what serving the other direction from the same product
    would add), the top-k of the maxima, `block_top` whole, and torch.topk for comparison."""
    from bitextmine.search.gemm import block_top

    keep, group = 4 + plan.extra + 1, plan.group
    rows, cols = rows // group * group, cols // group * group
    q = torch.nn.functional.normalize(torch.randn(rows, dim, device=device), dim=1).to(plan.dtype)
    b = torch.nn.functional.normalize(torch.randn(cols, dim, device=device), dim=1).to(plan.dtype)
    out = torch.empty(rows, cols, dtype=plan.dtype, device=device)
    maxima = out.view(rows, group, cols // group).amax(dim=1)
    stages = {
        "product": lambda: torch.matmul(q, b.T, out=out),
        "row_group_max": lambda: out.view(rows, group, cols // group).amax(dim=1),
        "row_group_max_consecutive_columns": lambda: out.view(rows, cols // group, group).amax(dim=2),
        "top_k_of_maxima": lambda: torch.topk(maxima, keep, dim=1),
        "block_top": lambda: block_top(out, keep, group, plan.levels),
        "column_group_max": lambda: out.view(rows // group, group, cols).amax(dim=1),
        "torch_top_k": lambda: torch.topk(out, keep, dim=1),
    }
    return {name: round(1000 * timed(run, device), 2) for name, run in stages.items()}


def timed(run: Callable[[], object], device: str, repeats: int = 5) -> float:
    run()
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    started = time.perf_counter()
    for _ in range(repeats):
        run()
    sync()
    return (time.perf_counter() - started) / repeats


def big_row(rows: int, budget_seconds: float, dim: int, device: str, earlier: list[dict]) -> dict:
    """10M queries against 10M vectors, searched for `budget_seconds` (after the base is on the GPU), with
    the fastest plan of the search-plans row where it ran."""
    base, queries = near_queries(rows, 2_000_000, dim)
    fastest = [r["fastest"] for r in earlier if r["section"] == "search-plans" and "fastest" in r]
    plan = parse_plan(fastest[0], device) if fastest else GemmPlan.for_device(device)
    done = 0
    started = None

    def blocks():
        nonlocal done, started
        started = time.perf_counter()
        for first in range(0, len(queries), plan.query_rows):
            if time.perf_counter() - started > budget_seconds:
                return
            yield first, queries[first : first + plan.query_rows]
            done = first + len(queries[first : first + plan.query_rows])

    loading = time.perf_counter()
    gemm_neighbours(blocks, len(queries), ArrayVectors(base), 4, plan)
    searched = time.perf_counter() - started
    rate = done / searched
    return {
        "base_rows": rows,
        "dim": dim,
        "queries_searched": done,
        "search_seconds": round(searched, 1),
        "setup_seconds": round(started - loading, 1),
        "queries_per_s": round(rate),
        "both_directions_10m_seconds_at_rate": round(2 * rows / rate),
        "plan": f"{plan.describe()}, {plan_name(plan)}",
    }


def workspace_row(model: Path, sentences: list[str], rows: int, device: str) -> dict:
    """`rows` sentences a side (German: the first half of the carried sentences, English: the second)
    encoded, indexed exactly and mined through the command line, on `device` and with `mine --device
    cpu`; every one-to-one candidate is written (no threshold), so the two must be the same lines."""
    half = len(sentences) // 2
    seconds, mined = {}, {}
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch) / "work"
        for lang, lines in (("de", sentences[:half][:rows]), ("en", sentences[half:][:rows])):
            text = Path(scratch) / f"{lang}.txt"
            text.write_text("\n".join(lines) + "\n")
            encode = ("encode", str(text), "-l", lang, "-m", str(model), "--device", device, "--lid", "off")
            seconds[f"encode {lang}"] = command_seconds(*encode, "-w", str(work))
            seconds[f"index {lang}"] = command_seconds("index", lang, "--factory", "Flat", "-w", str(work))
        for where in dict.fromkeys((device, "cpu")):
            output = Path(scratch) / f"mined-{where}.tsv"
            mine = ("mine", "de", "en", "--device", where, "--filters", "none", "--output", str(output))
            seconds[f"mine on {where}"] = command_seconds(*mine, "-w", str(work))
            mined[where] = output.read_text().splitlines()
    return {
        "sentences_a_side": rows,
        "command_seconds": seconds,
        "candidates": len(mined[device]),
        "candidates_identical_to_cpu": mined[device] == mined["cpu"],
        "lines_in_one_only": len(set(mined[device]) ^ set(mined["cpu"])),
    }


def command_seconds(*args: str) -> float:
    """Seconds `bitextmine ARGS` took as a process of its own; its output's end where it failed."""
    started = time.perf_counter()
    done = subprocess.run([*BITEXTMINE, "-q", *args], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(
            f"bitextmine {args[0]} exited {done.returncode}: {(done.stdout + done.stderr)[-500:]}"
        )
    return round(time.perf_counter() - started, 1)


def save(rows: list[dict], out: Path, dry_run: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    stem = "gpu_check_dry_run" if dry_run else "gpu_check"
    rows = [stamped(r) for r in rows]
    (out / f"{stem}.json").write_text(json.dumps(rows, indent=1) + "\n")
    (out / f"{stem}.md").write_text(report(rows))


def report(rows: list[dict]) -> str:
    """One line a section: what it measured, on which machine and commit."""
    lines = [
        "# The GPU path (gpu_check.py)",
        "",
        "Produced by `examples/benchmarks/gpu_check.sh` on a GPU "
        "machine; the model has the shared model's shape and random weights (see the script).",
        "",
    ]
    for row in rows:
        figures = {
            k: v for k, v in row.items() if k not in ("section", "date", "machine", "software", "commit")
        }
        lines.append(
            f"- **{row['section']}** ({row['date']}, {row['machine']}, {row['commit']}): "
            f"`{json.dumps(figures)}`"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
