"""Calibration from any parallel set: `calibrate --pairs SRC TGT` on two line-aligned files, and `mine
--threshold auto` learning the threshold inside the corpus from the pairs it keeps (planted, never in
the output)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bitextmine.calibration.aligned_pairs import MIN_PAIRS, read_aligned
from bitextmine.calibration.bucc import BuccError
from bitextmine.calibration.pairs_store import pairs_file
from tests.helpers import read_mined, run, sentences


def write_aligned(directory: Path, src: list[str], tgt: list[str]) -> tuple[Path, Path]:
    paths = directory / "flores.de", directory / "flores.en"
    for path, lines in zip(paths, (src, tgt), strict=True):
        path.write_text("".join(line + "\n" for line in lines))
    return paths


def test_every_second_line_keeps_its_target_and_blank_lines_are_left_out(tmp_path):
    src = [f"Satz {i}" for i in range(50)]
    tgt = [f"sentence {i}" for i in range(50)]
    src[3] = "  "
    warnings = []
    split = read_aligned(*write_aligned(tmp_path, src, tgt), "de-en", warnings.append)
    kept = [i for i in range(50) if i != 3]
    assert split.src.sentences == [src[i] for i in kept]
    assert split.tgt.sentences == [tgt[i] for i in kept[::2]]
    assert split.gold == {(str(i + 1), str(i + 1)) for i in kept[::2]}
    assert split.split == "flores.de" and split.pair == "de-en"
    assert len(warnings) == 1 and "1 lines blank" in warnings[0]


def test_files_of_different_lengths_or_the_same_lines_or_too_few_pairs_are_one_line_errors(tmp_path):
    src, tgt = write_aligned(tmp_path, ["a"] * 50, ["b"] * 49)
    with pytest.raises(BuccError, match=r"flores.de and .*flores.en have 50 and 49 lines"):
        read_aligned(src, tgt, "de-en")
    src, tgt = write_aligned(tmp_path, ["a"] * (2 * MIN_PAIRS - 2), ["b"] * (2 * MIN_PAIRS - 2))
    with pytest.raises(BuccError, match="calibration needs 40 or more"):
        read_aligned(src, tgt, "de-en")
    src, tgt = write_aligned(tmp_path, ["a"] * 50, ["a"] * 50)  # one file twice
    with pytest.raises(BuccError, match=r"flores.de and .*flores.en hold the same lines"):
        read_aligned(src, tgt, "de-en")


def test_calibrate_takes_a_bucc_split_or_line_aligned_files(tmp_path):
    src, tgt = write_aligned(tmp_path, ["a"] * 50, ["b"] * 50)
    code, output = run("calibrate", "--pair", "de-en", "-w", str(tmp_path / "w"))
    assert code == 1 and "give --bucc DIR (a BUCC split) or --pairs SRC TGT" in output, output
    code, output = run("calibrate", "--pair", "de-en", "--bucc", str(tmp_path), "--pairs", str(src), str(tgt))
    assert code == 1 and "give --bucc DIR (a BUCC split) or --pairs SRC TGT" in output, output


def calibrate_on_pairs(tmp_path: Path, work: Path, model: str) -> list[str]:
    """`calibrate --pairs` for de-en in `work` on 60 aligned sentences (a sentence and itself with a full
    stop stand for translations under the tiny model: two files of the same lines are refused); the
    sentences of both files."""
    aligned = sentences(60, seed=9)
    targets = [f"{sentence} ." for sentence in aligned]
    src, tgt = write_aligned(tmp_path, aligned, targets)
    code, output = run(
        "calibrate", "--pairs", str(src), str(tgt), "--pair", "de-en", "-m", model, "-w", str(work)
    )
    assert code == 0, output
    return aligned + targets


@pytest.mark.integration
def test_mine_auto_learns_the_threshold_inside_the_corpus_from_the_calibration_pairs(
    tmp_path, indexed_workspace, tiny_model_dir
):
    work, _ = indexed_workspace
    aligned = calibrate_on_pairs(tmp_path, work, str(tiny_model_dir("bert")))
    [record] = json.loads((work / "thresholds.json").read_text())["thresholds"]
    assert record["split"] == "flores.de"
    kept = np.load(pairs_file(work / "thresholds.json", record["fingerprint"], "de-en"))
    assert kept.shape[:2] == (2, 30)

    code, output = run("mine", "de", "en", "-w", str(work), "--threshold", "auto", "--filters", "none")
    assert code == 0, output
    assert "estimated recall:" in output and "of 30 planted calibration pairs found: the recall" in output
    assert "pairs with regional precision >= " in output
    stats = json.loads((work / "mined" / "de-en.stats.json").read_text())
    assert stats["threshold"]["source"].startswith(
        "regional precision learned inside this corpus from 30 planted calibration pairs"
    )
    assert stats["threshold"]["scale"] == "regional precision" and 0 <= stats["threshold"]["value"] <= 1
    assert stats["counts"]["planted_pairs"] == 30 and stats["counts"]["estimated_recall"] > 50
    assert isinstance(stats["counts"]["calibration_unlike"], float)
    mined = read_mined(work / "mined" / "de-en.tsv.zst")
    assert len(mined) == stats["counts"]["above_threshold"] > 0
    assert not {s for row in mined for s in row[1:3]} & set(aligned)  # planted sentences never mined

    code, output = run("mine", "de", "en", "-w", str(work), "--filters", "none")
    assert code == 0, output
    everything = read_mined(work / "mined" / "de-en.tsv.zst")
    assert set(map(tuple, mined)) <= set(
        map(tuple, everything)
    )  # the corpus's candidates with their margins, as without planting

    code, output = run("mine", "de", "en", "-w", str(work), "--threshold", "1.0", "--filters", "none")
    assert code == 0, output
    given = json.loads((work / "mined" / "de-en.stats.json").read_text())
    assert given["threshold"]["scale"] == "margin" and given["counts"]["estimated_recall"] is not None


@pytest.mark.integration
def test_min_precision_keeps_the_pairs_whose_precision_the_output_gives(
    tmp_path, indexed_workspace, tiny_model_dir
):
    work, _ = indexed_workspace
    aligned = calibrate_on_pairs(tmp_path, work, str(tiny_model_dir("bert")))
    auto = ["mine", "de", "en", "-w", str(work), "--threshold", "auto", "--filters", "none"]
    code, output = run(*auto, "-o", str(tmp_path / "learned.jsonl"))
    assert code == 0, output
    learned = json.loads((work / "mined" / "de-en.stats.json").read_text())["threshold"]["value"]
    code, output = run(*auto, "--min-precision", "0", "-o", str(tmp_path / "all.jsonl"))
    assert code == 0, output
    every = [json.loads(line) for line in (tmp_path / "all.jsonl").read_text().splitlines()]
    stats = json.loads((work / "mined" / "de-en.stats.json").read_text())
    assert stats["threshold"]["value"] == 0 and stats["threshold"]["source"].startswith("--min-precision")
    assert len(every) == stats["counts"]["one_to_one_candidates"]  # every candidate, none planted
    assert all(0 <= record["precision"] <= 1 for record in every)
    assert not {record[side] for record in every for side in ("src", "tgt")} & set(aligned)
    kept = [json.loads(line) for line in (tmp_path / "learned.jsonl").read_text().splitlines()]
    assert kept == [record for record in every if record["precision"] >= learned]  # the same precisions

    stored = next((work / "thresholds-pairs").iterdir())
    stored.rename(tmp_path / stored.name)  # a calibration made before its pairs were kept
    code, output = run(*auto, "--min-precision", "0.5")
    assert code == 1 and "the calibration of de-en kept no pairs to plant" in output, output

    code, output = run(*auto, "--min-precision", "1.5")
    assert code == 2 and "--min-precision" in output and "less than or equal to 1" in output, output
    code, output = run("mine", "de", "en", "-w", str(work), "--threshold", "1.0", "--min-precision", "0.5")
    assert code == 1 and "min_precision is a threshold on the regional precision" in output, output


@pytest.mark.integration
def test_mine_notes_calibration_pairs_unlike_the_corpus(
    tmp_path, indexed_workspace, tiny_model_dir, monkeypatch
):
    import bitextmine.steps.corpus_threshold as corpus_threshold

    work, _ = indexed_workspace
    calibrate_on_pairs(tmp_path, work, str(tiny_model_dir("bert")))
    auto = ["mine", "de", "en", "-w", str(work), "--threshold", "auto", "--filters", "none"]
    for unlike, noted in ((corpus_threshold.UNLIKE_NOTE - 0.01, False), (0.6, True)):
        monkeypatch.setattr(corpus_threshold, "region_mismatch", lambda *_, value=unlike: value)
        code, output = run(*auto)
        assert code == 0, output
        stats = json.loads((work / "mined" / "de-en.stats.json").read_text())
        assert stats["counts"]["calibration_unlike"] == round(unlike, 3)
        note = "note: the calibration pairs lie in other regions than this corpus's translations"
        assert (note in output) == noted and ("calibrate on pairs like its own" in output) == noted, output
