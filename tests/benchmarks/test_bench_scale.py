"""The scale benchmark's quality figures per source (examples/benchmarks/scale_quality.py) on hand-made
candidates, and its lower-density subsamples (scale_set.density_rows)."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from tests.helpers import REPO

sys.path.insert(0, str(REPO / "examples" / "benchmarks"))
quality_module = pytest.importorskip("scale_quality")
scale_set = pytest.importorskip("scale_set")

# Hidden pairs: (0, 0) and (1, 1) are news, (2, 2), (3, 3) and (4, 4) captions.
HIDDEN = quality_module.Hidden(
    np.arange(5), np.arange(5), np.array(["news", "news", "captions", "captions", "captions"])
)
# Candidates, best first: news right (1.10), a caption paired with the wrong caption (1.05), captions right
# (1.00, 0.98), a distractor pair (0.99), news right (0.97). Caption (4, 4) is never a candidate.
MINED = quality_module.Mined(
    src=np.array([0, 2, 3, 9, 4 + 6, 1]),
    tgt=np.array([0, 3, 2, 9, 8, 1]),
    score=np.array([1.10, 1.05, 1.00, 0.99, 0.98, 0.97]),
)


def test_all_counts_every_candidate_against_every_hidden_pair():
    figures = quality_module.quality(MINED, HIDDEN, threshold=1.0)["all"]
    # kept at >= 1.0: (0,0) right, (2,3) wrong, (3,2) wrong: P 1/3, R 1/5
    assert (figures["precision"], figures["recall"]) == (33.33, 20.0)
    assert figures["f1"] == pytest.approx(round(100 * 2 * (1 / 3) * (1 / 5) / (1 / 3 + 1 / 5), 2))
    # best F1 anywhere: keeping all 6 gives 2 right of 6 against 5 (F1 4/11); the first alone 2/6
    assert figures["oracle_f1"] == pytest.approx(round(100 * 4 / 11, 2))
    assert figures["oracle_threshold"] == 0.97
    assert figures["ceiling"] == 40.0  # (0,0) and (1,1) of 5


def test_a_source_counts_the_candidates_touching_its_sentences():
    figures = quality_module.quality(MINED, HIDDEN, threshold=0.975)
    news, captions = figures["news"], figures["captions"]
    # news: candidates (0,0) and (1,1) touch news sentences; (1,1) scores 0.97, below 0.975
    assert (news["gold"], news["precision"], news["recall"]) == (2, 100.0, 50.0)
    assert (news["oracle_f1"], news["ceiling"]) == (100.0, 100.0)
    assert news["oracle_threshold"] == 0.97
    # captions: (2,3) and (3,2) touch them and are wrong; (10, 8) touches none: no caption is found
    assert (captions["gold"], captions["precision"], captions["recall"], captions["f1"]) == (3, 0.0, 0.0, 0.0)
    assert captions["ceiling"] == 0.0


def test_the_oracle_threshold_lies_between_the_last_kept_score_and_the_next():
    mined = quality_module.Mined(np.array([0, 1, 7]), np.array([0, 1, 7]), np.array([1.2, 1.1, 1.0]))
    figures = quality_module.quality(mined, HIDDEN, threshold=2.0)["all"]
    assert figures["oracle_threshold"] == pytest.approx(1.05)
    assert (figures["precision"], figures["recall"], figures["f1"]) == (0.0, 0.0, 0.0)


def test_a_lower_density_drops_one_side_of_the_other_gold_pairs_alternately():
    gold_rows = np.array([[0, 5], [1, 6], [2, 7], [3, 8], [4, 9]])
    rows = scale_set.density_rows(10, gold_rows, density=0.1)  # 1 of the 5 pairs kept whole
    dropped_de = set(range(10)) - set(rows["de"].tolist())
    dropped_en = set(range(10)) - set(rows["en"].tolist())
    assert len(dropped_de) + len(dropped_en) == 4 and abs(len(dropped_de) - len(dropped_en)) <= 1
    whole = [(a, b) for a, b in gold_rows.tolist() if a not in dropped_de and b not in dropped_en]
    assert len(whole) == 1
    broken = [(a, b) for a, b in gold_rows.tolist() if (a, b) not in whole]
    assert all((a in dropped_de) != (b in dropped_en) for a, b in broken)  # exactly one side each
    assert np.array_equal(scale_set.density_rows(10, gold_rows, None)["de"], np.arange(10))
    assert np.array_equal(rows["de"], np.sort(rows["de"]))


def test_a_density_above_the_subsamples_is_refused():
    with pytest.raises(ValueError, match=r"density 0\.9"):
        scale_set.density_rows(10, np.array([[0, 0]]), density=0.9)


def test_a_row_mined_without_exact_pairs_leaves_their_share_blank():
    """`run --without-exact`: the report's share cell is empty, not None or a percentage of nothing."""
    bench_scale = pytest.importorskip("bench_scale")
    recorded = bench_scale.load_rows(bench_scale.RESULT)
    row = next(r for r in recorded if "quality" in r) | {"share_of_exact_pairs": None}
    lines = bench_scale.report([row]).splitlines()
    line = next(line for line in lines if f"| {row['setting']} | {row['factory']} |" in line)
    assert f"| {row['f1']} |  | {row['date']}" in line
    assert "None" not in line


