"""The calibrate step, and scoring on BUCC-format splits: learn a margin threshold on a split (best F1,
or the lowest reaching a target precision) and record it in a threshold store, or measure P/R/F1 at a
threshold."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bitextmine.calibration.bucc import BuccSplit, Scores, SweepResult, check_rule
from bitextmine.calibration.split_mining import (
    SplitCandidates,
    calibrate_threshold,
    mine_split,
    mine_vectors,
    read_split_vectors,
    scores_at,
)
from bitextmine.calibration.thresholds import (
    ThresholdChoice,
    ThresholdRecord,
    resolve_threshold,
    store_threshold,
)
from bitextmine.encoder.cache import VectorSources
from bitextmine.encoder.encoder import ProgressCallback, SentenceEncoder
from bitextmine.errors import BitextmineError
from bitextmine.mining.filters import NO_FILTERS, FilterSettings, PairFilter
from bitextmine.mining.settings import MiningSettings
from bitextmine.text.languages import parse_pair
from bitextmine.workspace.external import external_fingerprint
from bitextmine.workspace.layout import DEFAULT_WORKDIR, Workspace


@dataclass
class Calibration:
    pair: str
    split: str
    settings: MiningSettings
    result: SweepResult  # the threshold, the P/R/F1 it gives on the split, the whole curve, the rule
    record: ThresholdRecord  # what was stored: the threshold with its model, split, scores and rule
    stored_in: Path  # the threshold store
    sources: VectorSources | None  # how many sentence vectors were encoded, reused, read from the cache
    # (None: the vectors were made elsewhere, `calibrate_embeddings`)


@dataclass
class BuccEvaluation:
    scores: Scores
    threshold: float
    candidates: int  # one-to-one candidates before the threshold
    source: str  # where the threshold came from, for people
    filtered: dict[str, int]  # pairs each filter dropped among those reaching the threshold
    sources: VectorSources  # how many sentence vectors were encoded, reused, read from the cache


def default_store() -> Path:
    """The threshold store of the commands' default workspace, ``./bitextmine-work/thresholds.json``."""
    return Workspace(DEFAULT_WORKDIR).thresholds_file()


def calibrate(
    split: BuccSplit,
    encoder: SentenceEncoder,
    settings: MiningSettings | None = None,
    cache_dir: Path | None = None,
    progress: ProgressCallback | None = None,
    *,
    store: Path | None = None,
    target_precision: float | None = None,
    plateau: float | None = None,
    scratch: Path | None = None,
    reuse: Workspace | None = None,
) -> Calibration:
    """Encode and mine the split exactly and find the threshold with the best F1, the lowest whose
    precision is at least `target_precision`, or the middle of those within `plateau` F1 points of the
    best; record it in the threshold `store` (default: the default workspace's) under the encoder's
    fingerprint, margin and the pair, for `threshold="auto"`. Sentences whose vectors the `reuse`
    workspace holds (same encoder and precision, see encoder/held.py) are not encoded again. The
    mining's scratch goes to `scratch` (a workspace's scratch folder), else to $TMPDIR."""
    settings = settings or MiningSettings()
    check_rule(target_precision, plateau)  # before the encoding, not after it
    mined = mine_split(split, encoder, settings, cache_dir, progress, reuse=reuse, scratch=scratch)
    model = (encoder.loaded.name, encoder.fingerprint)
    return _store_calibration(mined, model, settings, store, target_precision, plateau)


def calibrate_embeddings(
    split: BuccSplit,
    vectors_dir: Path,
    model_name: str,
    settings: MiningSettings | None = None,
    *,
    store: Path | None = None,
    target_precision: float | None = None,
    plateau: float | None = None,
    scratch: Path | None = None,
) -> Calibration:
    """`calibrate` on vectors made elsewhere: `vectors_dir`/PAIR.SPLIT.LANG.npy, one row a line of the
    split's LANG file (`read_split_vectors`), by the model `model_name`. The threshold is stored under
    the fingerprint that `encode --embeddings --model-name` gives that name, where `mine --threshold
    auto` finds it for the languages imported under it."""
    if not model_name:
        raise BitextmineError(f"{vectors_dir}: --embeddings needs --model-name, the model that made them")
    settings = settings or MiningSettings()
    check_rule(target_precision, plateau)
    src, tgt = read_split_vectors(vectors_dir, split)
    mined = mine_vectors(split, src, tgt, settings, scratch)
    model = (model_name, external_fingerprint(model_name))
    return _store_calibration(mined, model, settings, store, target_precision, plateau)


def _store_calibration(
    mined: SplitCandidates,
    model: tuple[str, str],
    settings: MiningSettings,
    store: Path | None,
    target_precision: float | None,
    plateau: float | None,
) -> Calibration:
    """Choose the threshold of the mined split by the rule, and record it under `model` (name,
    fingerprint) in `store` (default: the default workspace's)."""
    store = store or default_store()
    split = mined.split
    result = calibrate_threshold(mined, target_precision, plateau)
    record = ThresholdRecord.from_sweep(
        result,
        fingerprint=model[1],
        model=model[0],
        margin=settings.margin,
        k=settings.k,
        strategy=settings.strategy,
        pair=split.pair,
        split=split.split,
    )
    store_threshold(store, record)
    return Calibration(split.pair, split.split, settings, result, record, store, mined.sources)


def evaluate_bucc(
    split: BuccSplit,
    encoder: SentenceEncoder,
    threshold: float | str = "auto",
    settings: MiningSettings | None = None,
    cache_dir: Path | None = None,
    progress: ProgressCallback | None = None,
    *,
    store: Path | None = None,
    filters: FilterSettings = NO_FILTERS,
    scratch: Path | None = None,
    reuse: Workspace | None = None,
) -> BuccEvaluation:
    """P/R/F1 of the split mined with `encoder`, keeping pairs scoring >= `threshold`: a number, "auto"
    or "auto:PAIR" (calibrated for this pair or for PAIR, from the threshold `store`, default the
    default workspace's, else the model dir's old bitextmine.json) or "oracle" (the best on this split).
    The mining's scratch goes to `scratch`, as in `calibrate`.
    Sentences whose vectors the `reuse` workspace holds are not encoded again."""
    settings = settings or MiningSettings()
    pair_filter = PairFilter(filters, *parse_pair(split.pair))
    oracle = threshold == "oracle"
    if not oracle:  # before the encoding: a missing calibration is an error at once
        choice = resolve_threshold(
            threshold,
            store=store or default_store(),
            fingerprint=encoder.fingerprint,
            margin=settings.margin,
            k=settings.k,
            pair=split.pair,
            model_dir=encoder.loaded.model_dir,
        )
    mined = mine_split(split, encoder, settings, cache_dir, progress, reuse=reuse, scratch=scratch)
    if oracle:
        best = calibrate_threshold(mined).threshold
        choice = ThresholdChoice(best, split.pair, f"the best on {split.pair} {split.split} (oracle)")
    scores = scores_at(mined, choice.value, pair_filter)
    return BuccEvaluation(
        scores, choice.value, len(mined.candidates), choice.source, pair_filter.counts(), mined.sources
    )
