"""The estimated precision of mined pairs (mining/null_estimate.py) against hand-computed values and an
independent numpy reference over the full similarity matrix, and as `mine` reports it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bitextmine.mining.null_estimate import DecoyCounts, runner_up_decoys
from bitextmine.mining.selection import STRATEGIES, select_candidates
from bitextmine.search.knn import Neighbours
from tests.helpers import run

NONE = -np.inf


def test_a_decoy_is_the_runner_up_moved_up_by_the_gap_to_the_third():
    scores = np.array([[1.20, 1.10, 1.05, NONE], [1.0, 0.9, NONE, NONE], [0.95, 1.05, 1.0, 1.01]])
    decoys = runner_up_decoys(scores)
    assert decoys[0] == pytest.approx(1.15)  # 1.10 + (1.10 - 1.05)
    assert np.isnan(decoys[1])  # no third candidate
    assert decoys[2] == pytest.approx(1.02)  # sorted: 1.05, 1.01, 1.0 -> 1.01 + 0.01
    assert np.isnan(runner_up_decoys(np.array([[1.0, 0.9]]))).all()  # k = 2


def test_precision_is_one_less_the_decoys_per_direction_over_the_candidates_reaching_the_threshold():
    scores = np.array([1.3, 1.2, 1.1, 1.0])
    decoys = np.array([1.25, 1.05, np.nan, 1.15, 0.9, 1.1])
    # 3 candidates reach 1.1; decoys 1.25, 1.15 and 1.1 do: 3 over 2 directions
    assert DecoyCounts(scores, decoys, directions=2).precision(1.1) == pytest.approx(1 - 1.5 / 3)
    assert DecoyCounts(scores, decoys, directions=1).precision(1.1) == 0.0  # never below 0
    assert DecoyCounts(scores, decoys, directions=2).precision(2.0) is None  # nothing reaches it


def reference_decoys(src: np.ndarray, tgt: np.ndarray, k: int) -> np.ndarray:
    """Ratio-margin scores of each query's k nearest neighbours over the full similarity matrix, loops:
    each source query's 2 * second - third, then each target query's."""
    sim = src.astype(np.float64) @ tgt.astype(np.float64).T
    fwd_nn = [np.argsort(-sim[i])[:k] for i in range(len(src))]
    bwd_nn = [np.argsort(-sim[:, j])[:k] for j in range(len(tgt))]
    fwd_mean = [sim[i, fwd_nn[i]].mean() for i in range(len(src))]
    bwd_mean = [sim[bwd_nn[j], j].mean() for j in range(len(tgt))]
    decoys = []
    for i in range(len(src)):
        margins = sorted((sim[i, j] / (fwd_mean[i] / 2 + bwd_mean[j] / 2) for j in fwd_nn[i]), reverse=True)
        decoys.append(2 * margins[1] - margins[2])
    for j in range(len(tgt)):
        margins = sorted((sim[i, j] / (fwd_mean[i] / 2 + bwd_mean[j] / 2) for i in bwd_nn[j]), reverse=True)
        decoys.append(2 * margins[1] - margins[2])
    return np.array(decoys)


def lists(queries: np.ndarray, base: np.ndarray, k: int) -> Neighbours:
    sims = queries @ base.T
    ids = np.argsort(-sims, axis=1)[:, :k]
    return Neighbours(np.take_along_axis(sims, ids, 1), ids)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_the_selections_decoys_equal_the_reference(tmp_path, strategy):
    rng = np.random.default_rng(3)
    src = rng.normal(size=(70, 16))
    tgt = np.concatenate([src[:20] + 0.4 * rng.normal(size=(20, 16)), rng.normal(size=(30, 16))])
    src, tgt = (x / np.linalg.norm(x, axis=1, keepdims=True) for x in (src, tgt))
    fwd, bwd = lists(src, tgt, 5), lists(tgt, src, 5)
    selection = select_candidates(
        lambda: [(0, fwd)], lambda: [(0, bwd)], (70, 50), "ratio", strategy, tmp_path / strategy
    )
    expected = reference_decoys(src, tgt, 5)
    pooled = {"fwd": slice(0, 70), "bwd": slice(70, 120)}.get(strategy, slice(0, 120))
    assert np.allclose(selection.decoys[pooled], expected[pooled], rtol=0, atol=1e-5)
    assert np.isnan(np.delete(selection.decoys, np.arange(120)[pooled])).all()
    assert selection.directions == (1 if strategy in ("fwd", "bwd") else 2)


@pytest.mark.integration
def test_mine_reports_the_estimate_for_its_threshold(workspace):
    """`mine`'s stats and summary carry the estimate the reference gives from the workspace's vectors."""
    work, _ = workspace
    for lang in ("de", "en"):
        assert run("index", lang, "-w", str(work))[0] == 0
    code, output = run("mine", "de", "en", "-w", str(work), "--threshold", "1.0", "--filters", "none")
    assert code == 0, output
    counts = json.loads((work / "mined" / "de-en.stats.json").read_text())["counts"]
    src, tgt = (
        np.concatenate([np.load(p) for p in sorted((work / "emb" / lang).glob("shard-*.npy"))]).astype(
            np.float32
        )
        for lang in ("de", "en")
    )
    decoys = reference_decoys(src, tgt, 4)
    false = np.count_nonzero(decoys >= 1.0) / 2
    expected = max(0.0, 1 - false / counts["above_threshold"])
    assert 0 < expected < 1  # some decoys reach the threshold, fewer than the candidates
    assert counts["estimated_precision"] == pytest.approx(100 * expected, abs=0.01)
    assert f"estimated precision of the {counts['above_threshold']:,} pairs reaching it" in output
