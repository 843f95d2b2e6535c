"""k-NN search against one language of a workspace, whatever its index: the neighbours `mine` and
`score` look up; and exact search of two languages against each other, both ways at once."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from bitextmine.progress import Advance
from bitextmine.search.factory import EXACT
from bitextmine.search.index_files import load_index, load_index_info
from bitextmine.search.index_io import IndexCache
from bitextmine.search.ivf_scan import search
from bitextmine.search.knn import Neighbours, QueryBlocks, SearchShard, find_neighbours
from bitextmine.search.sharded import ShardedIndex
from bitextmine.workspace.language import open_language
from bitextmine.workspace.layout import Workspace

if TYPE_CHECKING:
    from bitextmine.search.gemm import GemmPlan


@dataclass(frozen=True)
class BaseSearch:
    """k-NN search of query vectors against one language of a workspace: through its FAISS index, or
    by exact matrix products over its embedding shards where the index is exact (Flat)."""

    base_lang: str
    k: int
    nprobe: int | None = None
    max_codes: int | None = None
    device: str = "auto"

    def neighbours(
        self,
        workspace: Workspace,
        blocks: QueryBlocks,
        queries: int,
        progress: Advance | None = None,
        indexes: IndexCache | None = None,
    ) -> Neighbours:
        """The k nearest base rows of the `queries` query vectors that `blocks` yields, exact cosines; the
        FAISS index is read through `indexes` where given (see `load_index`)."""
        base = open_language(workspace, self.base_lang).vectors
        if load_index_info(workspace.index_dir(), self.base_lang, base).factory == EXACT:
            from bitextmine.search.gemm import gemm_neighbours  # torch: see `_exact_plan`

            return gemm_neighbours(blocks, queries, base, self.k, _exact_plan(self.device), progress)
        index, info = load_index(
            workspace.index_dir(),
            self.base_lang,
            base,
            nprobe=self.nprobe,
            max_codes=self.max_codes,
            indexes=indexes,
        )
        if isinstance(index, ShardedIndex):
            shards = index.search_shards()
        else:
            shards = [SearchShard(lambda q, n: search(index, q, n))]

        def base_blocks() -> Iterator[tuple[int, np.ndarray]]:
            for block in blocks():
                yield block
                base.drop_pages()  # rows gathered for re-ranking

        return find_neighbours(base_blocks, queries, shards, base.take, self.k, progress, info.fetch)


def exact_both_ways(
    workspace: Workspace,
    src_lang: str,
    tgt_lang: str,
    k: int,
    device: str = "auto",
    progress: Advance | None = None,
) -> tuple[Neighbours, Neighbours]:
    """The exact k nearest `tgt_lang` rows of every `src_lang` row and back, from one matrix product per
    pair of blocks (search/gemm.py's `mutual_neighbours`: each product serves both directions, where
    two one-way searches compute it twice); `progress` counts the rows of both languages."""
    from bitextmine.search.gemm import mutual_neighbours  # torch: see `_exact_plan`

    src, tgt = (open_language(workspace, lang).vectors for lang in (src_lang, tgt_lang))
    return mutual_neighbours(src, tgt, k, _exact_plan(device), progress)


def _exact_plan(device: str) -> GemmPlan:
    """How exact search runs on `device` (auto, cpu, cuda, cuda:N). torch is imported here only: IVF and
    other FAISS searches run without it."""
    from bitextmine.search.gemm import GemmPlan

    return GemmPlan.for_device(device)
