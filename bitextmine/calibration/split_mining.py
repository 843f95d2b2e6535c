"""Learn margin thresholds on BUCC-format splits and measure P/R/F1 with them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from bitextmine.calibration.bucc import BuccError, BuccSplit, Scores, score_pairs
from bitextmine.calibration.planted import CalibrationPairs
from bitextmine.calibration.sweep import SweepResult, sweep_threshold
from bitextmine.encoder.cache import VectorSources, embed_reusing
from bitextmine.encoder.encoder import SentenceEncoder
from bitextmine.encoder.held import held_vectors
from bitextmine.errors import Warn, warn_user
from bitextmine.mining.arrays import mine_arrays
from bitextmine.mining.filters import PairFilter
from bitextmine.mining.mined_file import mined_format, mined_records
from bitextmine.mining.selection import Candidates
from bitextmine.mining.settings import MiningSettings
from bitextmine.progress import Advance, Progress
from bitextmine.text.cleaning import clean_line
from bitextmine.text.languages import parse_pair
from bitextmine.text.reader import read_all_lines
from bitextmine.workspace.external import open_vectors
from bitextmine.workspace.layout import Workspace
from bitextmine.workspace.scratch import scratch_folder


@dataclass
class SplitCandidates:
    split: BuccSplit
    candidates: Candidates  # rows index split.src / split.tgt
    is_gold: np.ndarray
    gold_pairs: CalibrationPairs  # the vectors of the split's gold pairs, for `mine` to plant
    sources: VectorSources | None = None  # where the vectors came from (None: given to mine_vectors)


def mine_split(
    split: BuccSplit,
    encoder: SentenceEncoder,
    settings: MiningSettings,
    cache_dir: Path | None = None,
    progress: Advance | None = None,
    scratch: Path | None = None,
    *,
    reuse: Workspace | None = None,
) -> SplitCandidates:
    """Encode both sides of the split and mine its one-to-one candidates (exact search); the vectors that
    the `reuse` workspace holds for a side's sentences (in that side's language) are not encoded again.
    The selection's scratch goes to `scratch`, as in `mine_arrays`."""
    sides = []
    for side in (split.src, split.tgt):
        held = partial(held_vectors, reuse, side.lang, encoder) if reuse is not None else None
        sides.append(embed_reusing(encoder, side.sentences, cache_dir, progress, held))
    src, tgt = sides
    mined = mine_vectors(split, src.vectors, tgt.vectors, settings, scratch)
    mined.sources = src.sources + tgt.sources
    return mined


def mine_workspace_split(
    workspace: Workspace,
    split: BuccSplit,
    encoder: SentenceEncoder,
    settings: MiningSettings,
    progress: Progress,
    command: str,
) -> SplitCandidates:
    """`mine_split` for a step of `workspace`: the sentences it holds vectors of are not encoded again, the
    others are cached in it, the selection's scratch is a folder of it named after `command`, and the
    encoding is one stage of `progress`."""
    with (
        progress.stage(f"encoding {split.pair} {split.split}", split.sentences, rates=True),
        scratch_folder(workspace, command) as scratch,
    ):
        cache = workspace.embedding_cache_dir()
        return mine_split(split, encoder, settings, cache, progress.advance, scratch, reuse=workspace)


def mine_vectors(
    split: BuccSplit, src: np.ndarray, tgt: np.ndarray, settings: MiningSettings, scratch: Path | None = None
) -> SplitCandidates:
    """The split's one-to-one candidates from its sides' vectors (row i: sentence i), exact search."""
    candidates = mine_arrays(
        src, tgt, k=settings.k, margin=settings.margin, strategy=settings.strategy, scratch=scratch
    )
    gold = split.gold or set()
    is_gold = np.array(
        [
            (split.src.ids[s], split.tgt.ids[t]) in gold
            for s, t in zip(candidates.src, candidates.tgt, strict=True)
        ],
        dtype=bool,
    )
    return SplitCandidates(split, candidates, is_gold, _gold_pairs(split, src, tgt))


