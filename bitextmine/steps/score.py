"""The `score` step: margin scores of a bitext the user already has (LASER's score mode), to filter it.

Each pair (x, y) of a line-aligned bitext gets margin(cos(x, y), fwd(x), bwd(y)) as `mine` scores its
candidates; the neighbourhood means fwd and bwd come from the bitext's own other side (exact search,
as LASER does) or from the corpora of a workspace (through their indexes, so the score of a pair that
`mine` found is the score `mine` gave it). Pairs are written in input order.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bitextmine.calibration.thresholds import ThresholdChoice, encoder_threshold
from bitextmine.encoder.cache import embed
from bitextmine.encoder.encoder import SentenceEncoder
from bitextmine.errors import BitextmineError, warn_user
from bitextmine.files import output_target
from bitextmine.mining.filters import NO_FILTERS, FilterSettings, PairFilter
from bitextmine.mining.margin import margin_scores
from bitextmine.mining.mined_file import (
    MinedOutput,
    ScoredRows,
    check_translation_pair,
    mining_settings,
    output_format,
    write_pairs,
)
from bitextmine.mining.settings import MarginSettings
from bitextmine.progress import Progress
from bitextmine.search.gemm import mutual_neighbours
from bitextmine.search.knn import Neighbours
from bitextmine.search.language_search import BaseSearch
from bitextmine.text.bitext import Bitext
from bitextmine.text.reader import Row
from bitextmine.workspace.corpus import SourceInfo
from bitextmine.workspace.language import open_language
from bitextmine.workspace.layout import Workspace, check_workspace
from bitextmine.workspace.locks import workspace_locks

NEIGHBOURHOODS = ("bitext", "workspace")
WRITE_ROWS = 500_000  # pairs written at a time


@dataclass
class ScoreOptions(MarginSettings):  # k, margin, then:
    neighbourhood: str = "bitext"  # "bitext": its own other side; "workspace": the workspace's corpora
    threshold: float | str | None = None  # a number, "auto", "auto:PAIR" or None (write every pair)
    filters: FilterSettings = field(default_factory=lambda: NO_FILTERS)
    format: str | None = None  # default: from the output's suffix
    nprobe: int | None = None  # workspace neighbourhoods: override the indexes' nprobe
    thresholds: Path | None = None  # the threshold store; default: the workspace's
    cache: bool = True  # keep the vectors in the workspace for a rerun; False: write nothing there

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.neighbourhood not in NEIGHBOURHOODS:
            choices = ", ".join(NEIGHBOURHOODS)
            raise BitextmineError(f"unknown neighbourhood {self.neighbourhood!r}; choose one of {choices}")


@dataclass
class ScoreSummary:
    pair: str
    pairs: int  # pairs scored
    empty: int  # pairs of the input left out: a side was empty once cleaned
    threshold: ThresholdChoice | None
    above_threshold: int
    filtered: dict[str, int]
    written: MinedOutput
    seconds: float

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["written"]["path"] = str(self.written.path)
        return data


def score_bitext(
    workspace: Workspace,
    bitext: Bitext,
    langs: tuple[str, str],
    encoder: SentenceEncoder,
    output: Path,
    options: ScoreOptions | None = None,
    progress: Progress | None = None,
) -> ScoreSummary:
    """Score every pair of `bitext` (languages `langs`) and write those reaching the threshold and
    passing the filters to `output`. `workspace` caches the vectors and holds the thresholds; its
    corpora of `langs` are the neighbourhoods when `options.neighbourhood` is "workspace". `progress`
    counts the sentences encoded."""
    check_workspace(workspace, "score_bitext")
    started = time.perf_counter()
    options, progress = options or ScoreOptions(), progress or Progress()
    pair = f"{langs[0]}-{langs[1]}"
    fmt = output_format(output, options.format)
    check_translation_pair(fmt, *langs)
    inputs = [bitext.src_file, bitext.tgt_file, options.thresholds]
    target = output_target(output, inputs=inputs, workspace=workspace)
    pair_filter = PairFilter(options.filters, *langs)
    store = options.thresholds or workspace.thresholds_file()
    threshold = encoder_threshold(
        options.threshold, store, encoder, margin=options.margin, k=options.k, pair=pair
    )
    cache = workspace.embedding_cache_dir() if options.cache else None
    with progress.stage(f"encoding {pair}", 2 * len(bitext), rates=True):
        src = embed(encoder, bitext.src, cache, progress.advance)
        tgt = embed(encoder, bitext.tgt, cache, progress.advance)
    if options.neighbourhood == "workspace":
        reads = [f"{part}-{lang}" for part in ("lang", "index") for lang in langs]
        with workspace_locks(workspace, write=[], read=reads):
            fwd, bwd = _workspace_means(workspace, langs, src, tgt, options, encoder)
    else:
        fwd, bwd = _own_means(src, tgt, options.k)
    cos = np.einsum("nd,nd->n", src, tgt).astype(np.float64)
    scores = margin_scores(cos, fwd, bwd, options.margin)
    keep = np.ones(len(scores), bool) if threshold is None else scores >= threshold.value
    files = [SourceInfo.of(bitext.src_file).path], [SourceInfo.of(bitext.tgt_file).path]  # ids as mine's
    span = (float(scores.min()), float(scores.max()))
    settings = mining_settings(
        encoder.loaded.name, encoder.fingerprint, options.margin, options.k, threshold, options.filters
    )
    rows = _rows(bitext, scores, keep)
    written = write_pairs(target, fmt, rows, files, pair_filter, span, settings=settings)
    seconds = time.perf_counter() - started
    above = int(np.count_nonzero(keep))
    return ScoreSummary(
        pair, len(bitext), bitext.empty, threshold, above, pair_filter.counts(), written, seconds
    )


def _own_means(src: np.ndarray, tgt: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Neighbourhood means within the bitext: each source among all targets, and back (exact)."""
    fwd, bwd = mutual_neighbours(src, tgt, k)
    return fwd.mean, bwd.mean


