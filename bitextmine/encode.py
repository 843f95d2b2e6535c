"""The encode step: corpus files -> text shards -> embedding shards, resumable shard by shard."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from bitextmine.corpus import (
    CorpusCounts,
    CorpusManifest,
    SourceInfo,
    build_corpus,
    load_manifest,
    read_text_shard,
)
from bitextmine.encoder.encoder import SentenceEncoder
from bitextmine.store import EmbeddingShard, EmbeddingStore, ModelIdentity
from bitextmine.workspace import Workspace


class EncodeReporter(Protocol):
    def warn(self, message: str) -> None: ...
    def corpus_ready(self, manifest: CorpusManifest, rebuilt: bool) -> None: ...
    def encoder_ready(self, encoder: SentenceEncoder, rows_to_encode: int) -> None: ...
    def advance(self, sentences: int, tokens: int) -> None: ...


@dataclass
class EncodeOptions:
    shard_size: int = 100_000
    dedup: bool = False
    max_chars: int = 10_000
    overwrite: bool = False


@dataclass
class EncodeSummary:
    lang: str
    counts: CorpusCounts
    rows: int
    shards: int
    shards_encoded: int
    sentences_encoded: int
    tokens_encoded: int
    truncated: int
    seconds: float  # the whole step
    encode_seconds: float  # the model's share: what sentences/s and tokens/s are measured on
    embedding_dir: Path


def prepare_corpus(
    paths: Sequence[str], lang: str, workspace: Workspace, options: EncodeOptions, warn: Callable[[str], None]
) -> tuple[CorpusManifest, bool]:
    """Reuse complete text shards built from the same inputs; otherwise (re)build them."""
    out_dir = workspace.corpus_dir(lang)
    wanted = CorpusManifest(
        lang=lang,
        sources=[SourceInfo.of(p) for p in paths],
        shard_size=options.shard_size,
        dedup=options.dedup,
        max_chars=options.max_chars,
        shards=[],
        counts=CorpusCounts(),
        complete=False,
    )
    existing = load_manifest(out_dir)
    if existing is not None and existing.complete and existing.same_inputs(wanted) and not options.overwrite:
        return existing, False
    manifest = build_corpus(
        paths,
        lang,
        out_dir,
        shard_size=options.shard_size,
        dedup=options.dedup,
        max_chars=options.max_chars,
        warn=warn,
    )
    return manifest, True


def encode_corpus(
    paths: Sequence[str],
    lang: str,
    workspace: Workspace,
    load_encoder: Callable[[], SentenceEncoder],
    options: EncodeOptions,
    reporter: EncodeReporter,
) -> EncodeSummary:
    """Build (or reuse) the text shards of `lang`, then encode every shard not already encoded."""
    started = time.perf_counter()
    corpus, rebuilt = prepare_corpus(paths, lang, workspace, options, reporter.warn)
    reporter.corpus_ready(corpus, rebuilt)
    encoder = load_encoder()
    store = EmbeddingStore(workspace.embedding_dir(lang), lang)
    identity = ModelIdentity(
        encoder.loaded.name, encoder.fingerprint, encoder.dim, encoder.settings.as_dict(), encoder.precision
    )
    if options.overwrite or _pending(store, corpus) or not _same_model(store, identity):
        store.bind(identity, overwrite=options.overwrite)
    else:  # up to date, whatever precision encoded it; the model's latest path is what `mine` reads
        store.rename_model(identity.name)
    pending = _pending(store, corpus)
    reporter.encoder_ready(encoder, sum(s.rows for s in pending))
    sentences = tokens = 0
    corpus_dir = workspace.corpus_dir(lang)
    encoding_started = time.perf_counter()
    for shard in pending:
        texts, _, _ = read_text_shard(corpus_dir / shard.name)
        encoded = encoder.encode(texts, progress=reporter.advance)
        store.write_shard(
            EmbeddingShard(_stem(shard.name), shard.rows, shard.sha256, encoded.tokens, encoded.truncated),
            encoded.vectors,
        )
        sentences += shard.rows
        tokens += encoded.tokens
    encode_seconds = time.perf_counter() - encoding_started
    store.retain({_stem(s.name) for s in corpus.shards})
    return EncodeSummary(
        lang=lang,
        counts=corpus.counts,
        rows=corpus.rows,
        shards=len(corpus.shards),
        shards_encoded=len(pending),
        sentences_encoded=sentences,
        tokens_encoded=tokens,
        truncated=sum(s.truncated for s in store.manifest.shards.values()),
        seconds=time.perf_counter() - started,
        encode_seconds=encode_seconds,
        embedding_dir=store.root,
    )


def _pending(store: EmbeddingStore, corpus: CorpusManifest) -> list:
    return [s for s in corpus.shards if not store.is_complete(_stem(s.name), s.sha256, s.rows)]


def _same_model(store: EmbeddingStore, identity: ModelIdentity) -> bool:
    return store.manifest is not None and store.manifest.model.fingerprint == identity.fingerprint


def _stem(shard_file: str) -> str:
    return Path(shard_file).stem
