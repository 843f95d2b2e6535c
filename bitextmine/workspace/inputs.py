"""The run's inputs: every file a workspace was built from, as its manifests record them (the corpus
files `encode` read, the vectors it imported). Every command on the workspace reads them, through its
text shards and embeddings, so none of them is ever an output (files.output_target)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from bitextmine.errors import BitextmineError
from bitextmine.files import read_json
from bitextmine.text.reader import STDIN
from bitextmine.workspace.corpus import MANIFEST_NAME, load_manifest
from bitextmine.workspace.embeddings import MANIFEST, EmbeddingManifest


def recorded_inputs(root: Path) -> list[Path]:
    """The files the manifests under the workspace folder `root` name as read (absolute paths, as
    recorded). A manifest that cannot be read is skipped: the step that reads it refuses it."""
    return sorted({*_corpus_sources(Path(root)), *_imported_vectors(Path(root))})


def _corpus_sources(root: Path) -> Iterator[Path]:
    for manifest in root.glob(f"corpora/*/{MANIFEST_NAME}"):
        try:
            corpus = load_manifest(manifest.parent)
        except BitextmineError:
            continue
        yield from (Path(s.path) for s in corpus.sources if s.path != STDIN) if corpus else ()


def _imported_vectors(root: Path) -> Iterator[Path]:
    for manifest in root.glob(f"emb/*/{MANIFEST}"):
        try:
            source = EmbeddingManifest.from_json(read_json(manifest)).model.settings.get("source")
        except (BitextmineError, KeyError, TypeError, AttributeError):
            continue
        if isinstance(source, dict) and isinstance(source.get("path"), str):
            yield Path(source["path"])
