"""Two lists of sentences to their translation pairs in one call: `mine_sentences`, for Python users who
know sentence-transformers' `paraphrase_mining` (pairs by decreasing score, the score first)."""

from __future__ import annotations

import operator
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, SupportsIndex, overload

from bitextmine.encoder.cache import embed
from bitextmine.encoder.foreign import SupportsEncode
from bitextmine.mining.arrays import mine_arrays
from bitextmine.mining.selection import Candidates

if TYPE_CHECKING:
    import pandas

    from bitextmine.encoder.encoder import SentenceEncoder


class SentencePair(NamedTuple):
    """One mined pair: its margin score, the two sentences and their positions in the lists given."""

    score: float
    src: str
    tgt: str
    src_index: int
    tgt_index: int


@dataclass
class SentencePairs:
    """One-to-one pairs by decreasing score: a sequence of `SentencePair`s (`pairs[0]`, `for score, src,
    tgt, i, j in pairs`; a slice gives SentencePairs); `.candidates` holds the row numbers and scores."""

    candidates: Candidates
    src_sentences: Sequence[str]
    tgt_sentences: Sequence[str]

    def __len__(self) -> int:
        return len(self.candidates)

    @overload
    def __getitem__(self, key: SupportsIndex) -> SentencePair: ...

    @overload
    def __getitem__(self, key: slice) -> SentencePairs: ...

    def __getitem__(self, key: SupportsIndex | slice) -> SentencePair | SentencePairs:
        if isinstance(key, slice):
            return SentencePairs(self.candidates[key], self.src_sentences, self.tgt_sentences)
        src, tgt, score = self.candidates[operator.index(key)]
        return SentencePair(score, self.src_sentences[src], self.tgt_sentences[tgt], src, tgt)

    def __iter__(self) -> Iterator[SentencePair]:
        for row in range(len(self)):
            yield self[row]

    def to_pandas(self) -> pandas.DataFrame:
        """The pairs as a DataFrame: score, src, tgt, src_index, tgt_index, cosine."""
        table = self.candidates.to_pandas().rename(columns={"src": "src_index", "tgt": "tgt_index"})
        table.insert(0, "tgt", [self.tgt_sentences[i] for i in self.candidates.tgt])
        table.insert(0, "src", [self.src_sentences[i] for i in self.candidates.src])
        return table[["score", "src", "tgt", "src_index", "tgt_index", "cosine"]]


def mine_sentences(
    model: str | os.PathLike[str] | SentenceEncoder | SupportsEncode,
    src_sentences: Sequence[str],
    tgt_sentences: Sequence[str],
    *,
    threshold: float | None = None,
    k: int = 4,
    margin: str = "ratio",
    strategy: str = "max",
    batch_size: int | None = None,
    show_progress_bar: bool = False,
    cache_dir: str | os.PathLike[str] | None = None,
    device: str = "cpu",
) -> SentencePairs:
    """The translation pairs between `src_sentences` and `tgt_sentences`: both encoded by `model` (as
    `embed` takes it: a model dir or hub id, a SentenceEncoder, a SentenceTransformer), mined exactly
    (`mine_arrays`: `k`, `margin`, `strategy`, `device`), one-to-one, by decreasing score; with
    `threshold`, only the pairs scoring at least that."""
    src_list, tgt_list = list(src_sentences), list(tgt_sentences)
    options = {"batch_size": batch_size, "show_progress_bar": show_progress_bar}
    src = embed(model, src_list, cache_dir, **options)
    tgt = embed(model, tgt_list, cache_dir, **options)
    candidates = mine_arrays(src, tgt, k=k, margin=margin, strategy=strategy, device=device)
    if threshold is not None:
        candidates = candidates.above(threshold)
    return SentencePairs(candidates, src_list, tgt_list)
