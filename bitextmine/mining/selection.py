"""Candidate selection in bounded memory: the margin score of every sentence's neighbours, its best
candidate, then the greedy one-to-one pass by decreasing score (docs/design.md, "One-to-one selection").

Neighbour lists arrive block by block (the saved lists of one neighbour job, or one in-memory block).
What grows with the corpus lives in arrays memory-mapped under a scratch directory: both sides'
neighbourhood means, every query's decoy (mining/null_estimate.py), the used-sentence flags, one sorted
run of candidates per block and the selected pairs. The process itself holds one block, or a window
of every run while the runs are merged.
"""

from __future__ import annotations

import errno
import operator
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, NamedTuple, SupportsIndex, overload

import numpy as np

from bitextmine.errors import BitextmineError, BitextmineValueError, os_error_message
from bitextmine.faults import crash_point
from bitextmine.files import save_array
from bitextmine.mining.margin import check_margin, margin_scores
from bitextmine.mining.null_estimate import POOLED_DIRECTIONS, DecoyCounts, runner_up_decoys
from bitextmine.search.knn import Neighbours

if TYPE_CHECKING:
    import pandas

STRATEGIES = ("max", "intersect", "fwd", "bwd")
CANDIDATE_DTYPE = np.dtype([("score", "<f8"), ("cos", "<f8"), ("src", "<i8"), ("tgt", "<i8"), ("key", "<i8")])
MERGE_ROWS = 4_000_000  # candidates held at once while merging the sorted runs (~160 MB)

NeighbourBlocks = Callable[[], Iterable[tuple[int, Neighbours]]]  # (first query row, lists), in row order


class Pair(NamedTuple):
    """One candidate pair: rows of the source and target vectors, and its margin score."""

    src: int
    tgt: int
    score: float


@dataclass
class Candidates:
    """One-to-one candidate pairs sorted by decreasing score: a sequence of `Pair`s (`pairs[0]`, `for src,
    tgt, score in pairs`; a slice or a numpy index gives Candidates) over the arrays below."""

    src: np.ndarray  # int64 row ids
    tgt: np.ndarray  # int64 row ids
    score: np.ndarray  # float64
    cosine: np.ndarray  # float64

    @classmethod
    def from_records(cls, records: np.ndarray) -> Candidates:
        return cls(*(np.array(records[field]) for field in ("src", "tgt", "score", "cos")))

    def __len__(self) -> int:
        return len(self.src)

    @overload
    def __getitem__(self, key: SupportsIndex) -> Pair: ...

    @overload
    def __getitem__(self, key: slice | np.ndarray) -> Candidates: ...

    def __getitem__(self, key: SupportsIndex | slice | np.ndarray) -> Pair | Candidates:
        if isinstance(key, slice | np.ndarray):
            return Candidates(self.src[key], self.tgt[key], self.score[key], self.cosine[key])
        row = operator.index(key)
        return Pair(int(self.src[row]), int(self.tgt[row]), float(self.score[row]))

    def __iter__(self) -> Iterator[Pair]:
        for row in range(len(self)):
            yield self[row]

    def above(self, threshold: float) -> Candidates:
        return self[self.score >= threshold]

    def to_pandas(self) -> pandas.DataFrame:
        """The pairs as a DataFrame with the columns src, tgt, score and cosine."""
        try:
            import pandas
        except ImportError:
            raise ImportError("Candidates.to_pandas needs pandas: pip install 'bitextmine[pandas]'") from None
        columns = {"src": self.src, "tgt": self.tgt, "score": self.score, "cosine": self.cosine}
        return pandas.DataFrame(columns)


class Selection(NamedTuple):
    """What `select_candidates` gives: the one-to-one candidates (CANDIDATE_DTYPE records, best first),
    each query's decoy (null_estimate.runner_up_decoys; source queries, then target queries; NaN for a
    direction the strategy does not pool), the number of directions pooled, and the neighbourhood means
    the scores divide by (each source row's to its target neighbours, each target row's to its source
    neighbours)."""

    records: np.ndarray
    decoys: np.ndarray
    directions: int
    fwd_means: np.ndarray
    bwd_means: np.ndarray

    def decoy_counts(self) -> DecoyCounts:
        """The candidates and decoys reaching a threshold, for the estimated precision there."""
        return DecoyCounts(self.records["score"], self.decoys, self.directions)


@dataclass
class _Means:
    fwd: np.ndarray  # mean cosine of each source sentence to its target neighbours
    bwd: np.ndarray  # mean cosine of each target sentence to its source neighbours


def check_strategy(strategy: str) -> str:
    if strategy not in STRATEGIES:
        choices = ", ".join(STRATEGIES)
        raise BitextmineValueError(f"unknown candidate strategy {strategy!r}; choose one of {choices}")
    return strategy


