"""The encode step: corpus files -> text shards -> embedding shards, resumable shard by shard."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from bitextmine.corpus.build import plan_corpus
from bitextmine.corpus.parts import build_corpus_from_parts
from bitextmine.corpus.settings import CorpusSettings
from bitextmine.encoder.encoder import SentenceEncoder
from bitextmine.encoder.spec import EncoderSpec, LoadedEncoder
from bitextmine.errors import BitextmineError, BitextmineValueError, warn_user
from bitextmine.launch.config import LauncherConfig
from bitextmine.launch.jobs import Job, run_jobs
from bitextmine.progress import Advance, Progress, ProgressDisplay
from bitextmine.text.languages import check_lang
from bitextmine.text.lid import (
    DEFAULT_LID_RULE,
    LID_RULES,
    RULE_CONFIDENCE,
    LidFilter,
    knows,
    lid_code,
    model_id,
)
from bitextmine.text.reader import STDIN, Columns, CorpusCounts, check_readable
from bitextmine.workspace.corpus import CorpusManifest, TextShard, load_manifest, read_text_shard
from bitextmine.workspace.embeddings import EmbeddingShard, EmbeddingStore, ModelIdentity
from bitextmine.workspace.external import VectorsFile, external_model, open_vectors
from bitextmine.workspace.layout import Workspace, check_workspace
from bitextmine.workspace.locks import workspace_locks

_log = logging.getLogger(__name__)
InputPaths = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


@dataclass
class EncodeOptions:
    shard_size: int = CorpusSettings.shard_size
    dedup: bool = CorpusSettings.dedup
    max_chars: int = CorpusSettings.max_chars
    overwrite: bool = False
    columns: Columns | None = None  # TSV input: the sentence column and a meta column to carry
    lid: str | None = None  # reject, accept or off (LidFilter); None: reject if py3langid knows the language
    lid_lang: str | None = None  # the language identified, if not the one encoded
    lid_min_confidence: float | None = None  # None: the rule's floor (RULE_CONFIDENCE)
    corpus_workers: int = 1  # local processes reading input files at once (a launcher runs its own jobs)

    def __post_init__(self) -> None:
        if self.lid not in (None, *LID_RULES, "off"):
            raise BitextmineValueError(
                f"unknown language identification rule {self.lid!r}; choose {', '.join(LID_RULES)} or off"
            )
        if self.lid == "off" and (self.lid_lang is not None or self.lid_min_confidence is not None):
            raise BitextmineValueError(
                "--lid-lang and --lid-min-confidence apply to language identification, not to --lid off"
            )
        if self.lid_min_confidence is not None and not 0 <= self.lid_min_confidence <= 1:
            raise BitextmineValueError(
                f"the LID confidence floor must be in [0, 1], not {self.lid_min_confidence}"
            )

    def lid_filter(self, lang: str, warn: Callable[[str], None] = warn_user) -> LidFilter | None:
        """The language filter of `lang`'s corpus; None when off, or by default for a language py3langid
        does not know (said through `warn`)."""
        rule = self.lid or DEFAULT_LID_RULE
        if rule == "off":
            return None
        identified = self.lid_lang or lang
        if self.lid is None and not knows(identified):
            warn(
                f"language identification does not know {identified!r}: no line is dropped as another "
                "language (--lid-lang names the language, --lid off silences this)"
            )
            return None
        floor = RULE_CONFIDENCE[rule] if self.lid_min_confidence is None else self.lid_min_confidence
        return LidFilter(lid_code(identified), floor, model_id(), rule)

    def corpus_settings(self, lang: str, warn: Callable[[str], None] = warn_user) -> CorpusSettings:
        """How `lang`'s inputs become its corpus (`lid_filter` its language filter)."""
        lid = self.lid_filter(lang, warn)
        return CorpusSettings(self.shard_size, self.dedup, self.max_chars, self.columns, lid)


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
    forwards: list[str]  # the forwards that encoded the shards (`SentenceEncoder.mode`), one per node setup
    seconds: float  # the whole step
    encode_seconds: float  # the model's share: what sentences/s and tokens/s are measured on
    embedding_dir: Path

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "embedding_dir": str(self.embedding_dir)}


