"""Encoding throughput: packed block-diagonal vs padded Hugging Face vs sentence-transformers,
and bitextmine's precisions (fp32, bf16, int8) with their BUCC-format dev F1.

Each variant runs in its own process (so peak memory is its own) on the same sentences with the same
thread count, writes its vectors, and the parent compares them with the padded input-order reference:

  (a) packed       bitextmine SentenceEncoder (fp32), token-budget batches from length-sorted windows
  (b) padded       plain HF forward, batches of --batch in input order (the model card recipe)
  (c) sorted       plain HF forward, batches of --batch after sorting all sentences by token length
  (d) st           sentence-transformers encode(batch_size=--batch) on the same model dir, if installed
  (e) bf16         (a) with --precision bf16
  (f) int8         (a) with --precision int8 (CPU only)
  (g) bf16-sdpa    (e) with the SDPA attention backend instead of xFormers (CUDA only)
  (h) sorted-bf16  (c) with the model in bf16 (CUDA only)

`--device cuda` runs the same comparison on a GPU (larger default batches; peak GPU memory instead of
peak RSS) and writes bench_encode_cuda.md and bench_encode_cuda_f1.json instead.

Then, per precision and in its own process, the de-en and zh-en bucc-like dev splits are encoded
(no cache), mined exactly and the best-F1 threshold is learned on the same split (oracle F1).

The F1 results are kept in results/bench_encode_f1.json: `--no-f1` re-times the variants and reuses them.

Usage: python examples/benchmarks/bench_encode.py [--device cpu|cuda] [--n 10000] [--threads 2] [--no-f1]
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from benchlib import MODEL, SHARED, cpu_model, peak_rss_mb

VARIANTS = ("packed", "padded", "sorted", "st", "bf16", "int8", "bf16-sdpa", "sorted-bf16")
ONLY_ON = {"int8": "cpu", "bf16-sdpa": "cuda", "sorted-bf16": "cuda"}
PRECISION_OF = {"packed": "fp32", "bf16": "bf16", "int8": "int8"}
PRECISION_VARIANT = {precision: variant for variant, precision in PRECISION_OF.items()}
F1_PAIRS = ("de-en", "zh-en")
F1_TOLERANCE = 0.3  # F1 points a faster precision may lose against fp32
DEFAULT_BATCH = {"cpu": 64, "cuda": 256}
DEFAULT_MAX_TOKENS = {"cpu": 4096, "cuda": 16384}
RESULTS = Path(__file__).with_name("results")


def result_stem(device: str) -> str:
    return "bench_encode" if device == "cpu" else "bench_encode_cuda"


def load_sentences(n: int) -> list[str]:
    """n sentences alternating German and English news from ../shared/data/mono."""
    import zstandard

    sides = []
    for lang in ("de", "en"):
        with open(SHARED / "data" / "mono" / f"news.{lang}.txt.zst", "rb") as fh:
            text = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8")
            sides.append([line.rstrip("\n") for _, line in zip(range((n + 1) // 2), text, strict=False)])
    mixed = [s for pair in zip(*sides, strict=True) for s in pair]
    return mixed[:n]


def run_variant(variant: str, sentences: list[str], args: argparse.Namespace) -> None:
    import torch

    encode, backend = _encoder_of(variant, args)
    with torch.inference_mode():
        encode(sentences[: args.batch])  # warm-up: first-call allocations and kernel selection
        if args.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        started = time.perf_counter()
        vectors = np.asarray(encode(sentences), dtype=np.float32)  # on the CPU: the GPU has finished
        seconds = time.perf_counter() - started
    peak = torch.cuda.max_memory_allocated() / 2**20 if args.device == "cuda" else peak_rss_mb()
    np.save(args.scratch / f"{variant}.npy", vectors)
    stats = {"seconds": seconds, "peak_mb": peak, "backend": backend}
    (args.scratch / f"{variant}.json").write_text(json.dumps(stats))


def _encoder_of(variant: str, args: argparse.Namespace):
    """(encode function, what runs the attention) of `variant`."""
    import torch

    if variant in ("padded", "sorted", "sorted-bf16"):
        dtype = torch.bfloat16 if variant == "sorted-bf16" else torch.float32
        return _hf_padded(args.device, args.batch, sort=variant != "padded", dtype=dtype), "Hugging Face"
    if variant == "st":
        return _sentence_transformers(args.device, args.batch), "Hugging Face"
    from bitextmine.encoder.encoder import SentenceEncoder

    encoder = SentenceEncoder.load(
        str(MODEL),
        device=args.device,
        packed=True,
        max_tokens=args.max_tokens,
        attention="sdpa" if variant == "bf16-sdpa" else "auto",
        precision=PRECISION_OF.get(variant, "bf16"),
    )
    return (lambda sentences: encoder.encode(sentences).vectors), encoder.mode


def run_f1(precision: str, args: argparse.Namespace) -> None:
    """Oracle dev F1 of each F1 pair with vectors encoded at `precision`."""
    from bitextmine.bucc import read_bucc
    from bitextmine.calibrate import MiningSettings, calibrate_threshold, mine_split
    from bitextmine.encoder.encoder import SentenceEncoder

    encoder = SentenceEncoder.load(
        str(MODEL), device=args.device, max_tokens=args.max_tokens, precision=precision
    )
    results = {}
    for pair in F1_PAIRS:
        split = read_bucc(SHARED / "data" / "bucc-like" / pair, pair, "dev")
        started = time.perf_counter()
        result = calibrate_threshold(mine_split(split, encoder, MiningSettings()))
        results[pair] = {
            "f1": result.scores.f1,
            "precision": result.scores.precision,
            "recall": result.scores.recall,
            "threshold": result.threshold,
            "sentences": len(split.src.sentences) + len(split.tgt.sentences),
            "seconds": time.perf_counter() - started,
        }
    (args.scratch / f"f1-{precision}.json").write_text(json.dumps(results))


def _sentence_transformers(device: str, batch: int):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(MODEL), device=device)
    return lambda sentences: model.encode(
        sentences, batch_size=batch, prompt="query: ", normalize_embeddings=True, convert_to_numpy=True
    )


def _hf_padded(device: str, batch_size: int, sort: bool, dtype):
    import torch.nn.functional as F
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    model = AutoModel.from_pretrained(MODEL, dtype=dtype).to(device).eval()

    def encode(sentences: list[str]) -> np.ndarray:
        texts = ["query: " + s for s in sentences]
        order = list(range(len(texts)))
        if sort:
            lengths = [len(ids) for ids in tokenizer(texts, truncation=True, max_length=512)["input_ids"]]
            order.sort(key=lengths.__getitem__)
        out = np.empty((len(texts), model.config.hidden_size), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            batch = tokenizer(
                [texts[i] for i in idx], padding=True, truncation=True, max_length=512, return_tensors="pt"
            ).to(device)
            hidden = model(**batch).last_hidden_state.float()
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            out[idx] = F.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1).cpu().numpy()
        return out

    return encode


def machine(device: str) -> str:
    import torch

    host = f"{cpu_model()}, {os.cpu_count()} cores, python {platform.python_version()}"
    host += f", torch {torch.__version__}"
    if device == "cuda":
        return f"{torch.cuda.get_device_name()} (host: {host})"
    return host


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, help="padded batch size [default: 64 on CPU, 256 on CUDA]")
    parser.add_argument("--max-tokens", type=int, help="packed token budget [default: 4096 / 16384]")
    parser.add_argument("--only", choices=VARIANTS, action="append")
    parser.add_argument("--out", type=Path, help="report [default: results/bench_encode[_cuda].md]")
    parser.add_argument("--no-f1", action="store_true", help="skip the dev F1 per precision")
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--f1-precision", choices=sorted(set(PRECISION_OF.values())), help=argparse.SUPPRESS)
    parser.add_argument("--scratch", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.batch = args.batch or DEFAULT_BATCH[args.device]
    args.max_tokens = args.max_tokens or DEFAULT_MAX_TOKENS[args.device]
    if not MODEL.is_dir():
        sys.exit(f"bench_encode: {MODEL} is absent; the benchmark needs the shared e5 model and data")
    if args.variant or args.f1_precision:
        import torch

        torch.set_num_threads(args.threads)
        if args.f1_precision:
            run_f1(args.f1_precision, args)
        else:
            run_variant(args.variant, load_sentences(args.n), args)
        return
    run_all(args)


def run_all(args: argparse.Namespace) -> None:
    """Every variant (and precision's F1) in its own process, then the report."""
    sentences = load_sentences(args.n)
    variants = [v for v in VARIANTS if v != "st" or _has_sentence_transformers()]
    variants = [v for v in variants if ONLY_ON.get(v, args.device) == args.device]
    variants = [v for v in variants if not args.only or v in args.only or v == "padded"]
    f1_store_path = RESULTS / f"{result_stem(args.device)}_f1.json"
    with tempfile.TemporaryDirectory() as scratch:
        common = ["--scratch", scratch, "--n", str(args.n), "--threads", str(args.threads)]
        common += ["--device", args.device, "--batch", str(args.batch), "--max-tokens", str(args.max_tokens)]
        for variant in variants:
            print(f"running {variant} on {len(sentences)} sentences ...", flush=True)
            _child(["--variant", variant, *common], args.threads)
        if not args.no_f1:
            precisions = [PRECISION_OF[v] for v in variants if v in PRECISION_OF]
            for precision in precisions:
                print(f"dev F1 at {precision} on {', '.join(F1_PAIRS)} ...", flush=True)
                _child(["--f1-precision", precision, *common], args.threads)
            f1 = {p: json.loads((Path(scratch) / f"f1-{p}.json").read_text()) for p in precisions}
            f1_store_path.write_text(
                json.dumps({"when": datetime.date.today().isoformat(), "f1": f1}, indent=1) + "\n"
            )
        f1_store = json.loads(f1_store_path.read_text()) if f1_store_path.is_file() else None
        report = build_report(Path(scratch), variants, f1_store, sentences, args)
    print(report)
    out = args.out or RESULTS / f"{result_stem(args.device)}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report)
    print(f"written to {out}")


def _child(arguments: list[str], threads: int) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    subprocess.run([sys.executable, __file__, *arguments], check=True, env=env)


def _has_sentence_transformers() -> bool:
    try:
        import sentence_transformers  # noqa: F401
    except ImportError:
        return False
    return True


def count_tokens(sentences: list[str]) -> int:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    ids = tokenizer(["query: " + s for s in sentences], truncation=True, max_length=512)["input_ids"]
    return sum(len(x) for x in ids)


LABELS = {
    "packed": "(a) packed, fp32",
    "padded": "(b) padded, input order",
    "sorted": "(c) padded, length-sorted",
    "st": "(d) sentence-transformers",
    "bf16": "(e) packed, bf16",
    "int8": "(f) packed, int8",
    "bf16-sdpa": "(g) packed, bf16, SDPA attention",
    "sorted-bf16": "(h) padded, length-sorted, bf16",
}
# (numerator, denominator, name, target): speed ratios reported when both variants ran
RATIOS = [
    ("packed", "padded", "a/b", "2.0"),
    ("packed", "sorted", "a/c", "1.15"),
    ("packed", "st", "a/d", ""),
    ("bf16", "sorted-bf16", "e/h", ""),
    ("bf16", "bf16-sdpa", "e/g", ""),
]


def build_report(
    scratch: Path, variants: list[str], f1_store: dict | None, sentences: list[str], args: argparse.Namespace
) -> str:
    tokens = count_tokens(sentences)
    reference = np.load(scratch / "padded.npy")
    stats = {v: json.loads((scratch / f"{v}.json").read_text()) for v in variants}
    rate = {v: len(sentences) / stats[v]["seconds"] for v in variants}
    memory = "peak GPU memory (MB)" if args.device == "cuda" else "peak RSS (MB)"
    lines = [
        f"# {result_stem(args.device)} — {datetime.date.today().isoformat()}",
        "",
        f"Machine: {machine(args.device)}; {args.threads} threads; padded batches of {args.batch}, "
        f"packed token budget {args.max_tokens:,}; {len(sentences):,} sentences (de/en news, mixed), "
        f"{tokens:,} tokens with the `query: ` prefix; model multilingual-e5-small-q4 (fp32 weights).",
        "",
        f"| variant | attention | sentences/s | tokens/s | x (d) | {memory} "
        "| min cos vs (b) | mean cos vs (b) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for v in variants:
        cos = (np.load(scratch / f"{v}.npy") * reference).sum(1)
        vs_st = f"{rate[v] / rate['st']:.2f}" if "st" in rate else "-"
        lines.append(
            f"| {LABELS[v]} | {stats[v]['backend']} | {rate[v]:.1f} | "
            f"{tokens / stats[v]['seconds']:,.0f} | {vs_st} | "
            f"{stats[v]['peak_mb']:,.0f} | {cos.min():.6f} | {cos.mean():.6f} |"
        )
    lines += ["", "| ratio | value | target |", "|---|---:|---:|"]
    for numerator, denominator, name, target in RATIOS:
        if numerator in rate and denominator in rate:
            lines.append(f"| {name} | {rate[numerator] / rate[denominator]:.2f} | {target} |")
    lines += backend_notes(stats, args.device)
    if f1_store:
        lines += f1_section(f1_store, rate)
    return "\n".join(lines) + "\n"


def backend_notes(stats: dict[str, dict], device: str) -> list[str]:
    """What the attention columns imply for the ratios."""
    notes = []
    if {"bf16", "bf16-sdpa"} <= stats.keys() and stats["bf16"]["backend"] == stats["bf16-sdpa"]["backend"]:
        notes.append(
            "- (e) and (g) ran the same attention backend (xFormers is not installed here, or has no "
            "kernels for this torch), so e/g is run-to-run spread, not an xFormers gain."
        )
    if device == "cuda":
        notes.append(
            "- The Hugging Face rows use PyTorch's default SDPA kernel choice: cuDNN attention for bf16 on "
            "Hopper GPUs, which builds a graph for each new batch shape, hence (h) slower than (c). "
            "bitextmine's own paths exclude cuDNN attention."
        )
    return ["", *notes] if notes else []


def f1_section(f1_store: dict, rate: dict[str, float]) -> list[str]:
    """Dev F1 per precision and the verdict: the fastest one within F1_TOLERANCE of fp32 on every pair."""
    f1 = f1_store["f1"]
    precisions = [p for p in f1 if PRECISION_VARIANT[p] in rate]
    lines = [
        "",
        "BUCC-format dev F1 per precision (`../shared/data/bucc-like`, ratio margin, k = 4, exact mining, "
        "best-F1 threshold learned on the same dev split; each precision encodes the splits afresh; "
        f"run {f1_store['when']}):",
        "",
        "| precision | "
        + " | ".join(f"{pair} F1 % (threshold)" for pair in F1_PAIRS)
        + " | splits encoded in s |",
        "|---|" + "---:|" * (len(F1_PAIRS) + 1),
    ]
    for p in precisions:
        cells = [f"{100 * f1[p][pair]['f1']:.2f} ({f1[p][pair]['threshold']:.4f})" for pair in F1_PAIRS]
        seconds = sum(f1[p][pair]["seconds"] for pair in F1_PAIRS)
        lines.append(f"| {p} | " + " | ".join(cells) + f" | {seconds:,.0f} |")
    if "fp32" not in f1:
        return lines
    keeps = [
        p
        for p in precisions
        if all(100 * (f1["fp32"][pair]["f1"] - f1[p][pair]["f1"]) <= F1_TOLERANCE for pair in F1_PAIRS)
    ]
    fastest = max(keeps, key=lambda p: rate[PRECISION_VARIANT[p]])
    verdict = (
        f"- Fastest precision whose dev F1 is within {F1_TOLERANCE} of fp32 on {' and '.join(F1_PAIRS)}: "
    )
    verdict += f"**{fastest}**, {rate[PRECISION_VARIANT[fastest]]:.1f} sentences/s"
    if "st" in rate:
        ratio = rate[PRECISION_VARIANT[fastest]] / rate["st"]
        verdict += (
            f" = {ratio:.2f}x sentence-transformers fp32 (target 2.0: {'met' if ratio >= 2 else 'NOT met'})"
        )
    dropped = [p for p in precisions if p not in keeps]
    if dropped:
        verdict += f"; outside the tolerance: {', '.join(dropped)}"
    return [*lines, "", verdict + "."]


if __name__ == "__main__":
    main()
