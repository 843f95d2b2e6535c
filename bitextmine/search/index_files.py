"""A language's saved index: ``WORK/index/L.faiss`` (or its row-range shards, search/sharded.py) and
``WORK/index/L.json``, its `IndexInfo` with the files' checksums. Saved atomically; loaded only whole,
undamaged and built from the embeddings it must cover (else a one-line error naming the command)."""

from __future__ import annotations

import glob
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import faiss

from bitextmine.errors import BitextmineError
from bitextmine.files import json_record, read_json, remove_temporaries, write_json
from bitextmine.search.factory import EXACT, ivf_lists
from bitextmine.search.index_io import IndexCache, file_sha256, read_index, write_index
from bitextmine.search.recall_tuning import set_max_codes, set_nprobe
from bitextmine.search.sharded import ShardedIndex, ShardFile
from bitextmine.workspace.embeddings import ShardedVectors


@dataclass
class IndexInfo:
    lang: str
    factory: str
    dim: int
    count: int
    nprobe: int | None
    fingerprint: str
    train_rows: int
    recall_k: int
    recall_queries: int
    recall: float | None
    build_seconds: float
    gpu: bool
    fetch: int | None = None  # hits fetched per query and re-ranked by exact cosine (None: k)
    recall_source: str = "self"  # the language whose vectors measured recall, or "self"
    search_ms_per_1000: float | None = None  # at nprobe and fetch, on the recall queries
    exact_ms_per_1000: float | None = None  # exact search of the same queries
    note: str = ""
    plan: str = ""  # sharded indexes: the digest in their file names (see search/sharded.py)
    shards: list[dict[str, Any]] = field(default_factory=list)  # [{file, start, stop}]; [] = LANG.faiss
    vectors: str = ""  # ShardedVectors.digest() of the embeddings indexed
    imbalance: float | None = None  # IVF lists: see list_imbalance
    exact_rate: dict[str, Any] | None = None  # exact search's measured rate here (ExactCost.rate_record)
    # sha256 of each file, recorded by save_index and checked before FAISS reads them (FAISS trusts the
    # sizes and offsets in a file: damaged ones can crash it or silently return wrong neighbours). What
    # the files hold, not what the index is, so not compared.
    checksums: dict[str, str] = field(default_factory=dict, compare=False)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def nlist(self) -> int | None:
        """Inverted lists of the index (None: not IVF)."""
        return ivf_lists(self.factory)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> IndexInfo:
        return json_record(cls, data)


def save_index(index: faiss.Index | ShardedIndex | None, info: IndexInfo, index_dir: Path) -> IndexInfo:
    """Write ``LANG.faiss`` (an unsharded index; a sharded one saved its shards; an exact one, None, has
    none) then ``LANG.json`` with
    the files' checksums, each atomically, and remove the files of other builds and the temporary files
    of killed ones (the index step holds LANG's index lock). Returns the info as saved.

    The old json goes first, so a crash part way leaves no index rather than a mismatched pair.
    """
    index_dir = Path(index_dir)
    (index_dir / f"{info.lang}.json").unlink(missing_ok=True)
    if isinstance(index, ShardedIndex) or index is None:
        (index_dir / f"{info.lang}.faiss").unlink(missing_ok=True)
    else:
        write_index(index, index_dir / f"{info.lang}.faiss")
    keep = {s["file"] for s in info.shards} | {f"{info.lang}.{info.plan}.template.faiss"}
    for other in index_dir.glob(f"{info.lang}.*.faiss"):
        if other.name not in keep and other.name != f"{info.lang}.faiss":
            other.unlink()
    remove_temporaries(index_dir, f"{glob.escape(info.lang)}.*")
    info = replace(info, checksums={name: file_sha256(index_dir / name) for name in _index_files(info)})
    write_json(index_dir / f"{info.lang}.json", info.to_json())
    return info


def _index_files(info: IndexInfo) -> list[str]:
    """The files in the index dir that the index described by `info` reads."""
    if info.factory == EXACT and not info.shards:
        return []
    if info.shards:
        return [f"{info.lang}.{info.plan}.template.faiss", *(shard["file"] for shard in info.shards)]
    return [f"{info.lang}.faiss"]


