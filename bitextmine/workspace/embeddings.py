"""Embedding shards on disk: L2-normalized float16 ``.npy`` files plus a per-language manifest.

The manifest names the model; each shard ``shard-N.npy`` has a record ``shard-N.json`` with the
checksum of the text shard it encodes, written (atomically) after the vectors, so the record is
the proof that the shard is complete. Shards are written independently of each other and of the
manifest, which lets cluster jobs encode shards in parallel and a rerun tell finished work from
stale work.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import re
import tokenize
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from bitextmine.errors import BitextmineError
from bitextmine.files import (
    atomic_open,
    json_record,
    read_json,
    remove_temporaries,
    save_array,
    write_json,
)

MANIFEST = "manifest.json"
_SHARD_NAME = re.compile(r"shard-\d+")  # names come from JSON and become file names


@dataclass
class EmbeddingShard:
    name: str
    rows: int
    text_sha256: str
    tokens: int
    truncated: int
    forward: str | None = None  # the encoder's forward and attention, e.g. "packed (varlen)"; None: imported


@dataclass
class ModelIdentity:
    name: str
    fingerprint: str
    dim: int
    settings: dict[str, Any]
    precision: str = "fp32"  # of the forward that made the vectors (not part of the fingerprint)

    def describe(self) -> str:
        return f"{self.name} (fingerprint {self.fingerprint}, dim {self.dim})"


def check_same_dimension(first: tuple[str, ModelIdentity], second: tuple[str, ModelIdentity]) -> None:
    """Vectors of two dimensions cannot be compared, whatever `--force` says: one line, before any work.
    Imported vectors are named by the user (`--model-name`), so one name can cover two models."""
    (lang, model), (other_lang, other) = first, second
    if model.dim != other.dim:
        raise BitextmineError(
            f"'{lang}' has {model.dim}-dimensional vectors of {model.name} but '{other_lang}' "
            f"{other.dim}-dimensional ones: vectors of two models; import each model's under its own "
            "--model-name, and encode both languages with one model"
        )


@dataclass
class EmbeddingManifest:
    lang: str
    model: ModelIdentity
    dtype: str = "float16"
    shards: dict[str, EmbeddingShard] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"lang": self.lang, "model": asdict(self.model), "dtype": self.dtype}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EmbeddingManifest:
        model = json_record(ModelIdentity, data["model"])
        return json_record(cls, {"lang": data["lang"], "model": model, "dtype": data["dtype"]})


class EmbeddingStore:
    """The embedding shards of one language (``WORK/emb/L``)."""

    def __init__(self, root: Path, lang: str) -> None:
        self.root = Path(root)
        self.lang = lang
        self.manifest: EmbeddingManifest | None = None
        if (self.root / MANIFEST).is_file():
            data = read_json(self.root / MANIFEST, remedy=f"delete {self.root} and encode '{lang}' again")
            try:
                self.manifest = EmbeddingManifest.from_json(data)
                self.manifest.shards = self._completed_shards(data.get("shards", []))
            except (KeyError, TypeError, AttributeError) as exc:
                raise BitextmineError(
                    f"{self.root / MANIFEST}: malformed embeddings manifest ({type(exc).__name__}: {exc}); "
                    f"delete {self.root} and encode '{lang}' again"
                ) from None

    def bind(self, model: ModelIdentity, *, overwrite: bool = False) -> None:
        """Attach the model that writes here; refuse to mix models, dims or precisions unless overwriting.

        The same model under another path or name replaces the recorded one (the latest is what
        `mine --threshold auto` reads thresholds from).
        """
        current = self.manifest
        if current is not None and not overwrite:
            self._check_compatible(current, model)
        if current is None or (current.model.fingerprint, current.model.precision) != (
            model.fingerprint,
            model.precision,
        ):
            self._remove_shards()
            self.manifest = EmbeddingManifest(self.lang, model)
            self._save_manifest()
        elif current.model != model:
            current.model = model
            self._save_manifest()

    def rename_model(self, name: str) -> None:
        """Record another path or name for the same model (what `mine --threshold auto` reads)."""
        manifest = self._bound()
        if manifest.model.name != name:
            manifest.model = replace(manifest.model, name=name)
            self._save_manifest()

    def _check_compatible(self, current: EmbeddingManifest, model: ModelIdentity) -> None:
        if current.model.fingerprint != model.fingerprint:
            raise BitextmineError(
                f"{self.root}: embeddings of '{self.lang}' were made with {current.model.describe()}, "
                f"not {model.describe()}; use another --workdir or --overwrite to re-encode"
            )
        if current.shards and current.model.precision != model.precision:
            raise BitextmineError(
                f"{self.root}: embeddings of '{self.lang}' were made at precision {current.model.precision}, "
                f"not {model.precision}; pass --precision {current.model.precision} to resume, or "
                "--overwrite to re-encode"
            )

    def is_complete(self, name: str, text_sha256: str, rows: int) -> bool:
        """Whether the shard is recorded as encoding this text and its vectors file is whole."""
        entry = self.manifest.shards.get(name) if self.manifest else None
        return (
            entry is not None
            and entry.text_sha256 == text_sha256
            and entry.rows == rows
            and (self.root / f"{name}.npy").is_file()
            and self._damage(name) is None
        )

    def write_shard(self, shard: EmbeddingShard, vectors: np.ndarray) -> None:
        manifest = self._bound()
        if vectors.shape != (shard.rows, manifest.model.dim):
            raise ValueError(
                f"shard {shard.name}: got {vectors.shape}, expected ({shard.rows}, {manifest.model.dim})"
            )
        with atomic_open(self.root / f"{shard.name}.npy", "wb") as fh:
            save_array(fh, vectors.astype(np.float16))
        write_json(self.root / f"{shard.name}.json", asdict(shard))
        manifest.shards[shard.name] = shard

    def retain(self, names: set[str]) -> None:
        """Drop shards that no longer belong to the corpus (a rebuilt, smaller corpus) and the temporary
        files of killed runs (the step calls this under its lock, once its jobs are done)."""
        self.remove_shards(set(self._bound().shards) - names)
        remove_temporaries(self.root)

    def remove_shards(self, names: set[str]) -> None:
        """Delete these shards' records and vectors (the record first: a shard without it is incomplete)."""
        manifest = self._bound()
        for name in names:
            manifest.shards.pop(name, None)
            for path in reversed(self.shard_files(name)):
                path.unlink(missing_ok=True)

    def shard_files(self, name: str) -> tuple[Path, Path]:
        """The vectors and the record of a shard; the record, written last, proves the shard complete."""
        return self.root / f"{name}.npy", self.root / f"{name}.json"

    def load(self, name: str) -> np.ndarray:
        """A shard memory-mapped read-only; a damaged file (cut short, a garbled header, another shape
        than its record's) is a one-line error naming it."""
        damage = self._damage(name)
        if damage is not None:
            raise BitextmineError(
                f"{self.root / name}.npy: damaged embedding shard ({damage}); rerun `bitextmine encode` "
                f"for '{self.lang}' with the same files: it encodes this shard again"
            )
        return np.load(self.root / f"{name}.npy", mmap_mode="r")

    def _damage(self, name: str) -> str | None:
        """What is wrong with a recorded shard's vectors file, if anything (its header, dtype, shape and
        length are checked; reading its values would cost a pass over every vector)."""
        expected = (self._bound().shards[name].rows, self.model.dim)
        try:
            vectors = np.load(self.root / f"{name}.npy", mmap_mode="r", allow_pickle=False)
        except (ValueError, EOFError, SyntaxError, tokenize.TokenError):
            return "cut short, or its header garbled"
        if vectors.dtype != np.float16 or vectors.shape != expected:
            return f"{vectors.dtype} {vectors.shape}, expected float16 {expected}"
        return None

    @property
    def model(self) -> ModelIdentity:
        return self._bound().model

    def shard_names(self) -> list[str]:
        """In row order: by shard number (as text, shard-100000 would come before shard-10001)."""
        return sorted(self._bound().shards, key=lambda name: int(name.removeprefix("shard-")))

    def vectors(self) -> ShardedVectors:
        """Every row of this language, memory-mapped."""
        return ShardedVectors(self)

    def _bound(self) -> EmbeddingManifest:
        if self.manifest is None:
            raise BitextmineError(f"{self.root}: no embeddings for '{self.lang}' yet; run bitextmine encode")
        return self.manifest

    def _completed_shards(self, listed: list[dict[str, Any]]) -> dict[str, EmbeddingShard]:
        """Shards with vectors and a record (`listed`: records kept in manifest.json by bitextmine 0.1)."""
        listed_shards = (EmbeddingShard(**s) for s in listed if _SHARD_NAME.fullmatch(s["name"]))
        shards = {s.name: s for s in listed_shards if (self.root / f"{s.name}.npy").is_file()}
        for record in sorted(self.root.glob("shard-*.json")):
            shard = _read_record(record)
            if shard is not None and record.with_suffix(".npy").is_file():
                shards[shard.name] = shard
        return shards

    def _remove_shards(self) -> None:
        for path in [*self.root.glob("shard-*.json"), *self.root.glob("shard-*.npy")]:
            path.unlink()

    def _save_manifest(self) -> None:
        write_json(self.root / MANIFEST, self._bound().to_json())