def _gold_pairs(split: BuccSplit, src: np.ndarray, tgt: np.ndarray) -> CalibrationPairs:
    src_row = {sentence_id: row for row, sentence_id in enumerate(split.src.ids)}
    tgt_row = {sentence_id: row for row, sentence_id in enumerate(split.tgt.ids)}
    rows = np.array(sorted((src_row[s], tgt_row[t]) for s, t in split.gold or ()), np.int64).reshape(-1, 2)
    return CalibrationPairs(src[rows[:, 0]], tgt[rows[:, 1]])


def split_vectors_files(directory: Path, pair: str, split: str) -> tuple[Path, Path]:
    """Where `calibrate --embeddings DIR` reads each side's vectors: DIR/PAIR.SPLIT.LANG.npy."""
    stem = Path(directory) / f"{pair}.{split}"
    src_lang, tgt_lang = parse_pair(pair)
    return Path(f"{stem}.{src_lang}.npy"), Path(f"{stem}.{tgt_lang}.npy")


def read_split_vectors(directory: Path, split: BuccSplit) -> tuple[np.ndarray, np.ndarray]:
    """The split's sentence vectors made elsewhere, one .npy a side (`split_vectors_files`), row i for the
    side's line i (`_read_vectors`)."""
    sides = (split.src, split.tgt)
    return _read_vectors(
        split_vectors_files(directory, split.pair, split.split),
        tuple(np.arange(len(side.ids)) for side in sides),
        tuple((f"{split.pair}.{split.split}.{side.lang}", len(side.ids)) for side in sides),
        f"DIR/{split.pair}.{split.split}.LANG.npy, one row a line of the split's LANG file",
    )


def pairs_vectors_files(directory: Path, src_path: Path, tgt_path: Path) -> tuple[Path, Path]:
    """Where `calibrate --pairs SRC TGT --embeddings DIR` reads each file's vectors: DIR/NAME.npy, NAME
    the file's name. Two files of one name (de/dev.txt, en/dev.txt) would read one file's vectors for
    both sides: a one-line error."""
    src_name, tgt_name = Path(src_path).name, Path(tgt_path).name
    if src_name == tgt_name:
        raise BuccError(
            f"{src_path} and {tgt_path} are both named {src_name}, so DIR/{src_name}.npy cannot hold the "
            "vectors of each: give the two files different names (a link under another name will do)"
        )
    return Path(directory) / f"{src_name}.npy", Path(directory) / f"{tgt_name}.npy"


def read_pairs_vectors(
    directory: Path, paths: tuple[Path, Path], split: BuccSplit
) -> tuple[np.ndarray, np.ndarray]:
    """The vectors made elsewhere of the split `read_aligned` made of the line-aligned `paths`: one .npy
    a file (`pairs_vectors_files`), row i for the file's line i + 1, blank lines too; each of the split's
    sentences takes its line's row (`_read_vectors`)."""
    counts = tuple(len(read_all_lines(path, lambda _: None)) for path in paths)
    return _read_vectors(
        pairs_vectors_files(directory, *paths),
        tuple(np.array([int(line) - 1 for line in side.ids], np.int64) for side in (split.src, split.tgt)),
        tuple((Path(path).name, count) for path, count in zip(paths, counts, strict=True)),
        "DIR/NAME.npy for each --pairs file NAME, one row a line of it",
    )


