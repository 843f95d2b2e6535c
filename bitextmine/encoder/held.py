"""The vectors a workspace already holds for given sentences, so that `calibrate` and `eval bucc` do not
encode again what `encode` stored.

A stored vector stands for a sentence only where the encoder that made it is the one asked for: the
same fingerprint (model files, pooling, prefix, max length, normalisation, lowercasing, head), the
same precision and the same forward (packed or padded, and its attention), and only for the exact text
the encoder read: the cleaned line of a text shard equal to the sentence. The text shards are read one
at a time; only the sentences asked for are kept (by their own strings), never the corpus.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bitextmine.encoder.encoder import SentenceEncoder
from bitextmine.errors import BitextmineError
from bitextmine.workspace.corpus import MANIFEST_NAME, TextShard, load_manifest, read_text_shard
from bitextmine.workspace.embeddings import MANIFEST, EmbeddingStore
from bitextmine.workspace.layout import Workspace
from bitextmine.workspace.locks import workspace_locks


@dataclass
class HeldVectors:
    positions: np.ndarray  # int64: the sentences asked for that the workspace holds
    vectors: np.ndarray  # float16 [len(positions), dim], row i the vector of sentence positions[i]


def held_vectors(
    workspace: Workspace, lang: str, encoder: SentenceEncoder, sentences: Sequence[str]
) -> HeldVectors:
    """The vectors of `sentences` that `lang`'s encoded corpus in `workspace` holds, made by `encoder`."""
    none = _nothing(encoder.dim)
    corpus_dir, embedding_dir = workspace.corpus_dir(lang), workspace.embedding_dir(lang)
    if not ((corpus_dir / MANIFEST_NAME).is_file() and (embedding_dir / MANIFEST).is_file()):
        return none
    with ExitStack() as stack:
        try:
            stack.enter_context(workspace_locks(workspace, write=[], read=[f"lang-{lang}"]))
        except BitextmineError:  # an `encode` is rewriting this language now: its shards may change
            return none
        store = EmbeddingStore(embedding_dir, lang)
        corpus = load_manifest(corpus_dir)
        if corpus is None or not corpus.complete or not _made_by(store, encoder):
            return none
        return _find(sentences, store, corpus_dir, corpus.shards, encoder)


def _nothing(dim: int) -> HeldVectors:
    return HeldVectors(np.empty(0, dtype=np.int64), np.empty((0, dim), dtype=np.float16))


def _made_by(store: EmbeddingStore, encoder: SentenceEncoder) -> bool:
    model = store.manifest.model if store.manifest else None
    return model is not None and (model.fingerprint, model.precision) == (
        encoder.fingerprint,
        encoder.precision,
    )


def _find(
    sentences: Sequence[str],
    store: EmbeddingStore,
    corpus_dir: Path,
    shards: list[TextShard],
    encoder: SentenceEncoder,
) -> HeldVectors:
    """Scan the text shards whose vectors `encoder`'s forward made; a sentence's first line wins."""
    wanted: dict[str, list[int]] = {}
    for position, sentence in enumerate(sentences):
        wanted.setdefault(sentence, []).append(position)
    positions: list[int] = []
    vectors: list[np.ndarray] = []
    for shard in shards:
        name = Path(shard.name).stem
        if not wanted:
            break
        if not store.is_complete(name, shard.sha256, shard.rows) or (
            store.manifest.shards[name].forward != encoder.mode
        ):
            continue
        texts, _, _ = read_text_shard(corpus_dir / shard.name, shard.sha256)
        rows, copies = [], []
        for row, text in enumerate(texts):
            if (found := wanted.pop(text, None)) is not None:
                rows.append(row)
                copies.append(len(found))
                positions += found
        if rows:
            vectors.append(np.repeat(store.load(name)[rows], copies, axis=0))
    if not positions:
        return _nothing(encoder.dim)
    return HeldVectors(np.array(positions, dtype=np.int64), np.concatenate(vectors))
