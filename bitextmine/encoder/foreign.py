"""Encoders bitextmine did not load: a `SentenceTransformer`, or any object whose `.encode(list[str])`
returns one vector a sentence, used by `embed` as its own encoders are. Nothing here imports
sentence-transformers: the object is only called."""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from bitextmine.encoder.encoder import Encoded, SentenceEncoder
from bitextmine.encoder.spec import EncoderSpec
from bitextmine.errors import BitextmineValueError, whole_number
from bitextmine.progress import Advance
from bitextmine.unit_vectors import unit_rows

WINDOW = 1024  # sentences handed to the object at a time: the steps in which progress is reported


class SupportsEncode(Protocol):
    def encode(self, sentences: list[str], /) -> Any: ...


class ForeignEncoder:
    """An object with `.encode` as a sentence encoder: its vectors L2-normalised, in windows of WINDOW
    sentences. It has no fingerprint (nothing says which weights it holds), so its vectors are not cached."""

    fingerprint = None

    def __init__(self, model: SupportsEncode) -> None:
        self.model = model
        self.name = type(model).__name__

    def encode(
        self,
        sentences: Sequence[str],
        progress: Advance | None = None,
        *,
        batch_size: int | None = None,
    ) -> Encoded:
        wanted: dict[str, Any] = {"show_progress_bar": False}
        if batch_size is not None:
            wanted["batch_size"] = whole_number("batch_size", batch_size)
        options = _accepted(self.model.encode, **wanted)
        # an object that takes no batch_size is given batch_size sentences at a time
        window = batch_size if batch_size is not None and "batch_size" not in options else WINDOW
        parts = []
        for start in range(0, len(sentences), window):
            chunk = list(sentences[start : start + window])
            parts.append(self._vectors(self.model.encode(chunk, **options), len(chunk)))
            if progress:
                progress(len(chunk), 0)
        vectors = np.concatenate(parts) if parts else np.zeros((0, self._dim()), np.float32)
        return Encoded(vectors, tokens=0, truncated=0)

    def _vectors(self, returned: Any, rows: int) -> np.ndarray:
        if hasattr(returned, "detach"):  # a torch tensor (convert_to_tensor), maybe on a GPU
            returned = returned.detach().float().cpu().numpy()
        vectors = unit_rows(f"{self.name}.encode", returned, normalize=True)
        if len(vectors) != rows:
            raise BitextmineValueError(
                f"{self.name}.encode returned {len(vectors)} vectors for {rows} sentences"
            )
        return vectors

    def _dim(self) -> int:
        """The size of its vectors where the object tells it (sentence-transformers does), else 0: the
        width given to the vectors of no sentences."""
        size = getattr(self.model, "get_sentence_embedding_dimension", None)
        return int(size() or 0) if callable(size) else 0


def _accepted(method: Any, **options: Any) -> dict[str, Any]:
    """The `options` that `method` takes as keyword arguments (all of them where it takes **kwargs)."""
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):  # no signature to read (a builtin)
        return {}
    if any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters):
        return options
    names = {parameter.name for parameter in parameters}
    return {name: value for name, value in options.items() if name in names}


def as_encoder(
    encoder: str | os.PathLike[str] | SentenceEncoder | SupportsEncode,
) -> SentenceEncoder | ForeignEncoder:
    """A model dir or hub id (loaded as `load_encoder` loads it, and kept loaded for the next call with
    the same name unless the dir was saved again since), a SentenceEncoder, or an object with `.encode`,
    as an encoder `embed` can use."""
    if isinstance(encoder, str | os.PathLike):
        return _named_encoder(os.fspath(encoder), _saved_at(Path(encoder)))
    if isinstance(encoder, SentenceEncoder | ForeignEncoder):
        return encoder
    if callable(getattr(encoder, "encode", None)):
        return ForeignEncoder(encoder)
    raise TypeError(
        f"encoder: expected a model dir or hub id, a bitextmine SentenceEncoder or an object with "
        f".encode(list[str]) (a SentenceTransformer), not a {type(encoder).__name__}"
    )


@functools.lru_cache(maxsize=1)  # `embed(name, ...)` in a loop loads the model once; one model at a time
def _named_encoder(model: str, saved_at: int | None) -> SentenceEncoder:
    return EncoderSpec(model).load()


def _saved_at(model: Path) -> int | None:
    """When a local model dir's files last changed (ns; None for a hub id): a model trained again into
    the same dir is loaded again, not served from the cache."""
    if not model.is_dir():
        return None
    return max((file.stat().st_mtime_ns for file in model.iterdir() if file.is_file()), default=0)
