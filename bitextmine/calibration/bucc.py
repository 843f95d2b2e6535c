"""BUCC 2018 files, precision/recall/F1 of mined pairs, and the F1-optimal threshold (docs/design.md).

A split of pair ``de-en`` in a directory is three files: ``de-en.dev.de`` and ``de-en.dev.en`` with
lines ``ID<TAB>SENTENCE``, and ``de-en.dev.gold`` with lines ``DE-ID<TAB>EN-ID`` (one-to-one); each may
be compressed (``de-en.scale.de.zst``, ``.gz``, ``.xz``).
The threshold sweep follows DAP appendix B and LASER's BUCC script: sort the candidate scores and try
a threshold at every midpoint between consecutive distinct scores, keeping the best F1 (or, with a
target precision, the lowest threshold that reaches it). The whole curve is kept for reports and plots.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bitextmine.errors import BitextmineError, Warn, warn_user, whole_number
from bitextmine.text.languages import parse_pair
from bitextmine.text.reader import read_lines


class BuccError(BitextmineError):
    """Bad BUCC input; a one-line message naming the file and, when it applies, ``path:LINE:``."""


BEST_F1 = "best F1"
COMPRESSED_SUFFIXES = (".zst", ".gz", ".xz")
_BOM = "\ufeff"


@dataclass
class BuccSide:
    lang: str
    ids: list[str]
    sentences: list[str]


@dataclass
class BuccSplit:
    pair: str
    split: str
    src: BuccSide  # the non-English side, DIR/{pair}.{split}.{x}
    tgt: BuccSide  # English, DIR/{pair}.{split}.en
    gold: set[tuple[str, str]] | None  # (x-id, en-id); None when the gold file is absent and not required

    @property
    def sentences(self) -> int:
        """Sentences on both sides."""
        return len(self.src.sentences) + len(self.tgt.sentences)


@dataclass(frozen=True)
class Scores:
    """Precision, recall and F1 as fractions; 0.0 where undefined (nothing predicted, no gold)."""

    precision: float
    recall: float
    f1: float
    true_positives: int
    predicted: int
    gold: int

    def as_percent(self) -> dict[str, float]:
        return {"precision": 100 * self.precision, "recall": 100 * self.recall, "f1": 100 * self.f1}


@dataclass(frozen=True, eq=False)
class SweepCurve:
    """Every threshold the sweep tried, decreasing, and what keeping the scores >= it gives."""

    thresholds: np.ndarray
    true_positives: np.ndarray
    kept: np.ndarray
    gold: int

    def scores(self, point: int) -> Scores:
        return _scores(int(self.true_positives[point]), int(self.kept[point]), self.gold)

    def precision(self) -> np.ndarray:
        return np.divide(self.true_positives, self.kept, out=np.zeros(self.kept.shape), where=self.kept > 0)

    def f1(self) -> np.ndarray:
        return 2 * self.true_positives / (self.kept + self.gold)

    def rows(self) -> list[dict[str, float]]:
        """One JSON object a threshold: the threshold, precision, recall and F1 in percent, kept, TP."""
        return [
            {"threshold": float(t), **self.scores(i).as_percent(), "kept": int(k), "true_positives": int(tp)}
            for i, (t, k, tp) in enumerate(zip(self.thresholds, self.kept, self.true_positives, strict=True))
        ]


@dataclass(frozen=True)
class SweepResult:
    threshold: float  # keep candidates with score >= threshold
    scores: Scores
    candidates: int  # number of candidate pairs swept over
    curve: SweepCurve
    rule: str = BEST_F1  # how the threshold was chosen: BEST_F1, target_rule(P) or plateau_rule(points)


def read_bucc(
    directory: Path, pair: str, split: str, *, require_gold: bool = True, warn: Warn = warn_user
) -> BuccSplit:
    """Read ``DIR/PAIR.SPLIT.{x,en,gold}``, each plain or compressed (`bucc_file`); gold is None when
    its file is absent and not required. Invalid UTF-8 is replaced and reported through `warn`
    (text/reader.py)."""
    src_lang, tgt_lang = parse_pair(pair)
    names = [f"{pair}.{split}.{ext}" for ext in (src_lang, tgt_lang, "gold")]
    src_path, tgt_path, gold_path = (bucc_file(Path(directory), name) for name in names)
    required = [src_path, tgt_path] + ([gold_path] if require_gold else [])
    for name, path in zip(names, required, strict=False):
        if path is None:
            expected = f"{', '.join(names)}, each plain or {'/'.join(COMPRESSED_SUFFIXES)}"
            raise BuccError(f"{Path(directory) / name}: no such file (expected BUCC 2018 files {expected})")
    src = _read_side(src_path, src_lang, warn)
    tgt = _read_side(tgt_path, tgt_lang, warn)
    gold = _read_gold(gold_path, src, tgt, warn) if gold_path is not None else None
    if require_gold and not gold:
        raise BuccError(f"{gold_path}: empty gold file, no pairs to score against")
    return BuccSplit(pair=pair, split=split, src=src, tgt=tgt, gold=gold)


def bucc_file(directory: Path, name: str) -> Path | None:
    """``DIR/NAME`` or ``DIR/NAME.zst``, ``.gz`` or ``.xz`` (read by content, text/reader.py); None when
    none exists, a one-line error when two do (they may differ)."""
    found = [path for suffix in ("", *COMPRESSED_SUFFIXES) if (path := directory / (name + suffix)).is_file()]
    if len(found) > 1:
        raise BuccError(f"{found[0]} and {found[1].name} both exist: keep one")
    return found[0] if found else None


def _lines(path: Path, warn: Warn) -> Iterator[tuple[int, str]]:
    """The file's lines, without a UTF-8 byte order mark at its start (Windows editors write one; it
    would become part of the first id)."""
    for number, line in read_lines(path, warn):
        yield number, line.removeprefix(_BOM) if number == 1 else line


def _read_side(path: Path, lang: str, warn: Warn) -> BuccSide:
    first_line: dict[str, int] = {}
    sentences: list[str] = []
    for number, line in _lines(path, warn):
        ident, tab, sentence = line.partition("\t")
        if not (tab and ident and sentence):
            raise BuccError(f"{path}:{number}: expected ID<TAB>SENTENCE")
        if ident in first_line:
            raise BuccError(f"{path}:{number}: duplicate id {ident} (first on line {first_line[ident]})")
        first_line[ident] = number
        sentences.append(sentence)
    if not sentences:
        raise BuccError(f"{path}: empty split, no sentences")
    return BuccSide(lang=lang, ids=list(first_line), sentences=sentences)


def _read_gold(path: Path, src: BuccSide, tgt: BuccSide, warn: Warn) -> set[tuple[str, str]]:
    sides = [(src.lang, set(src.ids), {}), (tgt.lang, set(tgt.ids), {})]
    pairs: dict[tuple[str, str], int] = {}
    for number, line in _lines(path, warn):
        where = f"{path}:{number}:"
        fields = tuple(line.split("\t"))
        if len(fields) != 2 or not all(fields):
            raise BuccError(f"{where} expected X-ID<TAB>EN-ID")
        if fields in pairs:
            raise BuccError(f"{where} duplicate pair {' '.join(fields)} (first on line {pairs[fields]})")
        for (lang, known, paired), ident in zip(sides, fields, strict=True):
            if ident not in known:
                raise BuccError(f"{where} unknown {lang} id {ident}")
            if ident in paired:
                raise BuccError(f"{where} {lang} id {ident} is already paired (line {paired[ident]})")
            paired[ident] = number
        pairs[fields] = number
    return set(pairs)


def _scores(true_positives: int, predicted: int, gold: int) -> Scores:
    """F1 is computed as 2·TP / (predicted + gold): equal to 2PR/(P+R), with one rounding."""
    return Scores(
        precision=true_positives / predicted if predicted else 0.0,
        recall=true_positives / gold if gold else 0.0,
        f1=2 * true_positives / (predicted + gold) if predicted + gold else 0.0,
        true_positives=true_positives,
        predicted=predicted,
        gold=gold,
    )


def score_pairs(predicted: Iterable[tuple[str, str]], gold: set[tuple[str, str]]) -> Scores:
    """Precision, recall and F1 of the (de-duplicated) predicted pairs against the gold pairs."""
    unique = set(predicted)
    return _scores(len(unique & gold), len(unique), len(gold))


def sweep_threshold(
    scores: np.ndarray,
    is_gold: np.ndarray,
    gold_total: int,
    target_precision: float | None = None,
    plateau: float | None = None,
) -> SweepResult:
    """The threshold with the best F1 over one-to-one candidates, among equal F1 the higher one; with
    `target_precision`, the lowest threshold whose precision is at least that (a BuccError if none is);
    with `plateau` (F1 points, above 0), the middle of the thresholds whose F1 is within that of the best.

    Tried: the midpoint between each two consecutive distinct scores, the minimum score (keeps all)
    and one above the maximum (keeps none). Thresholds are exact values of the scores' dtype (float32
    stays float32), so ``scores >= threshold`` reproduces the returned Scores exactly.
    """
    check_rule(target_precision, plateau)
    curve = sweep_curve(scores, is_gold, gold_total)
    if target_precision is not None:
        point, rule = _lowest_reaching(curve, target_precision), target_rule(target_precision)
    elif plateau:  # plateau 0 is the best F1
        point, rule = _plateau_middle(curve, plateau), plateau_rule(plateau)
    else:
        point, rule = int(np.argmax(curve.f1())), BEST_F1  # the first maximum is the highest threshold
    return SweepResult(float(curve.thresholds[point]), curve.scores(point), int(curve.kept[-1]), curve, rule)


def sweep_curve(scores: np.ndarray, is_gold: np.ndarray, gold_total: int) -> SweepCurve:
    """Every threshold of the sweep (see `sweep_threshold`), decreasing, with its kept and true counts."""
    values, gold_flags = _check_sweep_input(scores, is_gold, gold_total)
    order = np.argsort(values)[::-1]  # the order within ties does not matter: no cut falls inside one
    values, hits = values[order], np.cumsum(gold_flags[order])
    # keep the top `keep` candidates; a cut only where the next score is strictly lower (ties together)
    keep = np.append(np.flatnonzero(values[:-1] > values[1:]) + 1, values.size)
    return SweepCurve(
        thresholds=np.concatenate([[_above(values[0])], _midpoints(values, keep)]),
        true_positives=np.concatenate([[0], hits[keep - 1]]),
        kept=np.concatenate([[0], keep]),
        gold=gold_total,
    )


def target_rule(target_precision: float) -> str:
    """The rule recorded for a threshold chosen by `--target-precision` (checked here)."""
    if not 0 < target_precision <= 1:
        raise BitextmineError(f"--target-precision must be above 0 and at most 1, not {target_precision}")
    return f"precision >= {target_precision:g}"


def plateau_rule(points: float) -> str:
    """The rule recorded for a threshold chosen by `--plateau` (checked here)."""
    if not 0 <= points < 100:
        raise BitextmineError(f"--plateau must be at least 0 and below 100 F1 points, not {points}")
    return f"middle of F1 within {points:g} of the best"


def check_rule(target_precision: float | None, plateau: float | None) -> None:
    """One rule at most, each within its range (before any encoding)."""
    if target_precision is not None and plateau is not None:
        raise BitextmineError("--target-precision and --plateau are two rules for the threshold: give one")
    if target_precision is not None:
        target_rule(target_precision)
    if plateau is not None:
        plateau_rule(plateau)


def _plateau_middle(curve: SweepCurve, points: float) -> int:
    """The sweep point nearest the middle of the thresholds whose F1 is within `points` of the best: on a
    flat optimum (a trained model's scores) a score shift moves the best-F1 threshold's F1 least there."""
    f1 = curve.f1()
    near = np.flatnonzero(f1 >= f1.max() - points / 100 - 1e-12)
    thresholds = curve.thresholds[near].astype(np.float64)
    middle = (thresholds.max() + thresholds.min()) / 2
    return int(near[np.argmin(np.abs(thresholds - middle))])


def _lowest_reaching(curve: SweepCurve, target_precision: float) -> int:
    target_rule(target_precision)
    precision = curve.precision()
    reaching = np.flatnonzero(precision >= target_precision)
    if reaching.size == 0:
        best = int(np.argmax(precision))
        raise BuccError(
            f"no threshold reaches precision {target_precision:g} (the highest is {precision[best]:.4f}, "
            f"at threshold {curve.thresholds[best]:.4f}): lower --target-precision"
        )
    return int(reaching[-1])  # thresholds decrease: the last one reaching the target is the lowest


def _check_sweep_input(
    scores: np.ndarray, is_gold: np.ndarray, gold_total: int
) -> tuple[np.ndarray, np.ndarray]:
    values = np.asarray(scores)
    if values.dtype != np.float32:
        values = values.astype(np.float64)
    gold_flags = np.asarray(is_gold, dtype=bool)
    if values.ndim != 1 or values.shape != gold_flags.shape:
        raise ValueError(f"scores {values.shape} and is_gold {gold_flags.shape} must be 1-D of one length")
    if values.size == 0:
        raise BuccError("no candidate pairs to calibrate on")
    if gold_total <= 0:
        raise BuccError("no gold pairs to calibrate on (the gold file is empty)")
    if not np.isfinite(values).all():
        raise BuccError("candidate scores to calibrate on must be finite (found NaN or infinity)")
    if int(gold_flags.sum()) > gold_total:
        raise ValueError(f"{int(gold_flags.sum())} candidates are gold but gold_total is {gold_total}")
    return values, gold_flags


def _midpoints(values: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Threshold keeping exactly values[:k] for each k in `keep` (values sorted descending)."""
    last_kept, first_dropped = values[keep[:-1] - 1], values[keep[:-1]]
    with np.errstate(over="ignore"):
        middle = (last_kept + first_dropped) / 2
    # rounding can land the midpoint on the lower score (adjacent floats) or overflow: then use the kept one
    middle = np.where((middle > first_dropped) & (middle <= last_kept), middle, last_kept)
    return np.append(middle, values[-1])


def _above(top: np.floating) -> np.floating:
    """A threshold above every score, top + 1 where that is representable as larger."""
    return max(top + 1, np.nextafter(top, np.inf))


def sample_split(split: BuccSplit, max_sentences: int, seed: int = 0) -> BuccSplit:
    """A split of at most about `max_sentences` per side with the same share of gold pairs: the same
    seeded random fraction of the gold pairs and of each side's other sentences, in file order."""
    whole_number("max_sentences", max_sentences)
    fraction = min(1.0, max_sentences / max(len(split.src.ids), len(split.tgt.ids), 1))
    if fraction >= 1.0:
        return split
    rng = np.random.default_rng(seed)
    gold = sorted(split.gold or ())
    kept_gold = [gold[i] for i in np.sort(rng.permutation(len(gold))[: round(fraction * len(gold))])]
    in_gold = (
        {s for s, _ in gold},
        {t for _, t in gold},
    )
    keep = ({s for s, _ in kept_gold}, {t for _, t in kept_gold})
    sides = []
    for side, gold_ids, kept in zip((split.src, split.tgt), in_gold, keep, strict=True):
        others = [i for i in side.ids if i not in gold_ids]
        chosen = kept | {others[i] for i in rng.permutation(len(others))[: round(fraction * len(others))]}
        rows = [k for k, i in enumerate(side.ids) if i in chosen]
        sides.append(BuccSide(side.lang, [side.ids[k] for k in rows], [side.sentences[k] for k in rows]))
    return BuccSplit(split.pair, split.split, sides[0], sides[1], set(kept_gold))