def prepare_corpus(
    paths: Sequence[str],
    lang: str,
    workspace: Workspace,
    options: EncodeOptions,
    warn: Callable[[str], None],
    launcher: LauncherConfig | None = None,
) -> tuple[CorpusManifest, bool]:
    """Reuse complete text shards built from the same inputs; otherwise (re)build them, one part job an
    input file (run by `launcher`, or by `options.corpus_workers` processes here), then a merge."""
    out_dir = workspace.corpus_dir(lang)
    settings = options.corpus_settings(lang, warn)
    wanted = plan_corpus(paths, lang, settings)
    existing = load_manifest(out_dir)
    if existing is not None and existing.complete and existing.same_inputs(wanted) and not options.overwrite:
        return existing, False
    _log.debug("reading %s into %s", ", ".join(map(str, paths)), out_dir)
    parts_dir, workers = workspace.corpus_parts_dir(lang), options.corpus_workers
    manifest = build_corpus_from_parts(
        paths, lang, out_dir, parts_dir, settings, warn=warn, launcher=launcher, workers=workers
    )
    return manifest, True


def _refuse_rebuilt_inputs(paths: Sequence[str | Path], lang: str, workspace: Workspace) -> None:
    """Refuse, before anything is removed, an input in the folders that encoding `lang` rebuilds (its
    text shards, corpus parts and embeddings): they would be deleted before being read."""
    rebuilt = [workspace.corpus_dir(lang), workspace.corpus_parts_dir(lang), workspace.embedding_dir(lang)]
    for path in paths:
        if str(path) == STDIN:
            continue
        real = os.path.realpath(path)
        for folder in rebuilt:
            if Path(real).is_relative_to(os.path.realpath(folder)):
                raise BitextmineError(
                    f"{path}: in {folder}, which encoding '{lang}' rebuilds; copy the file out of the "
                    "workspace and encode the copy"
                )


def encode(
    workspace: Workspace,
    paths: InputPaths,
    lang: str,
    model: str | os.PathLike[str] | EncoderSpec | LoadedEncoder,
    options: EncodeOptions | None = None,
    progress: Progress | None = None,
    *,
    launcher: LauncherConfig | None = None,
    show_progress_bar: bool = False,
) -> EncodeSummary:
    """Encode corpus files of `lang` (one path, or a list) into the workspace: build (or reuse) its text
    shards, then encode every shard not already encoded, one job a shard, in this process or where
    `launcher` sends them (each job loads the encoder from `model`: a model dir or hub id, or an
    EncoderSpec; a LoadedEncoder lends its loaded encoder to several steps). `progress` counts the
    sentences encoded; `show_progress_bar` shows them on stderr."""
    check_workspace(workspace, "encode")
    loaded = loaded_encoder(model)
    paths = input_paths(paths)
    if show_progress_bar and progress is not None:
        raise BitextmineValueError("encode: give show_progress_bar=True or a progress, not both")
    _refuse_rebuilt_inputs(paths, lang, workspace)
    with workspace_locks(workspace, write=[f"lang-{check_lang(lang)}"]):
        shown = ProgressDisplay() if show_progress_bar else progress or Progress()
        return _encode(paths, lang, workspace, loaded, options or EncodeOptions(), shown, launcher)


def input_paths(paths: InputPaths) -> list[str]:
    """The input files as strings: one path (a string is a path, not a sequence of characters) or several."""
    if isinstance(paths, str | os.PathLike):
        return [os.fspath(paths)]
    return [os.fspath(path) for path in paths]


def loaded_encoder(model: str | os.PathLike[str] | EncoderSpec | LoadedEncoder) -> LoadedEncoder:
    """`model` as a LoadedEncoder (loaded at its first use), for one step or several."""
    if isinstance(model, LoadedEncoder):
        return model
    return LoadedEncoder(model if isinstance(model, EncoderSpec) else EncoderSpec(_model_name(model)))


def _model_name(model: object) -> str:
    if not isinstance(model, str | os.PathLike):
        raise TypeError(
            f"model: expected a model dir, a hub id or an EncoderSpec, not a {type(model).__name__}; "
            "vectors made with another encoder go into a workspace through import_embeddings"
        )
    return os.fspath(model)


