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
    TextShard,
    build_corpus,
    load_manifest,
    read_text_shard,
)
from bitextmine.encoder.batching import DEFAULT_MAX_TOKENS
from bitextmine.encoder.encoder import SentenceEncoder
from bitextmine.errors import BitextmineError
from bitextmine.launcher import ShardJob
from bitextmine.lock import workspace_locks
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


@dataclass(frozen=True)
class EncoderSpec:
    """How to load the encoder: what a shard job on another machine needs to rebuild it."""

    model: str
    device: str = "auto"
    precision: str = "fp32"
    overrides: tuple[tuple[str, object], ...] = ()
    max_tokens: int = DEFAULT_MAX_TOKENS
    packed: bool | None = None

    def load(self) -> SentenceEncoder:
        return SentenceEncoder.load(
            self.model,
            device=self.device,
            overrides=dict(self.overrides),
            max_tokens=self.max_tokens,
            packed=self.packed,
            precision=self.precision,
        )


def encode_corpus(
    paths: Sequence[str],
    lang: str,
    workspace: Workspace,
    spec: EncoderSpec,
    options: EncodeOptions,
    reporter: EncodeReporter,
    run_jobs: Callable[[list[ShardJob]], object] | None = None,
) -> EncodeSummary:
    """Build (or reuse) the text shards of `lang`, then encode every shard not already encoded: here,
    or as shard jobs handed to `run_jobs` (each loads the encoder from `spec`)."""
    with workspace_locks(workspace.root, write=[f"lang-{lang}"]):
        return _encode_corpus(paths, lang, workspace, spec, options, reporter, run_jobs)


def _encode_corpus(
    paths: Sequence[str],
    lang: str,
    workspace: Workspace,
    spec: EncoderSpec,
    options: EncodeOptions,
    reporter: EncodeReporter,
    run_jobs: Callable[[list[ShardJob]], object] | None,
) -> EncodeSummary:
    started = time.perf_counter()
    corpus, rebuilt = prepare_corpus(paths, lang, workspace, options, reporter.warn)
    reporter.corpus_ready(corpus, rebuilt)
    encoder = spec.load()
    store = EmbeddingStore(workspace.embedding_dir(lang), lang)
    identity = model_identity(encoder)
    if options.overwrite or _pending(store, corpus) or not _same_model(store, identity):
        store.bind(identity, overwrite=options.overwrite)
    else:  # up to date, whatever precision encoded it; the model's latest path is what `mine` reads
        store.rename_model(identity.name)
    pending = _pending(store, corpus)
    reporter.encoder_ready(encoder, sum(s.rows for s in pending))
    corpus_dir = workspace.corpus_dir(lang)
    encoding_started = time.perf_counter()
    if run_jobs is None:
        tokens = sum(encode_shard(encoder, corpus_dir, shard, store, reporter.advance) for shard in pending)
    else:
        del encoder  # the jobs load their own
        jobs = [
            ShardJob(f"encode {lang} {s.name}", encode_shard_job, (spec, workspace.root, lang, s))
            for s in pending
        ]
        tokens = sum(run_jobs(jobs) or [])
        store = EmbeddingStore(workspace.embedding_dir(lang), lang)
    encode_seconds = time.perf_counter() - encoding_started
    store.retain({_stem(s.name) for s in corpus.shards})
    return EncodeSummary(
        lang=lang,
        counts=corpus.counts,
        rows=corpus.rows,
        shards=len(corpus.shards),
        shards_encoded=len(pending),
        sentences_encoded=sum(s.rows for s in pending),
        tokens_encoded=tokens,
        truncated=sum(s.truncated for s in store.manifest.shards.values()),
        seconds=time.perf_counter() - started,
        encode_seconds=encode_seconds,
        embedding_dir=store.root,
    )


def model_identity(encoder: SentenceEncoder) -> ModelIdentity:
    return ModelIdentity(
        encoder.loaded.name, encoder.fingerprint, encoder.dim, encoder.settings.as_dict(), encoder.precision
    )


def encode_shard(
    encoder: SentenceEncoder,
    corpus_dir: Path,
    shard: TextShard,
    store: EmbeddingStore,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Encode one text shard into the store (vectors, then the shard's record); returns its tokens."""
    texts, _, _ = read_text_shard(corpus_dir / shard.name)
    encoded = encoder.encode(texts, progress=progress)
    store.write_shard(
        EmbeddingShard(_stem(shard.name), shard.rows, shard.sha256, encoded.tokens, encoded.truncated),
        encoded.vectors,
    )
    return encoded.tokens


def encode_shard_job(spec: EncoderSpec, root: Path, lang: str, shard: TextShard) -> int:
    """Shard job: load the encoder and encode one text shard of `lang` in the workspace at `root`."""
    workspace = Workspace(root)
    encoder = spec.load()
    store = EmbeddingStore(workspace.embedding_dir(lang), lang)
    if model_identity(encoder).fingerprint != store.model.fingerprint:
        raise BitextmineError(
            f"{store.root}: the encoder loaded from {spec.model} is not {store.model.describe()} "
            "that the submitting run bound here (the model changed since?)"
        )
    return encode_shard(encoder, workspace.corpus_dir(lang), shard, store)


def _pending(store: EmbeddingStore, corpus: CorpusManifest) -> list:
    return [s for s in corpus.shards if not store.is_complete(_stem(s.name), s.sha256, s.rows)]


def _same_model(store: EmbeddingStore, identity: ModelIdentity) -> bool:
    return store.manifest is not None and store.manifest.model.fingerprint == identity.fingerprint


def _stem(shard_file: str) -> str:
    return Path(shard_file).stem
