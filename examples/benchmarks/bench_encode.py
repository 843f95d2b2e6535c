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
peak RSS) and writes bench_encode_cuda.{json,md} instead of bench_encode.{json,md}.

Then, per precision and in its own process, the de-en and zh-en bucc-like dev splits are encoded
(no cache), mined exactly and the best-F1 threshold is learned on the same split (oracle F1).

Every timing and F1 is a row of results/bench_encode.json (with its date, machine and commit). A run
replaces all the timing rows (they are compared with each other) and the F1 rows of its precisions
(`--no-f1` re-times the variants and keeps the F1 rows); the report is rewritten from the rows
(`--report-only`: only that).

Usage: python examples/benchmarks/bench_encode.py [--device cpu|cuda] [--n 10000] [--threads 2] [--no-f1]
       python examples/benchmarks/bench_encode.py [--device cpu|cuda] --report-only
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from benchlib import (
    MODEL,
    RESULTS,
    SHARED,
    bucc_split,
    distinct,
    load_rows,
    oracle,
    peak_rss_mb,
    runs_table,
    save_results,
    stamped,
    table,
)

import bitextmine as bm

VARIANTS = ("packed", "padded", "sorted", "st", "bf16", "int8", "bf16-sdpa", "sorted-bf16")
ONLY_ON = {"int8": "cpu", "bf16-sdpa": "cuda", "sorted-bf16": "cuda"}
PRECISION_OF = {"packed": "fp32", "bf16": "bf16", "int8": "int8"}
PRECISION_VARIANT = {precision: variant for variant, precision in PRECISION_OF.items()}
F1_PAIRS = ("de-en", "zh-en")
F1_TOLERANCE = 0.3  # F1 points a faster precision may lose against fp32
DEFAULT_BATCH = {"cpu": 64, "cuda": 256}


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

    encode, backend, max_tokens = _encoder_of(variant, args)
    with torch.inference_mode():
        encode(sentences[: args.batch])  # warm-up: first-call allocations and kernel selection
        if args.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        started = time.perf_counter()
        vectors = np.asarray(encode(sentences), dtype=np.float32)  # on the CPU: the GPU has finished
        seconds = time.perf_counter() - started
    peak = torch.cuda.max_memory_allocated() / 2**20 if args.device == "cuda" else peak_rss_mb()
    np.save(args.scratch / f"{variant}.npy", vectors)
    stats = {"seconds": seconds, "peak_mb": peak, "backend": backend, "max_tokens": max_tokens}
    (args.scratch / f"{variant}.json").write_text(json.dumps(stats))


def _encoder_of(variant: str, args: argparse.Namespace):
    """(encode function, what runs the attention, packed token budget or None) of `variant`."""
    import torch

    if variant in ("padded", "sorted", "sorted-bf16"):
        dtype = torch.bfloat16 if variant == "sorted-bf16" else torch.float32
        encode = _hf_padded(args.device, args.batch, sort=variant != "padded", dtype=dtype)
        return encode, "Hugging Face", None
    if variant == "st":
        return _sentence_transformers(args.device, args.batch), "Hugging Face", None
    encoder = bm.SentenceEncoder.load(
        str(MODEL),
        device=args.device,
        packed=True,
        max_tokens=args.max_tokens,
        attention="sdpa" if variant == "bf16-sdpa" else "auto",
        precision=PRECISION_OF.get(variant, "bf16"),
    )
    return (lambda sentences: encoder.encode(sentences).vectors), encoder.mode, encoder.max_tokens


