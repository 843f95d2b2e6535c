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
        encoded = ", ".join(workspace.encoded_languages()) or "none"
        raise BitextmineError(
            f"no embeddings for '{lang}' in {workspace.root} (its languages: {encoded}): run "
            f"`bitextmine encode FILE... --lang {lang}`"
        )
    _check_encodes(store, corpus, workspace.corpus_dir(lang), lang)
    return Language(lang, store.vectors(), corpus, workspace.corpus_dir(lang))


def _check_encodes(store: EmbeddingStore, corpus: CorpusManifest, corpus_dir: Path, lang: str) -> None:
    """Every text shard has its embedding shard, encoded from that very text (checksum and rows), and no
    other shard is there: a total row count alone would let the vectors of an older text of the same
    size (a re-encode stopped before its first shard) pass for the new one."""
    encoded = store.manifest.shards
    wanted = {Path(shard.name).stem: shard for shard in corpus.shards}
    stale = [
        name
        for name, shard in wanted.items()
        if name in encoded and (encoded[name].text_sha256, encoded[name].rows) != (shard.sha256, shard.rows)
    ]
    if stale:
        raise BitextmineError(
            f"embeddings of '{lang}' were encoded from other text than {corpus_dir / stale[0]}.tsv "
            f"({len(stale)} shard(s)): rerun `bitextmine encode` for '{lang}'"
        )
    covered = sum(shard.rows for name, shard in wanted.items() if name in encoded)
    if covered != corpus.rows or set(encoded) - set(wanted):
        raise BitextmineError(
            f"embeddings of '{lang}' cover {covered} of {corpus.rows} sentences: "
            f"rerun `bitextmine encode` for '{lang}' to finish it"
        )