def load_index(
    index_dir: Path,
    lang: str,
    vectors: ShardedVectors,
    *,
    nprobe: int | None = None,
    max_codes: int | None = None,
    indexes: IndexCache | None = None,
) -> tuple[faiss.Index | ShardedIndex, IndexInfo]:
    """The saved index of `lang`, checked against the embeddings it must cover; `nprobe` overrides the
    stored one, and `max_codes` caps the rows an IVF query scans (`set_max_codes`). The file is read
    through `indexes` where given (reused while it holds it), else read for the caller alone.

    A sharded index is returned unloaded: its shards are read one at a time, through `indexes`, as they
    are searched."""
    index_dir = Path(index_dir)
    info = load_index_info(index_dir, lang, vectors)
    _check_files(index_dir, info, indexes)
    if info.shards:
        template = read_index(index_dir / f"{lang}.{info.plan}.template.faiss")
        index = ShardedIndex(index_dir, [ShardFile(**s) for s in info.shards], template, indexes)
    else:
        path = index_dir / f"{lang}.faiss"
        index = read_index(path) if indexes is None else indexes.read(path)
    if index.ntotal != len(vectors):
        raise _stale(lang)
    if nprobe is not None and info.nprobe is not None:
        info = replace(info, nprobe=nprobe)
    if info.nprobe is not None:
        set_nprobe(index, info.nprobe)
    set_max_codes(index, max_codes or 0)  # also clears a cap left on the cached index by a caller before
    return index, info


def load_index_info(index_dir: Path, lang: str, vectors: ShardedVectors) -> IndexInfo:
    """LANG.json of a complete index that covers `vectors` (else an error naming the command to run)."""
    info_path = Path(index_dir) / f"{lang}.json"
    info = _read_info(info_path, lang) if info_path.is_file() else None
    if info is None or not all((Path(index_dir) / f).is_file() for f in _index_files(info)):
        raise BitextmineError(f"no index for '{lang}' in {index_dir}: run `bitextmine index {lang}`")
    if info.vectors != vectors.digest():
        raise _stale(lang)
    return info


def _read_info(path: Path, lang: str) -> IndexInfo:
    """LANG.json; a malformed one, or one naming files outside the index dir, is a one-line error."""
    data = read_json(path, remedy=f"rerun `bitextmine index {lang}`")
    try:
        info = IndexInfo.from_json(data)
        if not isinstance(info.checksums, dict):
            raise TypeError("checksums is not an object")
        if not _shards_in_order(info.shards, info.count):
            raise TypeError(f"its shards do not cover rows 0 to {info.count} in order")
        for name in ("nprobe", "fetch"):
            if getattr(info, name) is not None and getattr(info, name) < 1:
                raise TypeError(f"{name} is {getattr(info, name)}, not at least 1")
        names = [shard["file"] for shard in info.shards] + list(info.checksums)
    except (KeyError, TypeError) as exc:
        raise BitextmineError(
            f"{path}: unreadable index record ({exc}); rerun `bitextmine index {lang}`"
        ) from None
    if any(Path(name).name != name or name.startswith(".") for name in names):
        raise BitextmineError(f"{path}: names files outside the index dir; rerun `bitextmine index {lang}`")
    return info


def _shards_in_order(shards: list[Any], count: int) -> bool:
    """Whether the shard entries of an index record are {file, start, stop}, one after another from row 0
    to `count` (or none: one file)."""
    row = 0
    for shard in shards:
        if not isinstance(shard, dict) or not isinstance(shard.get("file"), str):
            return False
        start, stop = shard.get("start"), shard.get("stop")
        if type(start) is not int or type(stop) is not int or start != row or stop <= start:
            return False
        row = stop
    return not shards or row == count


def _check_files(index_dir: Path, info: IndexInfo, indexes: IndexCache | None) -> None:
    """Each file of the index holds the bytes `save_index` wrote: checked on every load, or once for
    the owner of `indexes` while the files do not change."""
    for name, expected in info.checksums.items():
        path = index_dir / name
        intact = indexes.holds_bytes(path, expected) if indexes is not None else file_sha256(path) == expected
        if not intact:
            raise BitextmineError(
                f"{path}: damaged FAISS index (not the bytes `bitextmine index` wrote: its checksum "
                f"differs); delete it and rerun `bitextmine index {info.lang}`"
            )


def _stale(lang: str) -> BitextmineError:
    return BitextmineError(
        f"index of '{lang}' is stale (built from other embeddings, or by an older bitextmine): "
        f"rerun `bitextmine index {lang}`"
    )