def _workspace_means(
    workspace: Workspace,
    langs: tuple[str, str],
    src: np.ndarray,
    tgt: np.ndarray,
    options: ScoreOptions,
    encoder: SentenceEncoder,
) -> tuple[np.ndarray, np.ndarray]:
    """Neighbourhood means among the workspace's corpora: sources among its target language, targets
    among its source language, as `mine` computes them."""
    for lang in langs:
        model = open_language(workspace, lang).vectors.model
        if model.fingerprint != encoder.fingerprint:
            raise BitextmineError(
                f"'{lang}' in {workspace.root} was encoded with {model.describe()}, not the model scoring "
                "the bitext: the neighbourhoods would compare vectors of two models"
            )
        if model.precision != encoder.precision:
            warn_user(
                f"'{lang}' in {workspace.root} was encoded in {model.precision}, the bitext in "
                f"{encoder.precision}: scores differ slightly from mine's "
                f"(pass --precision {model.precision})"
            )
    fwd = _search_means(workspace, langs[1], src, options)
    bwd = _search_means(workspace, langs[0], tgt, options)
    return fwd, bwd


def _search_means(
    workspace: Workspace, base_lang: str, queries: np.ndarray, options: ScoreOptions
) -> np.ndarray:
    search = BaseSearch(base_lang, options.k, options.nprobe)
    found: Neighbours = search.neighbours(workspace, lambda: [(0, queries)], len(queries))
    return found.mean


def _rows(bitext: Bitext, scores: np.ndarray, keep: np.ndarray) -> Iterator[ScoredRows]:
    """The pairs reaching the threshold, WRITE_ROWS at a time, as rows of the bitext's files."""
    kept = np.flatnonzero(keep)
    for first in range(0, len(kept), WRITE_ROWS):
        part = kept[first : first + WRITE_ROWS]
        src = [Row(0, bitext.lines[i], bitext.src[i]) for i in part]
        tgt = [Row(0, bitext.lines[i], bitext.tgt[i]) for i in part]
        yield scores[part], src, tgt, None
