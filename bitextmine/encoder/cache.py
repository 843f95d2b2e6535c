"""Encode a list of sentences once per model and precision: vectors cached by fingerprint and text, and
taken from a workspace's encoded corpora where it holds them (encoder/held.py)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bitextmine.encoder.encoder import SentenceEncoder
from bitextmine.encoder.foreign import ForeignEncoder, SupportsEncode, as_encoder
from bitextmine.errors import BitextmineValueError
from bitextmine.files import atomic_open, save_array
from bitextmine.progress import Advance, with_bar

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
    encoder: str | os.PathLike[str] | SentenceEncoder | SupportsEncode,
    sentences: str | Sequence[str],
    cache_dir: str | os.PathLike[str] | None = None,
    progress: Advance | None = None,
    *,
    batch_size: int | None = None,
    show_progress_bar: bool = False,
) -> np.ndarray:
    """The encoder's vectors, float32 [n, dim], rounded through float16 exactly as the workspace stores
    them (so thresholds learned here apply to `mine`); a string is one sentence and gives one vector
    [dim], as in sentence-transformers. `encoder` is a model dir or hub id, a SentenceEncoder or any
    object with `.encode(list[str])` (a SentenceTransformer; its vectors L2-normalised). A SentenceEncoder's
    vectors are cached under `cache_dir` by model fingerprint, precision and text. `batch_size` caps the
    sentences a forward; `show_progress_bar` shows progress on stderr (bitextmine/progress.py)."""
    texts = [sentences] if isinstance(sentences, str) else list(sentences)
    for row, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"sentences[{row}] is a {type(text).__name__}, not a string")
    model = as_encoder(encoder)
    rates = isinstance(model, SentenceEncoder)  # an object with .encode does not count tokens
    with with_bar(progress, show_progress_bar, len(texts), rates=rates) as callback:
        folder = None if cache_dir is None else Path(cache_dir)
        vectors = embed_reusing(model, texts, folder, callback, batch_size=batch_size).vectors
    return vectors[0] if isinstance(sentences, str) else vectors


def embed_reusing(
    encoder: SentenceEncoder | ForeignEncoder,
    sentences: Sequence[str],
    cache_dir: Path | None = None,
    progress: Advance | None = None,
    held: HeldLookup | None = None,
    *,
    batch_size: int | None = None,
) -> Embedded:
    """`embed`, where the vectors `held` finds (those a workspace stores) are taken as they are and only
    the other sentences are encoded."""
    cached = _cache_file(encoder, sentences, cache_dir)
    if cached is not None and cached.is_file():
        if progress:
            progress(len(sentences), reused=True)  # done, none encoded
        return Embedded(np.load(cached).astype(np.float32), VectorSources(cached=len(sentences)))
    found = held(sentences) if held is not None else None
    missing = np.arange(len(sentences))
    if found is not None:
        missing = np.setdiff1d(missing, found.positions)
        if progress:
            progress(len(found.positions), reused=True)
    encoded = encoder.encode([sentences[i] for i in missing], progress, batch_size=batch_size).vectors
    vectors = np.empty((len(sentences), encoded.shape[1]), dtype=np.float16)
    vectors[missing] = encoded
    if found is not None:
        vectors[found.positions] = found.vectors
    if cached is not None:
        with atomic_open(cached, "wb") as fh:
            save_array(fh, vectors)
    sources = VectorSources(encoded=missing.size, reused=len(sentences) - missing.size)
    return Embedded(vectors.astype(np.float32), sources)


def _cache_file(
    encoder: SentenceEncoder | ForeignEncoder, sentences: Sequence[str], cache_dir: Path | None
) -> Path | None:
    if cache_dir is None:
        return None
    if encoder.fingerprint is None:
        raise BitextmineValueError(
            f"cache_dir: vectors are cached by the model's fingerprint, which a {encoder.name} does not "
            "have; leave cache_dir out"
        )
    return cache_dir / f"{_cache_key(encoder, sentences)}.npy"


def _cache_key(encoder: SentenceEncoder, sentences: Sequence[str]) -> str:
    digest = hashlib.sha256(f"{encoder.fingerprint}:{encoder.precision}".encode())
    for sentence in sentences:
        digest.update(sentence.encode() + b"\n")
    return digest.hexdigest()[:32]
