"""Vectors made outside bitextmine (bring your own embeddings): a ``.npy`` file ``[rows, dim]``, or raw
float32/float16 rows of ``dim`` values (LASER's layout), one row per line of the input text file.

The file is memory-mapped and read only at the rows asked for, so importing it takes memory bounded by
one shard whatever its size. The model behind the vectors is known only by the name the user gives it:
its fingerprint is a digest of that name, so two languages imported under the same name can be mined
together, and the file itself is identified separately (``source``) so that changed vectors re-import.
"""

from __future__ import annotations

import hashlib
import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bitextmine.errors import BitextmineError
from bitextmine.workspace.embeddings import ModelIdentity

DTYPES = ("float32", "float16")
CHUNK_ROWS = 8192  # rows normalised at once (in float64)
SAMPLE_BYTES = 1 << 20  # the file is identified by its size, mtime and the digest of its first/last MiB


@dataclass
class VectorsFile:
    path: Path
    vectors: np.ndarray  # [rows, dim], memory-mapped

    @property
    def rows(self) -> int:
        return len(self.vectors)

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def unit_rows(self, rows: np.ndarray) -> np.ndarray:
        """float32 [len(rows), dim]: the given (0-based) rows, L2-normalised; a row that is not finite or
        has norm 0 is an error naming the file and the row (1-based, as the line of the input)."""
        out = np.empty((len(rows), self.dim), dtype=np.float32)
        for first in range(0, len(rows), CHUNK_ROWS):
            part = slice(first, first + CHUNK_ROWS)
            out[part] = self._normalised(rows[part])
        self._drop_pages()
        return out

    def _normalised(self, rows: np.ndarray) -> np.ndarray:
        """In float64, so that vectors already of norm 1 in float32 come back unchanged."""
        picked = np.asarray(self.vectors[rows], dtype=np.float64)
        norms = np.linalg.norm(picked, axis=1)
        bad = np.flatnonzero(~np.isfinite(norms) | (norms == 0))
        if len(bad):
            row = int(rows[bad[0]]) + 1
            what = "has norm 0" if norms[bad[0]] == 0 else "has non-finite values"
            raise BitextmineError(f"{self.path}: row {row} (line {row} of the input) {what}")
        return picked / norms[:, None]

    def _drop_pages(self) -> None:
        """Unmap the pages read so far (they stay in the page cache): the resident set stays one shard."""
        mapped = getattr(self.vectors, "_mmap", None)
        advice = getattr(mmap, "MADV_DONTNEED", None)
        if mapped is not None and advice is not None:
            mapped.madvise(advice)


def open_vectors(path: str | Path, dim: int | None = None, dtype: str | None = None) -> VectorsFile:
    """Memory-map a ``.npy`` file, or a raw file of `dtype` (default float32) rows of `dim` values."""
    path = Path(path)
    if not path.is_file():
        raise BitextmineError(f"{path}: no such vectors file")
    if dtype is not None and dtype not in DTYPES:
        raise BitextmineError(f"{path}: vectors dtype must be float32 or float16, not {dtype!r}")
    if _is_zip(path):
        raise BitextmineError(
            f"{path}: an .npz archive, not one array; save the vectors with numpy.save (.npy) or as raw rows"
        )
    vectors = (
        _open_npy(path, dim, dtype) if path.suffix == ".npy" else _open_raw(path, dim, dtype or "float32")
    )
    if len(vectors) == 0 or vectors.shape[1] == 0:
        raise BitextmineError(f"{path}: no vectors in the file")
    return VectorsFile(path, vectors)


def _is_zip(path: Path) -> bool:
    """Whether the file is a zip archive, as numpy.savez writes (whatever its name)."""
    with open(path, "rb") as fh:
        return fh.read(4) in (b"PK\x03\x04", b"PK\x05\x06")  # numpy.load's test: a member, or empty


def _open_npy(path: Path, dim: int | None, dtype: str | None) -> np.ndarray:
    try:
        vectors = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as exc:
        raise BitextmineError(f"{path}: not a readable .npy file ({str(exc).splitlines()[0]})") from None
    if vectors.ndim != 2 or vectors.dtype.name not in DTYPES:
        raise BitextmineError(
            f"{path}: expected a 2-D float32 or float16 array, got {vectors.dtype.name} {list(vectors.shape)}"
        )
    if dim is not None and vectors.shape[1] != dim:
        raise BitextmineError(f"{path}: the vectors have dim {vectors.shape[1]}, not --dim {dim}")
    if dtype is not None and vectors.dtype.name != dtype:
        raise BitextmineError(f"{path}: the vectors are {vectors.dtype.name}, not {dtype}")
    return vectors


def _open_raw(path: Path, dim: int | None, dtype: str) -> np.ndarray:
    if dim is None:
        raise BitextmineError(f"{path}: a raw vectors file needs --dim (only .npy files record it)")
    if dim < 1:
        raise BitextmineError(f"{path}: --dim must be at least 1, not {dim}")
    row_bytes = dim * np.dtype(dtype).itemsize
    size = path.stat().st_size
    if size % row_bytes:
        raise BitextmineError(
            f"{path}: {size:,} bytes is not a whole number of {dtype} rows of dim {dim} ({row_bytes} bytes)"
        )
    if size == 0:
        return np.empty((0, dim), dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=(size // row_bytes, dim))


def external_model(name: str, vectors: VectorsFile) -> ModelIdentity:
    """The model of imported vectors: known by `name`, its fingerprint a digest of that name (so every
    language imported under one name is minable with the others); the file is recorded in the settings."""
    settings = {"external": True, "source": source_identity(vectors)}
    return ModelIdentity(name, external_fingerprint(name), vectors.dim, settings, precision="external")


def external_fingerprint(name: str) -> str:
    """The fingerprint of the model known by `name` only: what `mine --threshold auto` looks thresholds
    up by, and `calibrate --embeddings` stores them under."""
    return hashlib.sha256(f"external:{name}".encode()).hexdigest()[:16]


def source_identity(vectors: VectorsFile) -> dict[str, Any]:
    """Path, size, mtime, layout and a digest of the first and last MiB: what tells changed vectors
    apart at the cost of two reads (a full checksum would read the whole, possibly huge, file)."""
    st = os.stat(vectors.path)
    digest = hashlib.sha256()
    with open(vectors.path, "rb") as fh:
        digest.update(fh.read(SAMPLE_BYTES))
        fh.seek(max(st.st_size - SAMPLE_BYTES, 0))
        digest.update(fh.read(SAMPLE_BYTES))
    return {
        "path": str(vectors.path.resolve()),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "dtype": vectors.vectors.dtype.name,
        "dim": vectors.dim,
        "sample_sha256": digest.hexdigest(),
    }


def is_external(model: ModelIdentity) -> bool:
    return bool(model.settings.get("external"))
