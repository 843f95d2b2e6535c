"""One FAISS index file: written atomically and read back, each failure a one-line error naming the
file, and `IndexCache`, which keeps the file read last loaded, and the files checked, for whoever owns
it."""

from __future__ import annotations

import hashlib
from pathlib import Path

import faiss

from bitextmine.errors import BitextmineError
from bitextmine.files import atomic_path


def write_index(index: faiss.Index, path: Path) -> None:
    """Save atomically; a failed write (full disk) is a one-line error naming the file."""
    with atomic_path(path) as tmp:
        try:
            faiss.write_index(index, str(tmp))
        except RuntimeError as exc:
            raise BitextmineError(f"{path}: cannot write the index: {str(exc).splitlines()[-1]}") from None


def read_index(path: Path) -> faiss.Index:
    """The index in `path`; a file FAISS cannot read (cut short, damaged) is a one-line error naming it."""
    try:
        return faiss.read_index(str(path))
    except RuntimeError:
        lang = Path(path).name.split(".", 1)[0]  # LANG.faiss, LANG.PLAN.NNN.faiss, LANG.PLAN.template.faiss
        raise BitextmineError(
            f"{path}: cannot read this FAISS index (cut short or damaged); delete it and rerun "
            f"`bitextmine index {lang}`"
        ) from None


def file_sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


class IndexCache:
    """The index file read last, kept loaded until another is read (the old one is freed first) or the
    cache is closed: successive query blocks, and the jobs run in this process, reuse it, and no more
    than one index is in memory. Its owner decides how long it lives: ``with IndexCache() as indexes:``
    around the searches, or the `ShardedIndex` that made it. It also remembers the files whose checksum
    it confirmed, so that each is hashed once while unchanged, not once a job."""

    def __init__(self) -> None:
        self._key: tuple[Path, int] | None = None  # the file held and its mtime
        self._index: faiss.Index | None = None
        self._confirmed: set[tuple[Path, int, int, str]] = set()  # (file, mtime, size, sha256)

    def read(self, path: Path) -> faiss.Index:
        """The index in `path`, read unless it is the one held (the same file, not written since)."""
        key = (path, path.stat().st_mtime_ns)
        if self._index is None or key != self._key:
            self.close()
            self._index, self._key = read_index(path), key
        return self._index

    def holds_bytes(self, path: Path, sha256: str) -> bool:
        """Whether `path` has the checksum `sha256`: hashed unless this cache confirmed it before and the
        file has not changed since (a pass over the file; mining then reads it from the page cache)."""
        stat = path.stat()
        key = (path, stat.st_mtime_ns, stat.st_size, sha256)
        if key not in self._confirmed:
            if file_sha256(path) != sha256:
                return False
            self._confirmed.add(key)
        return True

    def close(self) -> None:
        """Free the index held."""
        self._index, self._key = None, None

    def __reduce__(self) -> tuple[type[IndexCache], tuple[()]]:
        return IndexCache, ()  # a copy for another process (a job run elsewhere) starts empty

    def __enter__(self) -> IndexCache:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
