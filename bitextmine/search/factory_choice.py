"""Which index for n vectors of dim dimensions: exact search, IVF-Flat or OPQ+IVF-PQ, with no more
inverted lists than the training sample can train (search/training.py)."""

from __future__ import annotations

import math

from bitextmine.search.cost import EXACT_BUDGET_SECONDS
from bitextmine.search.factory import EXACT, ivf_lists
from bitextmine.search.training import MIN_TRAIN_PER_LIST, POINTS_PER_LIST, sample_cap

# Up to FLAT_MAX vectors exact search is affordable: a full kNN of 200k x 384 float32 (300 MB) against
# itself is ~3e13 flops, minutes on a CPU and seconds on a GPU, with nothing to train. Up to IVF_FLAT_MAX
# the uncompressed vectors of an IVF-Flat index still fit in RAM (4M x 384 x 4 B = 6 GB); beyond that
# OPQ+PQ stores dim/8 bytes per vector (48 B instead of 1536 B at dim 384: 1e9 vectors in ~48 GB).
# That compression costs recall on low-contrast e5 neighbourhoods, even after exact re-ranking, far more
# than SQ8 does (examples/benchmarks/results/constants.md, compressed indexes): hence Flat lists up to
# IVF_FLAT_MAX.
FLAT_MAX = 200_000
IVF_FLAT_MAX = 4_000_000
# The default IVF-Flat: lists of 1,000 vectors, probed 16 at a time, or one list in PROBED_SHARE where
# that is more (above 512 lists): on real de-en text 16 probes kept 99% of exact mining's pairs at 100k
# and 300k a side but not at 1M, where 32 did (examples/benchmarks/results/bench_scale_real.md). Beyond 1M
# the share is an extrapolation. Fixed lists keep a list's scan the same length at every N.
DEFAULT_LIST_SIZE = 1000
AUTO_NPROBE = 16
PROBED_SHARE = 32
MIN_LISTS, MAX_LISTS = 16, 262_144
# `--list-size` indexes find a query's lists by a flat (exact, BLAS) search of the centroids up to this
# many lists, an HNSW graph above: the flat search was faster than HNSW32 at FAISS's default efSearch,
# and found every nearest list where HNSW32 missed some, up to a few thousand centroids, and slower above
# (examples/benchmarks/results/constants.md, on copies).
# The library's own list count (no --list-size) takes the HNSW graph above this too.
FLAT_QUANTIZER_MAX_LISTS = 4096


def choose_factory(
    n: int,
    dim: int,
    list_size: int | None = None,
    exact_seconds: float | None = None,
    budget: float = EXACT_BUDGET_SECONDS,
) -> str:
    """The index for `n` vectors of `dim` dimensions: exact, IVF-Flat, or OPQ+IVF-PQ (see FLAT_MAX).

    Exact where mining exactly takes at most `budget` seconds by the measured `exact_seconds`
    (search/cost.py); without a measurement, up to FLAT_MAX vectors. Above, up to IVF_FLAT_MAX vectors,
    IVF-Flat with lists of DEFAULT_LIST_SIZE vectors, probed as `auto_nprobe` says.

    With `list_size`, always IVF: n / list_size lists, so that the lists a query scans at a given nprobe
    keep their length whatever n (with a list count growing like sqrt(n), the list length grows like
    sqrt(n) too), behind an HNSW coarse quantizer above FLAT_QUANTIZER_MAX_LISTS.
    """
    if list_size is not None:
        return _with_storage(n, dim, _coarse(_lists_of_size(n, list_size)))
    if (n <= FLAT_MAX) if exact_seconds is None else (exact_seconds <= budget):
        return EXACT
    if n <= IVF_FLAT_MAX:
        nlist = min(_lists_of_size(n, DEFAULT_LIST_SIZE), _affordable_lists(dim))
    else:
        nlist = min(_lists(n), _affordable_lists(dim))
    return _with_storage(n, dim, _coarse(nlist))


def auto_nprobe(factory: str) -> int | None:
    """The lists probed in an index of `choose_factory`'s own IVF-Flat choice: AUTO_NPROBE, or one list
    in PROBED_SHARE where that is more, never more than it has (None: tune by recall)."""
    nlist = ivf_lists(factory)
    if not nlist or not factory.endswith(",Flat"):
        return None
    return min(max(AUTO_NPROBE, nlist // PROBED_SHARE), nlist)


def _lists_of_size(n: int, list_size: int) -> int:
    return max(1, min(round(n / list_size), n // POINTS_PER_LIST))


def _coarse(nlist: int) -> str:
    """IVF with `nlist` lists, found by an HNSW graph above FLAT_QUANTIZER_MAX_LISTS."""
    return f"IVF{nlist}" + ("_HNSW32" if nlist > FLAT_QUANTIZER_MAX_LISTS else "")


def _affordable_lists(dim: int) -> int:
    """The most lists (a power of two) whose sample of MIN_TRAIN_PER_LIST rows each fits the cap."""
    return _floor_pow2(max(sample_cap(dim) // MIN_TRAIN_PER_LIST, 1))


def _with_storage(n: int, dim: int, ivf: str) -> str:
    """Full vectors in the lists up to IVF_FLAT_MAX, else OPQ-rotated PQ codes of dim / 8 bytes."""
    if n <= IVF_FLAT_MAX:
        return f"{ivf},Flat"
    m = max(d for d in range(1, max(1, dim // 8) + 1) if dim % d == 0)
    # "np": no polysemous training, which only serves Hamming-filtered search and costs seconds a
    # sub-quantizer
    return f"OPQ{m},{ivf},PQ{m}np"


def _lists(n: int) -> int:
    """A power of two near 16 sqrt(n), within [MIN_LISTS, MAX_LISTS] and n / POINTS_PER_LIST."""
    nlist = 2 ** round(math.log2(max(16 * math.sqrt(n), 1)))
    nlist = min(max(nlist, MIN_LISTS), MAX_LISTS)
    return min(nlist, _floor_pow2(max(n // POINTS_PER_LIST, 1)))


def _floor_pow2(x: int) -> int:
    return 1 << (x.bit_length() - 1)