def _encode(
    paths: Sequence[str],
    lang: str,
    workspace: Workspace,
    loaded: LoadedEncoder,
    options: EncodeOptions,
    progress: Progress,
    launcher: LauncherConfig | None,
) -> EncodeSummary:
    started = time.perf_counter()
    for path in paths:  # a missing input fails before the model loads, a missing model before the text shards
        check_readable(path)
    spec, encoder = loaded.spec, loaded.get()
    corpus, rebuilt = prepare_corpus(paths, lang, workspace, options, warn_user, launcher)
    _log_corpus(corpus, rebuilt)
    if encoder.precision_check is not None and not encoder.precision_check.cached:
        _log.info(encoder.precision_check.describe())
    _log.info(encoder.describe())
    store = EmbeddingStore(workspace.embedding_dir(lang), lang)
    identity = model_identity(encoder)
    if options.overwrite or _pending(store, corpus) or not _same_model(store, identity):
        store.bind(identity, overwrite=options.overwrite)
    else:  # up to date, whatever precision encoded it; the model's latest path is what `mine` reads
        store.rename_model(identity.name)
    pending = _pending(store, corpus)
    store.remove_shards({_stem(s.name) for s in pending})  # stale vectors of the same names
    # precision "auto" is resolved here, once: jobs on other nodes must not choose their own
    shared = LoadedEncoder(replace(spec, precision=identity.precision), encoder)  # jobs run here share it
    jobs = [
        Job(
            f"encode {lang} {s.name}",
            encode_shard_job,
            (shared, workspace.root, lang, s),
            outputs=store.shard_files(_stem(s.name)),
            work=s.rows,
        )
        for s in pending
    ]
    encoding_started = time.perf_counter()
    with progress.stage(f"encoding {lang}", sum(s.rows for s in pending), rates=True):
        tokens = sum(run_jobs(jobs, launcher, "encode", progress.advance))  # none is done: remove_shards
    store = EmbeddingStore(workspace.embedding_dir(lang), lang)
    return _finish(lang, corpus, pending, store, tokens, started, encoding_started)


def import_embeddings(
    workspace: Workspace,
    paths: InputPaths,
    lang: str,
    vectors: str | Path,
    *,
    model_name: str,
    dim: int | None = None,
    dtype: str | None = None,
    options: EncodeOptions | None = None,
    progress: Progress | None = None,
) -> EncodeSummary:
    """Encode with vectors made elsewhere: the text of one corpus file goes through the same corpus pass as
    `encode`, and each kept line takes its row of `vectors` (a .npy file, or raw `dtype` rows of `dim`
    values: one row per line of the input, empty lines included), L2-normalised and stored as `encode`
    stores its own. `model_name` names the model that made the vectors: languages imported under the same
    name can be mined together. Resumable shard by shard, as `encode` is."""
    check_workspace(workspace, "import_embeddings")
    paths = input_paths(paths)
    if len(paths) != 1 or paths[0] == STDIN:
        raise BitextmineError(
            f"{vectors}: --embeddings takes exactly one input file (not stdin), one row a line"
        )
    if not model_name:
        raise BitextmineError(
            f"{vectors}: --embeddings needs --model-name, the model that made these vectors"
        )
    _refuse_rebuilt_inputs([*paths, vectors], lang, workspace)
    with workspace_locks(workspace, write=[f"lang-{check_lang(lang)}"]):
        source = open_vectors(vectors, dim, dtype)
        return _import(
            paths,
            lang,
            workspace,
            source,
            model_name,
            options or EncodeOptions(),
            progress or Progress(),
        )


