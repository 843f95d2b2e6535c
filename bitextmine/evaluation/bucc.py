"""Precision, recall and F1 on a BUCC-format split: of the split mined with an encoder and kept at a
threshold (`BuccEvaluator`, `eval bucc` and train's dev F1), or of a `mine` output file
(`MinedFileEvaluator`, `eval bucc --mined`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bitextmine.calibration.bucc import BuccSplit, Scores
from bitextmine.calibration.split_mining import (
    SplitCandidates,
    calibrate_threshold,
    mine_split,
    mine_workspace_split,
    score_mined_file,
    scores_at,
)
from bitextmine.calibration.thresholds import ThresholdChoice, encoder_threshold
from bitextmine.encoder.cache import VectorSources
from bitextmine.encoder.encoder import SentenceEncoder
from bitextmine.errors import BitextmineError
from bitextmine.evaluation.evaluator import Evaluator
from bitextmine.mining.filters import NO_FILTERS, FilterSettings, PairFilter
from bitextmine.mining.settings import MiningSettings
from bitextmine.progress import Progress
from bitextmine.text.languages import parse_pair
from bitextmine.workspace.layout import Workspace, check_workspace


@dataclass
class EvaluateOptions(MiningSettings):  # k, margin, strategy, then:
    threshold: float | str = "auto"  # a number, "auto", "auto:PAIR" or "oracle" (the best on the split)
    thresholds: Path | None = None  # the threshold store of "auto"; default: the workspace's
    filters: FilterSettings = field(default_factory=lambda: NO_FILTERS)


@dataclass
class BuccEvaluation:
    pair: str
    split: str
    settings: MiningSettings | None  # None: a mined file was scored
    scores: Scores
    threshold: float | None
    candidates: int  # one-to-one candidates before the threshold
    source: str | None  # where the threshold came from, for people
    filtered: dict[str, int]  # pairs each filter dropped among those reaching the threshold
    sources: VectorSources | None  # how many sentence vectors were encoded, reused, read from the cache

    def metrics(self) -> dict[str, float]:
        return {f"bucc/{self.pair}": round(100 * self.scores.f1, 2)}

    def to_json(self) -> dict[str, Any]:
        return {
            "pair": self.pair,
            "split": self.split,
            **self.scores.as_percent(),
            "threshold": self.threshold,
            "threshold_source": self.source,
            "margin": None if self.settings is None else self.settings.margin,
            "strategy": None if self.settings is None else self.settings.strategy,
            "predicted": self.scores.predicted,
            "gold": self.scores.gold,
            "filtered": self.filtered,
            "vectors": None if self.sources is None else asdict(self.sources),
        }


@dataclass
class BuccEvaluator(Evaluator):
    """P/R/F1 of the split mined with the encoder, keeping pairs scoring >= `options.threshold`: a number,
    "auto" or "auto:PAIR" (calibrated for this pair or for PAIR, from the threshold store, default the
    workspace's, else the model dir's old bitextmine.json) or "oracle" (the best on this split), and
    passing `options.filters`."""

    split: BuccSplit
    options: EvaluateOptions = field(default_factory=EvaluateOptions)
    # the sentences it holds vectors of are not encoded again, the others are cached in it (as in
    # `calibrate`); None: every sentence is encoded, nothing is written (train's evaluation)
    workspace: Workspace | None = None
    progress: Progress = field(default_factory=Progress)

    @property
    def primary_metric(self) -> str:
        return f"bucc/{self.split.pair}"

    def __call__(self, encoder: SentenceEncoder) -> BuccEvaluation:
        split, options = self.split, self.options
        pair_filter = PairFilter(options.filters, *parse_pair(split.pair))
        oracle = options.threshold == "oracle"
        if not oracle:  # before the encoding: a missing calibration is an error at once
            choice = self._chosen(encoder)
        mined = self._mine(encoder)
        if oracle:
            best = calibrate_threshold(mined).threshold
            choice = ThresholdChoice(best, split.pair, f"the best on {split.pair} {split.split} (oracle)")
        return BuccEvaluation(
            split.pair,
            split.split,
            options,
            scores_at(mined, choice.value, pair_filter),
            choice.value,
            len(mined.candidates),
            choice.source,
            pair_filter.counts(),
            mined.sources,
        )

    def _chosen(self, encoder: SentenceEncoder) -> ThresholdChoice:
        options, workspace = self.options, self.workspace
        store = options.thresholds or (workspace.thresholds_file() if workspace is not None else None)
        if store is None and isinstance(options.threshold, str):
            raise BitextmineError(f"threshold {options.threshold}: give options.thresholds or a workspace")
        return encoder_threshold(
            options.threshold, store, encoder, margin=options.margin, k=options.k, pair=self.split.pair
        )

    def _mine(self, encoder: SentenceEncoder) -> SplitCandidates:
        if self.workspace is None:
            return mine_split(self.split, encoder, self.options)
        workspace, split, options = self.workspace, self.split, self.options
        return mine_workspace_split(workspace, split, encoder, options, self.progress, "eval-bucc")


@dataclass
class MinedFileEvaluator(Evaluator):
    """P/R/F1 of a `mine` output file against the split's gold, its sentences matched by text
    (`score_mined_file`); the pairs are mined already, so the encoder it is called with is not used."""

    split: BuccSplit
    path: Path

    @property
    def primary_metric(self) -> str:
        return f"bucc/{self.split.pair}"

    def __call__(self, encoder: SentenceEncoder | None = None) -> BuccEvaluation:
        scores = score_mined_file(self.path, self.split)
        split = self.split
        return BuccEvaluation(split.pair, split.split, None, scores, None, scores.predicted, None, {}, None)


def evaluate_bucc(
    workspace: Workspace,
    split: BuccSplit,
    encoder: SentenceEncoder,
    options: EvaluateOptions | None = None,
    progress: Progress | None = None,
) -> BuccEvaluation:
    """`BuccEvaluator` on a workspace: P/R/F1 of the split mined with `encoder` at `options.threshold`,
    the sentences encoded as in `calibrate`."""
    check_workspace(workspace, "evaluate_bucc")
    return BuccEvaluator(split, options or EvaluateOptions(), workspace, progress or Progress())(encoder)
