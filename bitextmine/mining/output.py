"""The mined output: scored pairs as a zstd-compressed TSV, and the score histogram of the stats."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import zstandard

from bitextmine.faults import crash_point
from bitextmine.files import atomic_open
from bitextmine.workspace.corpus import lookup_rows
from bitextmine.workspace.language import Language

HISTOGRAM_BINS = 50


def write_mined(
    path: Path, pairs: np.ndarray, src: Language, tgt: Language, preview: int = 10, chunk: int = 500_000
) -> list:
    """Write `score<TAB>src<TAB>tgt<TAB>src id<TAB>tgt id` lines for candidate records (CANDIDATE_DTYPE,
    by decreasing score), zstd-compressed, looking sentences up `chunk` pairs at a time.

    Ids are ``SOURCE:LINE``: the index of the input file given to `encode` and its 1-based line number.
    """
    shown = []
    with atomic_open(path, "wb") as raw, zstandard.ZstdCompressor().stream_writer(raw) as out:
        for first in range(0, len(pairs), chunk):
            part = pairs[first : first + chunk]
            src_rows = lookup_rows(src.corpus_dir, src.corpus, part["src"])
            tgt_rows = lookup_rows(tgt.corpus_dir, tgt.corpus, part["tgt"])
            for score, s, t in zip(part["score"].tolist(), src_rows, tgt_rows, strict=True):
                out.write(
                    f"{score:.6f}\t{s.text}\t{t.text}\t{s.source}:{s.line}\t{t.source}:{t.line}\n".encode()
                )
                if len(shown) < preview:
                    shown.append((score, s.text, t.text))
            crash_point("mine.write-chunk")
    return shown


def score_histogram(scores: np.ndarray, chunk: int = 1_000_000) -> dict[str, list[float]]:
    """np.histogram of the finite scores in HISTOGRAM_BINS bins over their range, counted in chunks."""

    def finite_parts() -> Iterator[np.ndarray]:
        for start in range(0, len(scores), chunk):
            part = np.asarray(scores[start : start + chunk])
            yield part[np.isfinite(part)]

    ranges = [(part.min(), part.max()) for part in finite_parts() if len(part)]
    if not ranges:
        return {"edges": [], "counts": []}
    span = (min(low for low, _ in ranges), max(high for _, high in ranges))
    counts = sum(np.histogram(part, bins=HISTOGRAM_BINS, range=span)[0] for part in finite_parts())
    edges = np.histogram_bin_edges(np.zeros(0), bins=HISTOGRAM_BINS, range=span)
    return {"edges": [round(float(e), 6) for e in edges], "counts": counts.tolist()}
