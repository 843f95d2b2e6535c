"""How well mined candidates recover a subsample's hidden pairs, per source of the pairs (news, captions)
and over all: precision, recall and F1 at a threshold, the best F1 any threshold reaches (the oracle) and
its threshold, and the ceiling (the share of hidden pairs among the one-to-one candidates at any score).

A subset's precision counts the candidates that touch a sentence of that source's hidden pairs (either
side): a caption paired with the wrong caption counts against captions, a distractor paired with a
distractor against no source but the whole ("all").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SUBSETS = ("all", "news", "captions")


@dataclass
class Mined:
    """One-to-one candidates as (source row, target row, score), rows of the subsample's sides."""

    src: np.ndarray
    tgt: np.ndarray
    score: np.ndarray


@dataclass
class Hidden:
    """The subsample's hidden pairs: source row, target row and source name ("news", "captions") each."""

    src: np.ndarray
    tgt: np.ndarray
    source: np.ndarray


def quality(mined: Mined, hidden: Hidden, threshold: float) -> dict[str, dict]:
    """Per subset of SUBSETS: P/R/F1 (percent) at `threshold`, the oracle F1 and threshold, the ceiling."""
    partner = dict(zip(hidden.src.tolist(), hidden.tgt.tolist(), strict=True))
    right = np.array(
        [partner.get(s, -1) == t for s, t in zip(mined.src.tolist(), mined.tgt.tolist(), strict=True)], bool
    )
    rows = {}
    for subset in SUBSETS:
        chosen = np.ones(len(hidden.src), bool) if subset == "all" else hidden.source == subset
        touching = _touching(mined, hidden, chosen) if subset != "all" else np.ones(len(mined.src), bool)
        rows[subset] = _subset_quality(mined.score[touching], right[touching], int(chosen.sum()), threshold)
    return rows


def _touching(mined: Mined, hidden: Hidden, chosen: np.ndarray) -> np.ndarray:
    return np.isin(mined.src, hidden.src[chosen]) | np.isin(mined.tgt, hidden.tgt[chosen])


def _subset_quality(score: np.ndarray, right: np.ndarray, gold: int, threshold: float) -> dict:
    kept = score >= threshold
    order = np.argsort(-score, kind="stable")
    true_positives = np.cumsum(right[order])
    f1 = 2 * true_positives / (np.arange(1, len(order) + 1) + gold) if len(order) else np.zeros(1)
    descending = score[order]
    f1[:-1][descending[:-1] == descending[1:]] = -1.0  # a threshold keeps all of equal scores or none
    best = int(f1.argmax())
    return {
        "gold": gold,
        **prf(int((right & kept).sum()), int(kept.sum()), gold),
        "oracle_f1": round(100 * float(f1[best]), 2),
        "oracle_threshold": _midpoint(score[order], best),
        "ceiling": round(100 * int(right.sum()) / max(gold, 1), 2),
    }


def _midpoint(descending: np.ndarray, last_kept: int) -> float | None:
    """A threshold keeping exactly the first `last_kept` + 1 scores: midway to the next lower one."""
    if not len(descending):
        return None
    if last_kept + 1 == len(descending):
        return float(descending[last_kept])
    return float((descending[last_kept] + descending[last_kept + 1]) / 2)


def prf(true_positives: int, kept: int, gold: int) -> dict:
    """Precision, recall and F1 in percent (0 where undefined), rounded to 2 decimals."""
    precision = true_positives / kept if kept else 0.0
    recall = true_positives / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "precision": round(100 * precision, 2),
        "recall": round(100 * recall, 2),
        "f1": round(100 * f1, 2),
    }