def _read_vectors(
    files: tuple[Path, Path], rows: tuple[np.ndarray, ...], texts: tuple[tuple[str, int], ...], layout: str
) -> tuple[np.ndarray, np.ndarray]:
    """The `rows` of each side's vectors in `files`, one row for each of the lines of its text file
    (`texts`: name, lines): L2-normalised and rounded through float16, as `encode --embeddings` stores them
    for `mine` (so the threshold transfers). A missing file (`layout` says where they go), a row count
    other than the text's lines, two dimensions, or a row of norm 0 or not finite is a one-line error
    naming the file."""
    sides = []
    for path, (name, lines) in zip(files, texts, strict=True):
        if not path.is_file():
            raise BuccError(f"{path}: no such file (calibrate --embeddings DIR reads {layout})")
        vectors = open_vectors(path)
        if vectors.rows != lines:
            raise BuccError(
                f"{path} has {vectors.rows:,} rows but {name} has {lines:,} lines: give one vector a line, "
                "in the file's order"
            )
        sides.append((path, vectors))
    (src_path, src), (tgt_path, tgt) = sides
    if src.dim != tgt.dim:
        raise BuccError(
            f"{src_path} has dim {src.dim} but {tgt_path.name} has dim {tgt.dim}: "
            "both sides need vectors of one model"
        )
    stored = [
        v.unit_rows(r).astype(np.float16).astype(np.float32) for v, r in zip((src, tgt), rows, strict=True)
    ]
    return stored[0], stored[1]


def calibrate_threshold(
    mined: SplitCandidates, target_precision: float | None = None, plateau: float | None = None
) -> SweepResult:
    """The threshold with the best F1 on this split (midpoints of consecutive candidate scores), the
    lowest one whose precision is at least `target_precision`, or the middle of those within `plateau`
    F1 points of the best."""
    gold = len(mined.split.gold or ())
    return sweep_threshold(mined.candidates.score, mined.is_gold, gold, target_precision, plateau)


def kept_candidates(
    mined: SplitCandidates, threshold: float, pair_filter: PairFilter | None = None
) -> Candidates:
    """The candidates scoring >= `threshold` that pass `pair_filter`, as `mine` keeps them."""
    kept = mined.candidates.above(threshold)
    if pair_filter is None:
        return kept
    src = [mined.split.src.sentences[i] for i in kept.src]
    tgt = [mined.split.tgt.sentences[i] for i in kept.tgt]
    mask = pair_filter.keep(kept.score, src, tgt)
    return Candidates(kept.src[mask], kept.tgt[mask], kept.score[mask], kept.cosine[mask])


def scores_at(mined: SplitCandidates, threshold: float, pair_filter: PairFilter | None = None) -> Scores:
    kept = kept_candidates(mined, threshold, pair_filter)
    ids = mined.split
    predicted = [(ids.src.ids[s], ids.tgt.ids[t]) for s, t in zip(kept.src, kept.tgt, strict=True)]
    return score_pairs(predicted, mined.split.gold or set())


def score_mined_file(path: str | os.PathLike[str], split: BuccSplit, warn: Warn = warn_user) -> Scores:
    """P/R/F1 of a `mine` output file, in any format `mine` writes (a name it does not end with is read
    as TSV, as `mine --format tsv` may write), against the split's gold, matching sentences by their
    text. Pairs whose sentences are not the split's are left out, with a warning; a file with none of
    the split's pairs (mined from another corpus) is refused rather than scored F1 0."""
    path = Path(path)
    if not path.exists():
        raise BuccError(f"{path}: no such file (run `bitextmine mine` first)")
    src_id = {clean_line(s): i for s, i in zip(split.src.sentences, split.src.ids, strict=True)}
    tgt_id = {clean_line(s): i for s, i in zip(split.tgt.sentences, split.tgt.ids, strict=True)}
    predicted, total = [], 0
    for _, src, tgt in mined_records(path, mined_format(path) or "tsv", warn):
        total += 1
        if src in src_id and tgt in tgt_id:
            predicted.append((src_id[src], tgt_id[tgt]))
    where, outside = f"{split.pair} {split.split}", total - len(predicted)
    if total and not predicted:
        raise BuccError(
            f"{path}: none of its {total:,} pairs are sentences of {where} (mined from another corpus?)"
        )
    if outside:
        warn(
            f"{path}: {outside:,} of its {total:,} pairs are not sentences of {where}; left out of the scores"
        )
    return score_pairs(predicted, split.gold or set())