def test_the_oracle_keeps_all_of_equal_scores_or_none():
    """Regional precisions tie (a region's curve is a step): no threshold splits a tie, so the best F1
    is that of keeping the whole tie or none of it."""
    mined = quality_module.Mined(
        np.array([0, 1, 7, 8]), np.array([0, 1, 7, 8]), np.array([0.9, 0.5, 0.5, 0.5])
    )
    figures = quality_module.quality(mined, HIDDEN, threshold=0.5)["all"]
    # the tie at 0.5 holds (1,1) right and two wrong pairs: splitting it after (1,1) would give 2 of 2 (F1
    # 4/7); whole, 2 right of 4 against 5 hidden pairs (4/9), above the first pair alone (2/6)
    assert figures["oracle_f1"] == figures["f1"] == pytest.approx(round(100 * 4 / 9, 2))
    assert figures["oracle_threshold"] == 0.5


def test_every_candidates_precision_is_read_from_mines_jsonl(tmp_path):
    bench_scale = pytest.importorskip("bench_scale")
    path = tmp_path / "at-precision.jsonl"
    records = [
        {"score": 1.1, "precision": 0.9, "src_line": 3, "tgt_line": 1},
        {"precision": 0.2, "src_line": 1, "tgt_line": 2},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    mined = bench_scale.precision_candidates(path)
    assert (
        mined.src.tolist() == [2, 0] and mined.tgt.tolist() == [0, 1] and mined.score.tolist() == [0.9, 0.2]
    )


def test_the_auto_table_gives_the_best_f1_on_the_regional_precision_where_measured():
    bench_scale = pytest.importorskip("bench_scale")
    recorded = bench_scale.load_rows(bench_scale.RESULT)
    row = next(r for r in recorded if "auto" in r)
    measured = {"regional_oracle_f1": 93.5, "regional_oracle": 0.61234}
    quality = {s: q | measured for s, q in row["auto"]["quality"].items()}
    lines = bench_scale.report([row | {"auto": row["auto"] | {"quality": quality}}]).splitlines()
    assert sum("| 93.5 at 0.6123 |" in line for line in lines) == 3  # all, news, captions
    unmeasured = {s: {k: v for k, v in q.items() if k not in measured} for s, q in quality.items()}
    older = row | {"auto": row["auto"] | {"quality": unmeasured}}
    auto_line = f"| {row['setting']} | all | {row['auto']['value']:.4f} |"  # not the per-source table's
    lines = [line for line in bench_scale.report([older]).splitlines() if auto_line in line]
    assert lines and all(f"|  | {row['auto']['quality']['all']['oracle_f1']} |" in line for line in lines)


def test_the_kind_table_sets_the_estimated_recall_beside_the_true_one():
    bench_scale = pytest.importorskip("bench_scale")
    row = next(r for r in bench_scale.load_rows(bench_scale.RESULT) if "auto" in r)
    row = row | {"auto": {key: value for key, value in row["auto"].items() if key != "kind"}}
    kind = {"value": 0.41, "precision": 97.7, "recall": 89.0, "f1": 93.15}
    kind |= {"estimated_precision": 94.9, "estimated_recall": 86.5}
    lines = bench_scale.report([row | {"auto": row["auto"] | {"kind": kind}}]).splitlines()
    (line,) = [line for line in lines if "| 0.4100 | 97.7 / 89.0 / 93.15 |" in line]
    assert "| 94.9 / 86.5 | -2.5 |" in line
    assert not any("| 0.4100 |" in line for line in bench_scale.report([row]).splitlines())
