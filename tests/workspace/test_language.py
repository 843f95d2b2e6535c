"""An encoded language: its embeddings must encode exactly the text shards the corpus holds."""

from __future__ import annotations

import numpy as np
import pytest

from bitextmine.corpus.build import build_corpus
from bitextmine.corpus.settings import CorpusSettings
from bitextmine.errors import BitextmineError
from bitextmine.workspace.embeddings import EmbeddingShard, EmbeddingStore, ModelIdentity
from bitextmine.workspace.language import open_language
from bitextmine.workspace.layout import Workspace

MODEL = ModelIdentity("model", "ffff", 4, {"pooling": "mean"})


def build(workspace: Workspace, lines: list[str], *, encode: bool = True) -> None:
    """Text shards of 3 rows for `lines` (as `encode` builds them) and, with `encode`, their vectors."""
    source = workspace.root / "de.txt"
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text("".join(f"{line}\n" for line in lines))
    corpus = build_corpus([str(source)], "de", workspace.corpus_dir("de"), CorpusSettings(shard_size=3))
    if encode:
        store = EmbeddingStore(workspace.embedding_dir("de"), "de")
        store.bind(MODEL)
        for text in corpus.shards:
            record = EmbeddingShard(text.name.removesuffix(".tsv"), text.rows, text.sha256, 0, 0)
            store.write_shard(record, np.ones((text.rows, 4), np.float32) / 2)


def test_a_complete_language_opens(tmp_path):
    workspace = Workspace(tmp_path)
    build(workspace, [f"sentence {i}" for i in range(7)])
    assert len(open_language(workspace, "de").vectors) == 7


def test_vectors_of_an_older_text_of_the_same_size_are_refused(tmp_path):
    """Only the total row count was checked, so a corpus rebuilt from other text (a re-encode
    that stopped before its first shard) was mined with the old text's vectors."""
    workspace = Workspace(tmp_path)
    build(workspace, [f"sentence {i}" for i in range(7)])
    build(workspace, [f"another sentence {i}" for i in range(7)], encode=False)
    with pytest.raises(BitextmineError, match=r"embeddings of 'de' were encoded from other text than .*"):
        open_language(workspace, "de")


def test_missing_and_extra_shards_are_refused(tmp_path):
    workspace = Workspace(tmp_path)
    build(workspace, [f"sentence {i}" for i in range(7)])
    store = EmbeddingStore(workspace.embedding_dir("de"), "de")
    store.remove_shards({"shard-00001"})
    with pytest.raises(BitextmineError, match="cover 4 of 7 sentences"):
        open_language(workspace, "de")
