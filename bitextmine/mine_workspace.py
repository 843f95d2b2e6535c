"""The `mine SRC TGT` step over a workspace: embeddings and indexes in, mined pairs and stats out."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import zstandard

from bitextmine.corpus import CorpusManifest, load_manifest, lookup_rows
from bitextmine.encoder.loading import resolve_model_dir
from bitextmine.errors import BitextmineError
from bitextmine.fsutil import atomic_open, write_json
from bitextmine.index import load_index, search
from bitextmine.mine import Candidates, Neighbours, find_neighbours, select_candidates
from bitextmine.store import EmbeddingStore, ShardedVectors
from bitextmine.thresholds import calibrated_threshold
from bitextmine.workspace import Workspace

HISTOGRAM_BINS = 50


@dataclass
class MineOptions:
    k: int = 4
    margin: str = "ratio"
    strategy: str = "max"
    threshold: float | str | None = (
        None  # a number, "auto" (calibrated, from the model dir) or None (keep all)
    )
    nprobe: int | None = None
    block_rows: int = 16_384
    model: str | None = None  # where "auto" looks for thresholds; default: the model that made the embeddings


@dataclass
class Language:
    lang: str
    vectors: ShardedVectors
    corpus: CorpusManifest
    corpus_dir: Path


@dataclass
class MineSummary:
    pair: str
    src_rows: int
    tgt_rows: int
    candidates: int
    kept: int
    threshold: float | None
    output: Path
    stats: Path
    seconds: float
    preview: list[tuple[float, str, str]]


def open_language(workspace: Workspace, lang: str) -> Language:
    store = EmbeddingStore(workspace.embedding_dir(lang), lang)
    corpus = load_manifest(workspace.corpus_dir(lang))
    if store.manifest is None or corpus is None or not store.manifest.shards:
        raise BitextmineError(
            f"no embeddings for '{lang}' in {workspace.root}: run `bitextmine encode FILE... --lang {lang}`"
        )
    vectors = store.vectors()
    if len(vectors) != corpus.rows:
        raise BitextmineError(
            f"embeddings of '{lang}' cover {len(vectors)} of {corpus.rows} sentences: "
            f"rerun `bitextmine encode` for '{lang}' to finish it"
        )
    return Language(lang, vectors, corpus, workspace.corpus_dir(lang))


def recall_queries(
    workspace: Workspace, lang: str, source: str | None, count: int, seed: int = 0
) -> tuple[str, np.ndarray] | None:
    """`count` random vectors of the language whose queries will search `lang`'s index, as (lang, rows).

    `source` None picks English, else the first other encoded language made by the same model; "self"
    (or no such language) gives None: the index measures recall on its own rows.
    """
    if source == "self":
        return None
    indexed = open_language(workspace, lang).vectors
    if source is None:
        others = sorted((o for o in workspace.encoded_languages() if o != lang), key=lambda o: o != "en")
        same_model = [o for o in others if _same_model(workspace, o, indexed)]
        if not same_model:
            return None
        source = same_model[0]
    other = open_language(workspace, source).vectors
    if other.model.fingerprint != indexed.model.fingerprint:
        raise BitextmineError(
            f"cannot measure recall with '{source}': it was encoded with {other.model.describe()}, "
            f"'{lang}' with {indexed.model.describe()}"
        )
    rows = np.random.default_rng(seed).choice(len(other), size=min(count, len(other)), replace=False)
    return source, other.take(np.sort(rows))


def _same_model(workspace: Workspace, lang: str, vectors: ShardedVectors) -> bool:
    store = EmbeddingStore(workspace.embedding_dir(lang), lang)
    return store.manifest is not None and store.manifest.model.fingerprint == vectors.model.fingerprint


def resolve_threshold(options: MineOptions, src: Language, pair: str) -> float | None:
    if options.threshold != "auto":
        return None if options.threshold is None else float(options.threshold)
    model_dir = resolve_model_dir(options.model or src.vectors.model.name)
    return calibrated_threshold(model_dir, options.margin, pair)


def mine_workspace(
    workspace: Workspace,
    src_lang: str,
    tgt_lang: str,
    options: MineOptions,
    progress: Callable[[int], None] | None = None,
) -> MineSummary:
    """Mine SRC against TGT with their indexes and write WORK/mined/SRC-TGT.tsv.zst and its stats."""
    started = time.perf_counter()
    pair = f"{src_lang}-{tgt_lang}"
    src, tgt = open_language(workspace, src_lang), open_language(workspace, tgt_lang)
    if src.vectors.model.fingerprint != tgt.vectors.model.fingerprint:
        raise BitextmineError(
            f"'{src_lang}' was encoded with {src.vectors.model.describe()} but '{tgt_lang}' with "
            f"{tgt.vectors.model.describe()}: encode both with the same model"
        )
    threshold = resolve_threshold(options, src, pair)
    src_index, src_info = load_index(workspace.index_dir(), src_lang, src.vectors, nprobe=options.nprobe)
    tgt_index, tgt_info = load_index(workspace.index_dir(), tgt_lang, tgt.vectors, nprobe=options.nprobe)

    def neighbours(query: Language, base: Language, base_index, base_info) -> Neighbours:
        search_base = lambda q, k: search(base_index, q, k)  # noqa: E731
        blocks = query.vectors.blocks(options.block_rows)
        return find_neighbours(
            blocks, len(query.vectors), search_base, base.vectors.take, options.k, progress, base_info.fetch
        )

    fwd = neighbours(src, tgt, tgt_index, tgt_info)
    bwd = neighbours(tgt, src, src_index, src_info)
    candidates = select_candidates(fwd, bwd, options.margin, options.strategy)
    kept = candidates if threshold is None else candidates.above(threshold)
    output = workspace.mined_dir() / f"{pair}.tsv.zst"
    preview = write_mined(output, kept, src, tgt)
    stats_path = workspace.mined_dir() / f"{pair}.stats.json"
    seconds = time.perf_counter() - started
    write_json(
        stats_path,
        {
            "pair": pair,
            "options": asdict(options),
            "threshold": threshold,
            "counts": {
                "src_sentences": len(src.vectors),
                "tgt_sentences": len(tgt.vectors),
                "one_to_one_candidates": len(candidates),
                "kept": len(kept),
            },
            "indexes": {src_lang: src_info.to_json(), tgt_lang: tgt_info.to_json()},
            "score_histogram": _histogram(candidates.score),
            "seconds": seconds,
        },
    )
    return MineSummary(
        pair,
        len(src.vectors),
        len(tgt.vectors),
        len(candidates),
        len(kept),
        threshold,
        output,
        stats_path,
        seconds,
        preview,
    )


def write_mined(path: Path, pairs: Candidates, src: Language, tgt: Language, preview: int = 10) -> list:
    """Write `score<TAB>src<TAB>tgt<TAB>src id<TAB>tgt id` lines by decreasing score, zstd-compressed.

    Ids are ``SOURCE:LINE``: the index of the input file given to `encode` and its 1-based line number.
    """
    src_rows = lookup_rows(src.corpus_dir, src.corpus, pairs.src)
    tgt_rows = lookup_rows(tgt.corpus_dir, tgt.corpus, pairs.tgt)
    with atomic_open(path, "wb") as raw, zstandard.ZstdCompressor().stream_writer(raw) as out:
        for score, s, t in zip(pairs.score.tolist(), src_rows, tgt_rows, strict=True):
            out.write(f"{score:.6f}\t{s.text}\t{t.text}\t{s.source}:{s.line}\t{t.source}:{t.line}\n".encode())
    return [
        (score, s.text, t.text)
        for score, s, t in zip(pairs.score[:preview].tolist(), src_rows, tgt_rows, strict=False)
    ]


def _histogram(scores: np.ndarray) -> dict[str, list[float]]:
    finite = scores[np.isfinite(scores)]
    if not len(finite):
        return {"edges": [], "counts": []}
    counts, edges = np.histogram(finite, bins=HISTOGRAM_BINS)
    return {"edges": [round(float(e), 6) for e in edges], "counts": counts.tolist()}