def _import(
    paths: Sequence[str],
    lang: str,
    workspace: Workspace,
    source: VectorsFile,
    model_name: str,
    options: EncodeOptions,
    progress: Progress,
) -> EncodeSummary:
    started = time.perf_counter()
    corpus, rebuilt = prepare_corpus(paths, lang, workspace, options, warn_user)
    _log_corpus(corpus, rebuilt)
    if source.rows != corpus.counts.lines:
        raise BitextmineError(
            f"{source.path} has {source.rows:,} rows but {paths[0]} has {corpus.counts.lines:,} lines: "
            "give one vector a line, empty lines included"
        )
    store = EmbeddingStore(workspace.embedding_dir(lang), lang)
    identity = external_model(model_name, source)
    changed = store.manifest is None or store.manifest.model != identity
    store.bind(identity, overwrite=options.overwrite)
    if changed:  # another vectors file under the same name: none of the shards is up to date
        store.remove_shards(set(store.manifest.shards))
    pending = _pending(store, corpus)
    store.remove_shards({_stem(s.name) for s in pending})
    shape = f"{source.rows:,} x {source.dim}, {source.vectors.dtype}"
    _log.info("vectors %s (%s) of model %s", source.path, shape, identity.name)
    importing_started = time.perf_counter()
    jobs = [  # in this process: the vectors file is memory-mapped here
        Job(
            f"import {lang} {s.name}",
            import_shard,
            (source, workspace.corpus_dir(lang), s, store),
            outputs=store.shard_files(_stem(s.name)),
            work=s.rows,
        )
        for s in pending
    ]
    with progress.stage(f"importing {lang}", sum(s.rows for s in pending)):
        run_jobs(jobs, None, "encode", progress.advance)
    return _finish(lang, corpus, pending, store, 0, started, importing_started)


def import_shard(
    source: VectorsFile,
    corpus_dir: Path,
    shard: TextShard,
    store: EmbeddingStore,
    progress: Advance | None = None,
) -> None:
    """Job: store the rows of `source` that the text shard's lines pick (line N: row N-1), the record last."""
    _, _, lines = read_text_shard(corpus_dir / shard.name, shard.sha256)
    vectors = source.unit_rows(lines - 1)
    store.write_shard(EmbeddingShard(_stem(shard.name), shard.rows, shard.sha256, 0, 0), vectors)
    if progress:
        progress(shard.rows)


def _finish(
    lang: str,
    corpus: CorpusManifest,
    pending: list[TextShard],
    store: EmbeddingStore,
    tokens: int,
    started: float,
    work_started: float,
) -> EncodeSummary:
    """Drop shards of a shrunken corpus, then sum up the step (`work_started`: when the vectors began)."""
    work_seconds = time.perf_counter() - work_started
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
        forwards=sorted({s.forward for s in store.manifest.shards.values() if s.forward}),
        seconds=time.perf_counter() - started,
        encode_seconds=work_seconds,
        embedding_dir=store.root,
    )


def _log_corpus(corpus: CorpusManifest, rebuilt: bool) -> None:
    verb = "built" if rebuilt else "reusing"
    _log.info(
        "%s %d text shard(s), %s sentences of '%s'", verb, len(corpus.shards), f"{corpus.rows:,}", corpus.lang
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
    progress: Advance | None = None,
) -> int:
    """Encode one text shard into the store (vectors, then the shard's record); returns its tokens."""
    texts, _, _ = read_text_shard(corpus_dir / shard.name, shard.sha256)
    encoded = encoder.encode(texts, progress=progress)
    store.write_shard(
        EmbeddingShard(
            _stem(shard.name), shard.rows, shard.sha256, encoded.tokens, encoded.truncated, encoder.mode
        ),
        encoded.vectors,
    )
    return encoded.tokens


def encode_shard_job(
    shared: LoadedEncoder, root: Path, lang: str, shard: TextShard, progress: Advance | None = None
) -> int:
    """Job: encode one text shard of `lang` in the workspace at `root` (the record last); its tokens."""
    workspace = Workspace(root)
    encoder = shared.get()
    store = EmbeddingStore(workspace.embedding_dir(lang), lang)
    loaded = model_identity(encoder)
    if loaded.fingerprint != store.model.fingerprint:
        raise BitextmineError(
            f"{store.root}: the encoder loaded from {shared.spec.model} is not {store.model.describe()} "
            "that the submitting run bound here (the model changed since?)"
        )
    if loaded.precision != store.model.precision:
        raise BitextmineError(
            f"{store.root}: this job runs the encoder at {loaded.precision}, the shards here are "
            f"{store.model.precision}: give --precision {store.model.precision}"
        )
    return encode_shard(encoder, workspace.corpus_dir(lang), shard, store, progress)


def _pending(store: EmbeddingStore, corpus: CorpusManifest) -> list:
    return [s for s in corpus.shards if not store.is_complete(_stem(s.name), s.sha256, s.rows)]


def _same_model(store: EmbeddingStore, identity: ModelIdentity) -> bool:
    return store.manifest is not None and store.manifest.model.fingerprint == identity.fingerprint


def _stem(shard_file: str) -> str:
    return Path(shard_file).stem