def _read_record(path: Path) -> EmbeddingShard | None:
    """A shard's record, or None when it is unreadable or names another shard: that shard is then
    incomplete, and the next `encode` redoes it."""
    try:
        shard = json_record(EmbeddingShard, read_json(path))
    except (BitextmineError, TypeError):
        return None
    return shard if shard.name == path.stem else None


TAKE_CHUNK_ROWS = 4096  # at most ~256 MB of mapped file pages per chunk of a random gather


class ShardedVectors:
    """All embedding rows of one language as one logical [rows, dim] matrix over memory-mapped shards.

    Nothing is loaded up front: ``blocks`` streams consecutive rows and ``take`` gathers arbitrary rows,
    both as float32, so callers stay within memory bounded by their block size.
    """

    def __init__(self, store: EmbeddingStore) -> None:
        self.store = store
        self.model = store.model
        self._shards = [store.load(name) for name in store.shard_names()]
        self._starts = np.cumsum([0] + [len(s) for s in self._shards])

    def __len__(self) -> int:
        return int(self._starts[-1])

    def digest(self) -> str:
        """Identifies these exact vectors: the model, its precision, every shard's text checksum and, for
        imported vectors, the file they came from."""
        shards = self.store.manifest.shards if self.store.manifest else {}
        key = [self.model.fingerprint, self.model.precision]
        key += [[name, shards[name].text_sha256, shards[name].rows] for name in sorted(shards)]
        if (
            "source" in self.model.settings
        ):  # imported vectors (workspace/external.py): the file they came from
            key.append(self.model.settings["source"])
        return hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]

    @property
    def dim(self) -> int:
        return self.model.dim

    def blocks(self, block_rows: int) -> Iterator[tuple[int, np.ndarray]]:
        """(first row, float32 [n, dim]) for consecutive blocks of at most `block_rows` rows."""
        for start in range(0, len(self), block_rows):
            yield start, self.take(np.arange(start, min(start + block_rows, len(self))))
            self.drop_pages()

    def drop_pages(self) -> None:
        """Unmap the shard pages read so far from this process (they stay in the page cache), so that
        streaming over a corpus does not grow the resident set by the whole memory-mapped file."""
        advice = getattr(mmap, "MADV_DONTNEED", None)
        for shard in self._shards:
            if advice is not None and isinstance(shard, np.memmap) and shard._mmap is not None:
                shard._mmap.madvise(advice)

    def take(self, rows: np.ndarray) -> np.ndarray:
        """float32 [len(rows), dim] for the given global row numbers, in that order.

        Rows are gathered TAKE_CHUNK_ROWS at a time with a drop_pages after each chunk: the kernel maps
        16 pages around every page fault (fault-around), so a random gather of many rows would otherwise
        map ~64 KB of the file per row into this process's resident set."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty((len(rows), self.dim), dtype=np.float32)
        for first in range(0, len(rows), TAKE_CHUNK_ROWS):
            chunk = slice(first, first + TAKE_CHUNK_ROWS)
            self._gather(rows[chunk], out[chunk])
            if len(rows) > TAKE_CHUNK_ROWS:
                self.drop_pages()
        return out

    def _gather(self, rows: np.ndarray, out: np.ndarray) -> None:
        shard_of = np.searchsorted(self._starts, rows, side="right") - 1
        for shard in np.unique(shard_of):
            picked = np.flatnonzero(shard_of == shard)
            out[picked] = self._shards[shard][rows[picked] - self._starts[shard]]
