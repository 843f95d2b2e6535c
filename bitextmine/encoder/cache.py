"""Encode a list of sentences once per model and precision: vectors cached by fingerprint and text, and
taken from a workspace's encoded corpora where it holds them (encoder/held.py)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bitextmine.encoder.encoder import ProgressCallback, SentenceEncoder
from bitextmine.files import atomic_open

if TYPE_CHECKING:
    from bitextmine.encoder.held import HeldVectors

HeldLookup = Callable[[Sequence[str]], "HeldVectors"]  # the vectors a workspace holds for these sentences


@dataclass(frozen=True)
class VectorSources:
    """How many sentence vectors were encoded now, reused from a workspace's corpora, read from the cache."""

    encoded: int = 0
    reused: int = 0
    cached: int = 0

    def __add__(self, other: VectorSources) -> VectorSources:
        return VectorSources(
            self.encoded + other.encoded, self.reused + other.reused, self.cached + other.cached
        )

    def describe(self) -> str:
        return (
            f"sentence vectors: {self.encoded:,} encoded, {self.reused:,} reused from the workspace's "
            f"corpora, {self.cached:,} from its cache"
        )


@dataclass
class Embedded:
    vectors: np.ndarray  # float32 [n, dim] holding float16 values
    sources: VectorSources


def embed(
    encoder: SentenceEncoder,
    sentences: Sequence[str],
    cache_dir: Path | None = None,
    progress: ProgressCallback | None = None,
) -> np.ndarray:
    """Unit vectors rounded through float16 exactly as the workspace stores them (so thresholds
    learned here apply to `mine`); cached under `cache_dir` by model fingerprint, precision and text."""
    return embed_reusing(encoder, sentences, cache_dir, progress).vectors


def embed_reusing(
    encoder: SentenceEncoder,
    sentences: Sequence[str],
    cache_dir: Path | None = None,
    progress: ProgressCallback | None = None,
    held: HeldLookup | None = None,
) -> Embedded:
    """`embed`, where the vectors `held` finds (those a workspace stores) are taken as they are and only
    the other sentences are encoded."""
    cached = cache_dir / f"{_cache_key(encoder, sentences)}.npy" if cache_dir else None
    if cached is not None and cached.is_file():
        return Embedded(np.load(cached).astype(np.float32), VectorSources(cached=len(sentences)))
    vectors = np.empty((len(sentences), encoder.dim), dtype=np.float16)
    found = held(sentences) if held is not None else None
    missing = np.arange(len(sentences))
    if found is not None:
        vectors[found.positions] = found.vectors
        missing = np.setdiff1d(missing, found.positions)
    if missing.size:
        encoded = encoder.encode([sentences[i] for i in missing], progress=progress).vectors
        vectors[missing] = encoded.astype(np.float16)
    if cached is not None:
        with atomic_open(cached, "wb") as fh:
            np.save(fh, vectors)
    sources = VectorSources(encoded=missing.size, reused=len(sentences) - missing.size)
    return Embedded(vectors.astype(np.float32), sources)


def _cache_key(encoder: SentenceEncoder, sentences: Sequence[str]) -> str:
    digest = hashlib.sha256(f"{encoder.fingerprint}:{encoder.precision}".encode())
    for sentence in sentences:
        digest.update(sentence.encode() + b"\n")
    return digest.hexdigest()[:32]