def select_candidates(
    fwd: NeighbourBlocks,
    bwd: NeighbourBlocks,
    sizes: tuple[int, int],
    margin: str,
    strategy: str,
    scratch: Path,
    merge_rows: int = MERGE_ROWS,
) -> Selection:
    """One-to-one candidate pairs (CANDIDATE_DTYPE records, memory-mapped from `scratch`), best first, and
    the queries' decoys (a Selection).

    `fwd` holds the target neighbours of each of the `sizes[0]` source sentences, `bwd` the source
    neighbours of each of the `sizes[1]` target sentences. Each sentence's best-scoring neighbour is
    its candidate: `max` pools both directions' candidates, `intersect` keeps mutual ones. Pairs are
    taken by decreasing score (ties: the forward pool first, each by row) and a pair is dropped when
    its source or target was used.
    """
    check_margin(margin)
    check_strategy(strategy)
    scratch.mkdir(parents=True, exist_ok=True)
    n_src, n_tgt = sizes
    means = _Means(_means(fwd, n_src, scratch / "fwd-mean.npy"), _means(bwd, n_tgt, scratch / "bwd-mean.npy"))
    decoys = _scratch_array(scratch / "decoys.npy", np.float64, n_src + n_tgt)
    decoys[:] = np.nan
    pool = _pool(fwd, bwd, means, margin, strategy, sizes, scratch, decoys)
    runs = [_sorted_run(part, scratch / f"run-{number}.npy") for number, part in enumerate(pool) if len(part)]
    records = _one_to_one(_merged(runs, merge_rows), sizes, scratch)
    return Selection(records, decoys, POOLED_DIRECTIONS[strategy], means.fwd, means.bwd)


def _scratch_array(path: Path, dtype: type, rows: int) -> np.ndarray:
    """A zero-filled array of `rows`, memory-mapped from `path` (numpy cannot map an empty file), its
    disk space reserved before anything is written to it."""
    if rows == 0:
        return np.zeros(0, dtype)
    array = np.lib.format.open_memmap(path, "w+", dtype, (rows,))
    _reserve(path, array.offset)
    return array


ZERO_CHUNK = 1 << 24  # bytes written at a time where the space cannot be allocated otherwise


def _reserve(path: Path, start: int) -> None:
    """Allocate the blocks of `path` from byte `start` on. The file is sparse, and a page of its memory
    map that meets a full disk when first written kills the process with SIGBUS; here a full disk is a
    one-line error instead."""
    size = path.stat().st_size
    try:
        with open(path, "r+b") as fh:
            _allocate(fh, start, size)
    except OSError as exc:
        raise _no_room(path, size, exc) from None


def _no_room(path: Path, size: int, exc: OSError) -> BitextmineError:
    return BitextmineError(
        f"{path.parent}: cannot store {size:,} bytes of scratch data for the candidate selection "
        f"({path.name}: {os_error_message(exc)})"
    )


def _allocate(fh: BinaryIO, start: int, stop: int) -> None:
    """posix_fallocate, else (macOS, a file system without it) zeros written over the range."""
    allocate = getattr(os, "posix_fallocate", None)
    if allocate is not None:
        try:
            allocate(fh.fileno(), start, stop - start)
            return
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                raise
    fh.seek(start)
    for offset in range(start, stop, ZERO_CHUNK):
        fh.write(bytes(min(ZERO_CHUNK, stop - offset)))


def _means(blocks: NeighbourBlocks, rows: int, path: Path) -> np.ndarray:
    mean = _scratch_array(path, np.float64, rows)
    for first, hits in blocks():
        mean[first : first + len(hits.ids)] = hits.mean
    return mean


def _pool(
    fwd: NeighbourBlocks,
    bwd: NeighbourBlocks,
    means: _Means,
    margin: str,
    strategy: str,
    sizes: tuple[int, int],
    scratch: Path,
    decoys: np.ndarray,
) -> Iterator[np.ndarray]:
    """The candidates the strategy pools, one array per neighbour block; the decoys of their queries go
    to `decoys` (source rows first, then target rows)."""

    def bests(blocks: NeighbourBlocks, forward: bool) -> Iterator[np.ndarray]:
        offset = 0 if forward else sizes[0]
        for first, hits in blocks():
            scores = _block_scores(hits, first, means, margin, forward=forward)
            decoys[offset + first : offset + first + len(scores)] = runner_up_decoys(scores)
            yield _best(hits, scores, first, forward=forward, key_offset=offset)

    if strategy == "intersect":
        best_src_of_tgt = _scratch_array(scratch / "best-src-of-tgt.npy", np.int64, sizes[1])
        best_src_of_tgt[:] = -1
        for part in bests(bwd, forward=False):
            best_src_of_tgt[part["tgt"]] = part["src"]
        for part in bests(fwd, forward=True):
            yield part[best_src_of_tgt[part["tgt"]] == part["src"]]
        return
    if strategy in ("fwd", "max"):
        yield from bests(fwd, forward=True)
    if strategy in ("bwd", "max"):
        yield from bests(bwd, forward=False)


def _block_scores(hits: Neighbours, first: int, means: _Means, margin: str, *, forward: bool) -> np.ndarray:
    """The margin score of every neighbour of a block's queries; -inf where none was found."""
    rows = slice(first, first + len(hits.ids))
    found = hits.ids >= 0
    if not found.any():  # e.g. an empty other side: no means to look up
        return np.full(hits.ids.shape, -np.inf)
    other = np.where(found, hits.ids, 0)
    cos = hits.sims.astype(np.float64)
    if forward:
        scores = margin_scores(cos, means.fwd[rows][:, None], means.bwd[other], margin)
    else:
        scores = margin_scores(cos, means.fwd[other], means.bwd[rows][:, None], margin)
    return np.where(found, scores, -np.inf)


