"""Encode a list of sentences once per model and precision: vectors cached by fingerprint and text."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bitextmine.encoder.encoder import ProgressCallback, SentenceEncoder
from bitextmine.files import atomic_open


def embed(
    encoder: SentenceEncoder,
    sentences: Sequence[str],
    cache_dir: Path | None = None,
    progress: ProgressCallback | None = None,
) -> np.ndarray:
    """Unit vectors rounded through float16 exactly as the workspace stores them (so thresholds
    learned here apply to `mine`); cached under `cache_dir` by model fingerprint, precision and text."""
    digest = hashlib.sha256(f"{encoder.fingerprint}:{encoder.precision}".encode())
    for sentence in sentences:
        digest.update(sentence.encode() + b"\n")
    cached = cache_dir / f"{digest.hexdigest()[:32]}.npy" if cache_dir else None
    if cached is not None and cached.is_file():
        return np.load(cached).astype(np.float32)
    vectors = encoder.encode(list(sentences), progress=progress).vectors.astype(np.float16)
    if cached is not None:
        with atomic_open(cached, "wb") as fh:
            np.save(fh, vectors)
    return vectors.astype(np.float32)