def run_f1(precision: str, args: argparse.Namespace) -> None:
    """Oracle dev F1 of each F1 pair with vectors encoded at `precision`."""
    encoder = bm.load_encoder(MODEL, device=args.device, max_tokens=args.max_tokens, precision=precision)
    results = {}
    for pair in F1_PAIRS:
        split = bucc_split(pair)
        started = time.perf_counter()
        with tempfile.TemporaryDirectory() as work:  # no cache: every precision encodes
            result = oracle(split, encoder, Path(work))
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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, help="padded batch size [default: 64 on CPU, 256 on CUDA]")
    parser.add_argument("--max-tokens", type=int, help="packed token budget [default: bitextmine's]")
    parser.add_argument("--only", choices=VARIANTS, action="append")
    parser.add_argument("--no-f1", action="store_true", help="skip the dev F1 per precision")
    parser.add_argument("--report-only", action="store_true", help="rewrite the .md from the .json")
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--f1-precision", choices=sorted(set(PRECISION_OF.values())), help=argparse.SUPPRESS)
    parser.add_argument("--scratch", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.batch = args.batch or DEFAULT_BATCH[args.device]
    store = RESULTS / f"{result_stem(args.device)}.json"
    if args.report_only:
        store.with_suffix(".md").write_text(report(load_rows(store)))
        return
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
    """Every variant (and precision's F1) in its own process, then their rows and the report."""
    sentences = load_sentences(args.n)
    variants = [v for v in VARIANTS if v != "st" or _has_sentence_transformers()]
    variants = [v for v in variants if ONLY_ON.get(v, args.device) == args.device]
    variants = [v for v in variants if not args.only or v in args.only or v == "padded"]
    store = RESULTS / f"{result_stem(args.device)}.json"
    with tempfile.TemporaryDirectory() as scratch:
        common = ["--scratch", scratch, "--n", str(args.n), "--threads", str(args.threads)]
        common += ["--device", args.device, "--batch", str(args.batch)]
        common += ["--max-tokens", str(args.max_tokens)] if args.max_tokens else []
        for variant in variants:
            print(f"running {variant} on {len(sentences)} sentences ...", flush=True)
            _child(["--variant", variant, *common], args.threads)
        new = speed_rows(Path(scratch), variants, sentences, args)
        if not args.no_f1:
            for precision in [PRECISION_OF[v] for v in variants if v in PRECISION_OF]:
                print(f"dev F1 at {precision} on {', '.join(F1_PAIRS)} ...", flush=True)
                _child(["--f1-precision", precision, *common], args.threads)
                f1 = json.loads((Path(scratch) / f"f1-{precision}.json").read_text())
                new += [
                    stamped({"kind": "f1", "dtype": precision, "pair": pair, **f1[pair]}) for pair in F1_PAIRS
                ]
    # speed rows are compared with each other: a run replaces them all; F1 rows, those of its precisions
    keys = {_row_key(r) for r in new}
    rows = [r for r in load_rows(store) if r["kind"] == "f1" and _row_key(r) not in keys] + new
    save_results(store, rows, report(rows))


def _row_key(r: dict) -> tuple:
    return (r["kind"], r.get("variant"), r.get("dtype"), r.get("pair"))


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


def speed_rows(
    scratch: Path, variants: list[str], sentences: list[str], args: argparse.Namespace
) -> list[dict]:
    """A row a variant: its speed and memory, and how close its vectors are to the padded reference's."""
    tokens = count_tokens(sentences)
    reference = np.load(scratch / "padded.npy")
    rows = []
    for v in variants:
        stats = json.loads((scratch / f"{v}.json").read_text())
        cos = (np.load(scratch / f"{v}.npy") * reference).sum(1)
        row = {"kind": "speed", "variant": v, "label": LABELS[v], "attention": stats["backend"]}
        row |= {
            "device": args.device,
            "threads": args.threads,
            "batch": args.batch,
            "max_tokens": stats["max_tokens"],  # packed variants only
        }
        row |= {"sentences": len(sentences), "tokens": tokens, "seconds": round(stats["seconds"], 2)}
        row |= {"sentences_per_s": round(len(sentences) / stats["seconds"], 1)}
        row |= {"tokens_per_s": round(tokens / stats["seconds"]), "peak_mb": round(stats["peak_mb"])}
        rows.append(
            stamped(row | {"min_cos": round(float(cos.min()), 6), "mean_cos": round(float(cos.mean()), 6)})
        )
    return rows


def report(rows: list[dict]) -> str:
    speed = sorted((r for r in rows if r["kind"] == "speed"), key=lambda r: VARIANTS.index(r["variant"]))
    f1 = [r for r in rows if r["kind"] == "f1"]
    rate = {r["variant"]: r["sentences_per_s"] for r in speed}
    device = speed[0]["device"] if speed else "cpu"
    memory = "peak GPU memory (MB)" if device == "cuda" else "peak RSS (MB)"
    ratios = [
        f"{name} {rate[a] / rate[b]:.2f}" + (f" (target {target})" if target else "")
        for a, b, name, target in RATIOS
        if a in rate and b in rate
    ]
    settings = [
        f"{distinct(speed, 'threads')} threads",
        f"padded batches of {distinct(speed, 'batch')}",
        f"packed token budget {distinct([r for r in speed if r.get('max_tokens')] or speed, 'max_tokens')}",
        f"{distinct(speed, 'sentences')} sentences (de/en news, mixed), {distinct(speed, 'tokens')} tokens "
        "with the `query: ` prefix",
    ]
    lines = [
        f"# {result_stem(device)}: encoding speed and each precision's dev F1",
        "",
        f"Produced by `examples/benchmarks/bench_encode.py{' --device cuda' if device == 'cuda' else ''}` "
        "(`make bench-encode` on CPU); each row's date, machine and commit: the JSON. Model "
        "multilingual-e5-small-q4 (fp32 weights); "
        + "; ".join(text for text in settings if "?" not in text)
        + ".",
        "",
        "## How fast is each encoding path?",
        "",
        f"Speed ratios: {', '.join(ratios)}." if ratios else "No ratio: a variant of each pair is missing.",
        "",
        *table(
            f"variant | attention | sentences/s | tokens/s | x (d) | {memory} | min cos vs (b) "
            "| mean cos vs (b)",
            "llrrrrrr",
            (
                f"{r['label']} | {r.get('attention') or '-'} | {r['sentences_per_s']:.1f} "
                f"| {r['tokens_per_s']:,} | {_vs_st(r, rate)} | {r['peak_mb']:,} | {r['min_cos']:.6f} "
                f"| {r['mean_cos']:.6f}"
                for r in speed
            ),
        ),
        *backend_notes({r["variant"]: {"backend": r.get("attention")} for r in speed}, device),
    ]
    if f1:
        lines += f1_section(f1, rate)
    return "\n".join([*lines, "", *runs_table(rows, _row_label)]) + "\n"


def _vs_st(r: dict, rate: dict[str, float]) -> str:
    return f"{r['sentences_per_s'] / rate['st']:.2f}" if "st" in rate else "-"


def _row_label(r: dict) -> str:
    return r["variant"] if r["kind"] == "speed" else f"{r['dtype']} {r['pair']} F1"


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


def f1_section(rows: list[dict], rate: dict[str, float]) -> list[str]:
    """Dev F1 per precision and the verdict: the fastest one within F1_TOLERANCE of fp32 on every pair."""
    f1 = {(r["dtype"], r["pair"]): r for r in rows}
    precisions = [p for p in PRECISION_VARIANT if all((p, pair) in f1 for pair in F1_PAIRS)]
    lines = [
        "",
        "## Does each precision keep the dev F1?",
        "",
    ]
    timed = [p for p in precisions if PRECISION_VARIANT[p] in rate]
    keeps = [
        p
        for p in timed
        if "fp32" in precisions
        and all(100 * (f1["fp32", pair]["f1"] - f1[p, pair]["f1"]) <= F1_TOLERANCE for pair in F1_PAIRS)
    ]
    if keeps:
        fastest = max(keeps, key=lambda p: rate[PRECISION_VARIANT[p]])
        verdict = (
            f"Fastest precision whose dev F1 is within {F1_TOLERANCE} of fp32 on {' and '.join(F1_PAIRS)}: "
        )
        verdict += f"**{fastest}**, {rate[PRECISION_VARIANT[fastest]]:.1f} sentences/s"
        if "st" in rate:
            ratio = rate[PRECISION_VARIANT[fastest]] / rate["st"]
            met = "met" if ratio >= 2 else "NOT met"
            verdict += f" = {ratio:.2f}x sentence-transformers fp32 (target 2.0: {met})"
        dropped = [p for p in timed if p not in keeps]
        lines.append(verdict + (f"; outside the tolerance: {', '.join(dropped)}." if dropped else "."))
    else:
        lines.append(
            f"No precision next to an fp32 row and its speed to compare with (tolerance {F1_TOLERANCE})."
        )
    lines += [
        "",
        *table(
            "precision | "
            + " | ".join(f"{pair} F1 % (threshold)" for pair in F1_PAIRS)
            + " | splits encoded in s",
            "l" + "r" * (len(F1_PAIRS) + 1),
            (
                f"{p} | "
                + " | ".join(
                    f"{100 * f1[p, pair]['f1']:.2f} ({f1[p, pair]['threshold']:.4f})" for pair in F1_PAIRS
                )
                + f" | {sum(f1[p, pair]['seconds'] for pair in F1_PAIRS):,.0f}"
                for p in precisions
            ),
        ),
        "",
        "BUCC-format dev splits (`../shared/data/bucc-like`), ratio margin, k = 4, exact mining, best-F1 "
        "threshold learned on the same dev split; each precision encodes the splits afresh.",
    ]
    return lines


if __name__ == "__main__":
    main()