def _best(hits: Neighbours, scores: np.ndarray, first: int, *, forward: bool, key_offset: int) -> np.ndarray:
    """The best-scoring neighbour of every query of a block that has one, as candidate records."""
    found = hits.ids >= 0
    other = np.where(found, hits.ids, 0)
    cos = hits.sims.astype(np.float64)
    local = np.flatnonzero(found.any(1))
    if not len(local):
        return np.zeros(0, CANDIDATE_DTYPE)
    column = scores[local].argmax(1)
    query, best = local + first, other[local, column]
    records = np.empty(len(local), CANDIDATE_DTYPE)
    records["src"], records["tgt"] = (query, best) if forward else (best, query)
    records["score"], records["cos"] = scores[local, column], cos[local, column]
    records["key"] = query + key_offset
    return records


def _sort_keys(records: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(primary, secondary) ascending sort keys: decreasing score (NaN last), then the pool key."""
    descending = -records["score"]
    descending[np.isnan(descending)] = np.inf
    return descending, records["key"]


def _in_order(records: np.ndarray) -> np.ndarray:
    primary, secondary = _sort_keys(records)
    return records[np.lexsort((secondary, primary))]


def _sorted_run(part: np.ndarray, path: Path) -> np.ndarray:
    try:
        with open(path, "wb") as fh:
            save_array(fh, _in_order(part))
    except OSError as exc:
        raise _no_room(path, part.nbytes, exc) from None
    crash_point("selection.run")
    return np.load(path, mmap_mode="r")


def _merged(runs: list[np.ndarray], rows: int) -> Iterator[np.ndarray]:
    """The records of all sorted runs in one order, a batch at a time.

    Each round reads a window of every run; the records up to the earliest last record of a run that
    has more to read are final (nothing unread can come before them) and form the batch.
    """
    window = max(1, rows // max(len(runs), 1))
    starts = [0] * len(runs)
    while True:
        heads = [run[start : start + window] for run, start in zip(runs, starts, strict=True)]
        if not any(len(head) for head in heads):
            return
        open_ends = [
            head[-1:]
            for run, start, head in zip(runs, starts, heads, strict=True)
            if start + len(head) < len(run)
        ]
        limit = _in_order(np.concatenate(open_ends))[:1] if open_ends else None
        batch = []
        for number, head in enumerate(heads):
            count = len(head) if limit is None else _count_up_to(head, limit)
            batch.append(head[:count])
            starts[number] += count
        yield _in_order(np.concatenate(batch))


def _count_up_to(head: np.ndarray, limit: np.ndarray) -> int:
    """How many records of a sorted window come no later than the single record `limit`."""
    primary, secondary = _sort_keys(head)
    limit_primary, limit_secondary = _sort_keys(limit)
    before = (primary < limit_primary) | ((primary == limit_primary) & (secondary <= limit_secondary))
    return int(np.count_nonzero(before))


def _one_to_one(batches: Iterator[np.ndarray], sizes: tuple[int, int], scratch: Path) -> np.ndarray:
    used_src = _scratch_array(scratch / "used-src.npy", np.bool_, sizes[0])
    used_tgt = _scratch_array(scratch / "used-tgt.npy", np.bool_, sizes[1])
    path = scratch / "selected.bin"
    size = 0
    try:
        with open(path, "wb") as out:
            for batch in batches:
                data = batch[_greedy(batch, used_src, used_tgt)].tobytes()
                size += len(data)
                out.write(data)
    except OSError as exc:
        raise _no_room(path, size, exc) from None
    if path.stat().st_size == 0:
        return np.zeros(0, CANDIDATE_DTYPE)
    return np.memmap(path, CANDIDATE_DTYPE, "r")


def _greedy(batch: np.ndarray, used_src: np.ndarray, used_tgt: np.ndarray) -> np.ndarray:
    """Which pairs of an ordered batch the sequential greedy pass takes, marking their sentences used.

    Vectorised in rounds: a pair whose source and target occur in no earlier pair still in play is
    taken (nothing before it can block it), and pairs that now share a used sentence drop out.
    """
    src, tgt = batch["src"], batch["tgt"]
    taken = np.zeros(len(batch), bool)
    live = np.flatnonzero(~(used_src[src] | used_tgt[tgt]))
    while len(live):
        first = _first_occurrences(src[live]) & _first_occurrences(tgt[live])
        taken[live[first]] = True
        used_src[src[live[first]]] = True
        used_tgt[tgt[live[first]]] = True
        live = live[~first]
        live = live[~(used_src[src[live]] | used_tgt[tgt[live]])]
    return taken


def _first_occurrences(values: np.ndarray) -> np.ndarray:
    first = np.zeros(len(values), bool)
    first[np.unique(values, return_index=True)[1]] = True
    return first
