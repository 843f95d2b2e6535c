"""An encoded language of a workspace: its embeddings and the corpus they encode, checked to match."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bitextmine.errors import BitextmineError
from bitextmine.workspace.corpus import CorpusManifest, load_manifest
from bitextmine.workspace.embeddings import EmbeddingStore, ShardedVectors
from bitextmine.workspace.layout import Workspace


@dataclass
class Language:
    lang: str
    vectors: ShardedVectors
    corpus: CorpusManifest
    corpus_dir: Path


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
