"""FAISS factory strings: the index one describes (refusing the sizes FAISS would crash on) and the
inverted lists it names. `EXACT` is no FAISS index here: it is searched by matrix products over the
embedding shards."""

from __future__ import annotations

import re

import faiss
import numpy as np

from bitextmine.errors import BitextmineError

EXACT = "Flat"  # searched by matrix products over the embedding shards (search/gemm.py): no FAISS file


def ivf_lists(factory: str) -> int | None:
    """The inverted lists the factory string names (``IVFn``); None: not IVF."""
    match = re.search(r"IVF(\d+)", factory)
    return int(match.group(1)) if match else None


def new_index(factory: str, dim: int) -> faiss.Index:
    """The empty index `factory` describes, over inner products of `dim`-d vectors; a factory FAISS
    refuses, or would crash on, is a one-line error."""
    _check_sizes(factory)
    try:
        return faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as exc:
        raise BitextmineError(f"invalid FAISS factory '{factory}': {faiss_message(exc)}") from None


def add_vectors(index: faiss.Index, block: np.ndarray, name: str) -> None:
    """`index.add(block)`; an index FAISS makes but cannot fill (`IDMap,Flat`, `NSG2`) is a one-line
    error: bad input, which running the job again cannot mend."""
    try:
        index.add(block)
    except RuntimeError as exc:
        raise BitextmineError(
            f"FAISS index {name} cannot take vectors: {faiss_message(exc)}; give another --factory"
        ) from None


def _check_sizes(factory: str) -> None:
    """Refuse the sizes that FAISS (1.15) accepts in a factory string and then aborts or crashes the
    process on, instead of raising: a 0 anywhere (HNSW0, IVF0, PQ16x0, RR0) and an HNSW graph of 1 link."""
    if re.search(r"(?<!\d)0+(?!\d)", factory):
        raise BitextmineError(f"invalid FAISS factory '{factory}': every size in it must be at least 1")
    if any(int(links) < 2 for links in re.findall(r"HNSW(\d+)", factory)):
        raise BitextmineError(f"invalid FAISS factory '{factory}': an HNSW graph needs at least 2 links")


def faiss_message(exc: Exception) -> str:
    """The first line of a FAISS error without its 'Error in <C++ signature> at <file>:<line>: ' prefix."""
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return re.sub(r"^Error in .*? at \S+:\d+: ", "", first)
