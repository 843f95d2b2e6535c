"""The calibrate step: learn a margin threshold on a BUCC-format split (best F1, or the lowest reaching a
target precision) and record it in a threshold store (scoring at a threshold: evaluation/bucc.py)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from bitextmine.calibration.bucc import BuccSplit
from bitextmine.calibration.pairs_store import pairs_file, save_pairs
from bitextmine.calibration.split_mining import SplitCandidates, calibrate_threshold, mine_vectors
from bitextmine.calibration.split_mining import mine_workspace_split as _mine_split
from bitextmine.calibration.sweep import SweepResult, check_rule
from bitextmine.calibration.thresholds import ThresholdRecord, store_threshold
from bitextmine.encoder.cache import VectorSources
from bitextmine.encoder.encoder import SentenceEncoder
from bitextmine.encoder.settings import trained_by_bitextmine
from bitextmine.errors import BitextmineError
from bitextmine.mining.settings import MiningSettings
from bitextmine.progress import Progress
from bitextmine.workspace.external import external_fingerprint
from bitextmine.workspace.layout import Workspace, check_workspace
from bitextmine.workspace.scratch import scratch_folder


@dataclass
class CalibrateOptions(MiningSettings):  # k, margin, strategy, then the rule (at most one; neither:
    # best F1, or TRAINED_MODEL_PLATEAU for a model bitextmine trained)
    target_precision: float | None = None  # the lowest threshold reaching this precision
    plateau: float | None = None  # the middle of the thresholds within this many F1 points of the best
    thresholds: Path | None = None  # the threshold store; default: the workspace's

    def __post_init__(self) -> None:  # before the encoding, not after it
        super().__post_init__()
        check_rule(self.target_precision, self.plateau)


# For a model bitextmine trained, the middle of the thresholds within 1 F1 point of the best transferred to
# held-out halves of every dev split better than the best-F1 threshold; for the base model the two rules
# tied (examples/benchmarks/results/bench_thresholds.md).
TRAINED_MODEL_PLATEAU = 1.0


@dataclass
class Calibration:
    pair: str
    split: str
    settings: MiningSettings
    result: SweepResult  # the threshold, the P/R/F1 it gives on the split, the whole curve, the rule
    record: ThresholdRecord  # what was stored: the threshold with its model, split, scores and rule
    stored_in: Path  # the threshold store
    pairs_in: Path  # the split's gold pairs, which `mine --threshold auto` plants (calibration/planted.py)
    sources: VectorSources | None  # how many sentence vectors were encoded, reused, read from the cache
    # (None: the vectors were made elsewhere, `calibrate_embeddings`)
    rule_note: str | None = None  # why the rule, where the options gave none

    def to_json(self) -> dict[str, Any]:
        """The settings, the stored record, where the sentence vectors came from, the chosen point and
        the curve (every threshold tried, decreasing, with precision, recall and F1 in percent, kept and
        true pairs)."""
        result = self.result
        chosen = {"threshold": result.threshold, **result.scores.as_percent()}
        chosen |= {"kept": result.scores.predicted, "true_positives": result.scores.true_positives}
        return {
            "pair": self.pair,
            "split": self.split,
            "margin": self.settings.margin,
            "strategy": self.settings.strategy,
            "k": self.settings.k,
            "model": self.record.model,
            "fingerprint": self.record.fingerprint,
            "rule": result.rule,
            "rule_note": self.rule_note,
            "candidates": result.candidates,
            "gold": result.scores.gold,
            "stored_in": str(self.stored_in),
            "pairs_in": str(self.pairs_in),
            "vectors": None if self.sources is None else asdict(self.sources),
            "chosen": chosen,
            "curve": result.curve.rows(),
        }


def calibrate(
    workspace: Workspace,
    split: BuccSplit,
    encoder: SentenceEncoder,
    options: CalibrateOptions | None = None,
    progress: Progress | None = None,
) -> Calibration:
    """Encode and mine the split exactly and find the threshold with the best F1, the lowest whose
    precision is at least `options.target_precision`, or the middle of those within `options.plateau`
    F1 points of the best (by default for a model bitextmine trained: TRAINED_MODEL_PLATEAU); record it
    in the threshold store (`options.thresholds`, default the workspace's) under the encoder's
    fingerprint, margin and the pair, for `threshold="auto"`. Sentences whose vectors the workspace holds
    (same encoder and precision, see encoder/held.py) are not encoded again, the others are cached in
    it; `progress` counts the sentences encoded."""
    check_workspace(workspace, "calibrate")
    options, progress = options or CalibrateOptions(), progress or Progress()
    options, note = _default_rule(options, trained_by_bitextmine(encoder.loaded.model_dir))
    mined = _mine_split(workspace, split, encoder, options, progress, "calibrate")
    model = (encoder.loaded.name, encoder.fingerprint)
    store = options.thresholds or workspace.thresholds_file()
    return replace(_store_calibration(mined, model, options, store), rule_note=note)


def _default_rule(options: CalibrateOptions, trained: bool) -> tuple[CalibrateOptions, str | None]:
    """The options with the default rule where they give none, and why it is the default."""
    if options.target_precision is not None or options.plateau is not None:
        return options, None
    if not trained:
        return options, "the default for a model bitextmine did not train"
    note = (
        "the default for a model bitextmine trained: on held-out halves of the dev splits it lost less F1 "
        "than the best-F1 threshold (bench_thresholds); --plateau 0 takes the best F1"
    )
    return replace(options, plateau=TRAINED_MODEL_PLATEAU), note


def calibrate_embeddings(
    workspace: Workspace,
    split: BuccSplit,
    vectors: tuple[np.ndarray, np.ndarray],
    model_name: str,
    options: CalibrateOptions | None = None,
) -> Calibration:
    """`calibrate` on vectors made elsewhere by the model `model_name`: each side's sentences' (`vectors`:
    `read_split_vectors`, `read_pairs_vectors`). The threshold is stored under the fingerprint that
    `encode --embeddings --model-name` gives that name, where `mine --threshold auto` finds it for the
    languages imported under it."""
    check_workspace(workspace, "calibrate_embeddings")
    if not model_name:
        raise BitextmineError("--embeddings needs --model-name, the model that made them")
    options = options or CalibrateOptions()
    src, tgt = vectors
    with scratch_folder(workspace, "calibrate") as scratch:
        mined = mine_vectors(split, src, tgt, options, scratch)
    model = (model_name, external_fingerprint(model_name))
    return _store_calibration(mined, model, options, options.thresholds or workspace.thresholds_file())


def _store_calibration(
    mined: SplitCandidates, model: tuple[str, str], options: CalibrateOptions, store: Path
) -> Calibration:
    """Choose the threshold of the mined split by the options' rule, and record it under `model` (name,
    fingerprint) in `store`."""
    split = mined.split
    result = calibrate_threshold(mined, options.target_precision, options.plateau)
    record = ThresholdRecord.from_sweep(
        result,
        fingerprint=model[1],
        model=model[0],
        margin=options.margin,
        k=options.k,
        strategy=options.strategy,
        pair=split.pair,
        split=split.split,
        sentences=split.sentences,
    )
    store_threshold(store, record)
    pairs = pairs_file(store, model[1], split.pair)
    save_pairs(pairs, mined.gold_pairs)
    return Calibration(split.pair, split.split, options, result, record, store, pairs, mined.sources)
