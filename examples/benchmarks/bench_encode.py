"""Encoding throughput on CPU: packed block-diagonal vs padded Hugging Face vs sentence-transformers.

Each variant runs in its own process (so peak RSS is its own) on the same sentences with the same
thread count, writes its vectors, and the parent compares them with the padded input-order reference:

  (a) packed     bitextmine SentenceEncoder, token-budget batches from length-sorted windows
  (b) padded     plain HF forward, batches of 64 in input order (the model card recipe)
  (c) sorted     plain HF forward, batches of 64 after sorting all sentences by token length
  (d) st         sentence-transformers encode(batch_size=64) on the same model dir, if installed

Usage: python examples/benchmarks/bench_encode.py [--n 20000] [--threads 2] [--out results/bench_encode.md]
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
from benchlib import MODEL, SHARED, peak_rss_mb

VARIANTS = ("packed", "padded", "sorted", "st")
BATCH = 64


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


def run_variant(variant: str, sentences: list[str], out_dir: Path) -> None:
    import torch

    encode = {"packed": _packed, "padded": _hf_padded, "sorted": _hf_sorted, "st": _sentence_transformers}[
        variant
    ]()
    with torch.inference_mode():
        encode(sentences[:BATCH])  # warm-up: first-call allocations and kernel selection
        started = time.perf_counter()
        vectors = np.asarray(encode(sentences), dtype=np.float32)
        seconds = time.perf_counter() - started
    np.save(out_dir / f"{variant}.npy", vectors)
    (out_dir / f"{variant}.json").write_text(json.dumps({"seconds": seconds, "peak_rss_mb": peak_rss_mb()}))


def _packed():
    from bitextmine.encoder.encoder import SentenceEncoder

    encoder = SentenceEncoder.load(str(MODEL), device="cpu", packed=True)
    return lambda sentences: encoder.encode(sentences).vectors


def _sentence_transformers():
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(MODEL), device="cpu")
    return lambda sentences: model.encode(
        sentences, batch_size=BATCH, prompt="query: ", normalize_embeddings=True, convert_to_numpy=True
    )


def _hf_sorted():
    return _hf_padded(sort=True)


def _hf_padded(sort: bool = False):
    import torch
    import torch.nn.functional as F
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    model = AutoModel.from_pretrained(MODEL, dtype=torch.float32).eval()

    def encode(sentences: list[str]) -> np.ndarray:
        texts = ["query: " + s for s in sentences]
        order = list(range(len(texts)))
        if sort:
            lengths = [len(ids) for ids in tokenizer(texts, truncation=True, max_length=512)["input_ids"]]
            order.sort(key=lengths.__getitem__)
        out = np.empty((len(texts), model.config.hidden_size), dtype=np.float32)
        for start in range(0, len(order), BATCH):
            idx = order[start : start + BATCH]
            batch = tokenizer(
                [texts[i] for i in idx], padding=True, truncation=True, max_length=512, return_tensors="pt"
            )
            hidden = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            out[idx] = F.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1).numpy()
        return out

    return encode


def machine() -> str:
    with open("/proc/cpuinfo") as fh:
        model = next((line.split(":", 1)[1].strip() for line in fh if "model name" in line), "?")
    import torch

    return f"{model}, {os.cpu_count()} cores, {platform.python_version()}, torch {torch.__version__}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", choices=VARIANTS, action="append")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("results") / "bench_encode.md")
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--scratch", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not MODEL.is_dir():
        sys.exit(f"bench_encode: {MODEL} is absent; the benchmark needs the shared e5 model and data")
    sentences = load_sentences(args.n)
    if args.variant:
        import torch

        torch.set_num_threads(args.threads)
        run_variant(args.variant, sentences, args.scratch)
        return
    variants = [v for v in VARIANTS if v != "st" or _has_sentence_transformers()]
    variants = [v for v in variants if not args.only or v in args.only or v == "padded"]
    with tempfile.TemporaryDirectory() as scratch:
        for variant in variants:
            print(f"running {variant} on {len(sentences)} sentences ...", flush=True)
            subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--variant",
                    variant,
                    "--scratch",
                    scratch,
                    "--n",
                    str(args.n),
                    "--threads",
                    str(args.threads),
                ],
                check=True,
                env={**os.environ, "OMP_NUM_THREADS": str(args.threads)},
            )
        report = build_report(Path(scratch), variants, sentences, args.threads)
    print(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    print(f"written to {args.out}")


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


def build_report(scratch: Path, variants: list[str], sentences: list[str], threads: int) -> str:
    tokens = count_tokens(sentences)
    reference = np.load(scratch / "padded.npy")
    stats = {v: json.loads((scratch / f"{v}.json").read_text()) for v in variants}
    rate = {v: len(sentences) / stats[v]["seconds"] for v in variants}
    labels = {
        "packed": "(a) packed",
        "padded": "(b) padded, input order",
        "sorted": "(c) padded, length-sorted",
        "st": "(d) sentence-transformers",
    }
    lines = [
        f"# bench_encode — {datetime.date.today().isoformat()}",
        "",
        f"Machine: {machine()}; {threads} threads; {len(sentences):,} sentences (de/en news, mixed), "
        f"{tokens:,} tokens with the `query: ` prefix; model multilingual-e5-small-q4, float32.",
        "",
        "| variant | sentences/s | tokens/s | peak RSS (MB) | min cos vs (b) | mean cos vs (b) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for v in variants:
        cos = (np.load(scratch / f"{v}.npy") * reference).sum(1)
        lines.append(
            f"| {labels[v]} | {rate[v]:.1f} | {tokens / stats[v]['seconds']:,.0f} | "
            f"{stats[v]['peak_rss_mb']:,.0f} | {cos.min():.6f} | {cos.mean():.6f} |"
        )
    lines += ["", "| ratio | value | target |", "|---|---:|---:|"]
    targets = {"padded": "a/b >= 2.0", "sorted": "a/c >= 1.15", "st": ""}
    for v, name in (("padded", "a/b"), ("sorted", "a/c"), ("st", "a/d")):
        if "packed" in rate and v in rate:
            lines.append(f"| {name} | {rate['packed'] / rate[v]:.2f} | {targets[v].split('>= ')[-1]} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
