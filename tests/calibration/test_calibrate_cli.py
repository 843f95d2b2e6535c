"""`calibrate` and `eval bucc` end to end on a tiny model: thresholds go to the workspace's store (or
--thresholds FILE), never into the model dir; the curve as JSON, PNG and text plot; the model dir's
old thresholds still read."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest
import zstandard
from typer.testing import CliRunner

import bitextmine.cli.calibrate as calibrate_cli
from bitextmine.calibration.bucc import read_bucc
from bitextmine.cli import app
from tests.helpers import curve_arrays, eval_bucc_dev, plotted, run, sentences, write_bucc

pytestmark = pytest.mark.integration


@pytest.fixture
def bucc(tmp_path):
    directory = tmp_path / "bucc"
    directory.mkdir()
    write_bucc(directory, sentences(8, seed=4))
    return directory


def calibrate(bucc, model, work, *options: str) -> tuple[int, str]:
    return run(
        "calibrate", "--bucc", str(bucc), "--pair", "de-en", "-m", str(model), "-w", str(work), *options
    )


def test_calibrate_writes_the_store_the_json_and_the_plot_and_eval_reads_the_store(
    tmp_path, bucc, tiny_model_dir, monkeypatch
):
    model = tiny_model_dir("bert")
    model_files = {p.name: p.stat().st_mtime_ns for p in model.iterdir()}
    figures = []
    real_save = calibrate_cli.save_calibration_plot
    monkeypatch.setattr(
        calibrate_cli, "save_calibration_plot", lambda *a: figures.append(real_save(*a)) or figures[-1]
    )
    work, report, png = tmp_path / "w", tmp_path / "curve.json", tmp_path / "curve.png"
    code, output = calibrate(bucc, model, work, "--json", str(report), "--plot", str(png))
    assert code == 0, output

    assert {p.name: p.stat().st_mtime_ns for p in model.iterdir()} == model_files  # the model dir untouched
    [record] = json.loads((work / "thresholds.json").read_text())["thresholds"]
    curve = json.loads(report.read_text())
    chosen = curve["chosen"]
    assert record["value"] == chosen["threshold"] and record["f1"] == chosen["f1"] == 100.0
    assert (record["pair"], record["split"], record["margin"], record["rule"]) == (
        "de-en",
        "dev",
        "ratio",
        "best F1",
    )
    assert record["fingerprint"] == curve["fingerprint"] and record["model"] == curve["model"] == str(model)
    assert (
        curve["stored_in"] == str(work / "thresholds.json")
        and curve["candidates"] == curve["curve"][-1]["kept"]
    )
    assert chosen in [{k: v for k, v in point.items()} for point in curve["curve"]]

    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = plotted(figures[0])
    lines.pop("chosen")
    assert lines == curve_arrays(curve["curve"])  # the PNG shows exactly calibrate --json's curve
    assert " 100 ┤" in output and "p precision  r recall  F F1  │ chosen" in output
    assert f"stored in {work / 'thresholds.json'}" in output

    code, output = eval_bucc_dev(bucc, "-m", str(model), "-w", str(work), "--json", str(report))
    assert code == 0, output
    result = json.loads(report.read_text())
    assert result["threshold"] == record["value"] and result["f1"] == 100.0
    source = (
        f"calibrated for de-en on dev with k=4, strategy max (best F1 100.00) in {work / 'thresholds.json'}"
    )
    assert result["threshold_source"] == source and source in output


def test_a_named_store_json_on_stdout_and_a_target_precision(tmp_path, bucc, tiny_model_dir):
    model, store, work = tiny_model_dir("bert"), tmp_path / "mine" / "t.json", tmp_path / "w"
    options = ["--thresholds", str(store), "--json", "-", "--target-precision", "1"]
    result = CliRunner().invoke(
        app,
        ["calibrate", "--bucc", str(bucc), "--pair", "de-en", "-m", str(model), "-w", str(work), *options],
    )
    assert result.exit_code == 0, result.output
    curve = json.loads(result.stdout)  # stdout holds the JSON alone; the summary went to stderr
    assert curve["rule"] == "precision >= 1" and curve["chosen"]["precision"] == 100.0
    assert "stored in" in result.stderr and not (work / "thresholds.json").exists()
    [record] = json.loads(store.read_text())["thresholds"]
    assert record["rule"] == "precision >= 1" and record["value"] == curve["chosen"]["threshold"]
    code, output = eval_bucc_dev(bucc, "-m", str(model), "-w", str(work), "--thresholds", str(store))
    assert code == 0 and "(precision >= 1: precision 100.00, recall" in output, output


def test_a_calibration_of_another_k_is_stored_apart_and_never_used(tmp_path, bucc, tiny_model_dir):
    """`calibrate --k K` replaced the k=4 threshold, and `--k 16 --threshold auto` used it."""
    model, work = tiny_model_dir("bert"), tmp_path / "w"
    assert calibrate(bucc, model, work)[0] == 0
    code, output = calibrate(bucc, model, work, "--k", "2", "--strategy", "intersect")
    assert code == 0, output
    records = json.loads((work / "thresholds.json").read_text())["thresholds"]
    assert sorted((r["k"], r["strategy"]) for r in records) == [(2, "intersect"), (4, "max")]
    code, output = eval_bucc_dev(bucc, "-m", str(model), "-w", str(work), "--k", "3")
    assert code == 1 and "no calibrated threshold for de-en (ratio margin, k=3)" in output, output
    assert "(calibrated: de-en ratio k=2, de-en ratio k=4)" in output.replace("\n", " ")
    code, output = eval_bucc_dev(bucc, "-m", str(model), "-w", str(work), "--k", "2")
    assert code == 0 and "calibrated for de-en on dev with k=2, strategy intersect" in output, output


def test_calibrate_and_eval_read_compressed_split_files_and_a_jsonl_mined_file(
    tmp_path, bucc, tiny_model_dir
):
    """The scale set's files are .zst; `eval bucc --mined` refused mine's .jsonl."""
    model, work = tiny_model_dir("bert"), tmp_path / "w"
    zst, gz = zstandard.ZstdCompressor().compress, lambda data: gzip.compress(data, mtime=0)
    for name, suffix, compress in [("de", ".zst", zst), ("en", ".gz", gz), ("gold", ".zst", zst)]:
        plain = bucc / f"de-en.dev.{name}"
        (bucc / f"{plain.name}{suffix}").write_bytes(compress(plain.read_bytes()))
        plain.unlink()
    code, output = calibrate(bucc, model, work)
    assert code == 0 and "best F1" in output, output
    split = read_bucc(bucc, "de-en", "dev")
    src, tgt = (dict(zip(side.ids, side.sentences, strict=True)) for side in (split.src, split.tgt))
    gold = [(src[s], tgt[t]) for s, t in split.gold]
    mined = tmp_path / "de-en.jsonl"
    mined.write_text("".join(json.dumps({"score": 1.5, "src": s, "tgt": t}) + "\n" for s, t in gold))
    code, output = eval_bucc_dev(bucc, "--mined", str(mined), "--json", str(tmp_path / "r.json"))
    report = json.loads((tmp_path / "r.json").read_text())
    assert code == 0 and report["f1"] == 100.0, output
    assert report["margin"] is report["strategy"] is None  # the file's pairs were mined elsewhere, not here


def test_the_old_thresholds_of_a_model_dir_are_still_read(tmp_path, bucc, tiny_model_dir):
    model = shutil.copytree(tiny_model_dir("bert"), tmp_path / "model")
    (model / "bitextmine.json").write_text(json.dumps({"thresholds": {"ratio": {"de-en": 1.0}}}))
    code, output = eval_bucc_dev(
        bucc, "-m", str(model), "-w", str(tmp_path / "w"), "--json", str(tmp_path / "r")
    )
    assert code == 0, output
    result = json.loads((tmp_path / "r").read_text())
    assert result["threshold"] == 1.0 and f"{model}/bitextmine.json" in result["threshold_source"]


def test_bad_choices_are_one_line_errors(tmp_path, bucc, tiny_model_dir):
    """Two rules at once, a calibration that is missing (a bad value alone: tests/cli/test_choices.py)."""
    model, work = tiny_model_dir("bert"), tmp_path / "w"
    code, output = calibrate(bucc, model, work, "--target-precision", "0.9", "--plateau", "1")
    assert code == 1 and "--target-precision and --plateau are two rules" in output, output
    code, output = eval_bucc_dev(bucc, "-m", str(model), "-w", str(work))
    assert code == 1 and "no calibrated threshold for de-en (ratio" in output and "Traceback" not in output
    assert "bitextmine calibrate --bucc DIR --pair de-en" in output.replace("\n", " ")
    assert not work.exists() or not (work / "thresholds.json").exists()


def test_a_model_bitextmine_trained_is_calibrated_on_the_plateau_by_default(tmp_path, bucc, tiny_model_dir):
    base = tiny_model_dir("bert")
    trained = shutil.copytree(base, tmp_path / "trained")
    (trained / "bitextmine.json").write_text(json.dumps({"encoder": {}, "training": {"steps": 10}}))
    for model, options, rule, why in [
        (base, [], "best F1", "the default for a model bitextmine did not train"),
        (trained, [], "middle of F1 within 1 of the best", "the default for a model bitextmine trained"),
        (trained, ["--plateau", "0"], "best F1", None),
    ]:
        work, report = tmp_path / f"w-{model.name}-{len(options)}", tmp_path / "report.json"
        code, output = calibrate(bucc, model, work, "--json", str(report), *options)
        assert code == 0, output
        [record] = json.loads((work / "thresholds.json").read_text())["thresholds"]
        assert record["rule"] == json.loads(report.read_text())["rule"] == rule
        assert (f"rule: {rule}, {why}" in output) if why else "rule:" not in output, output


def test_a_rerun_counts_the_cached_vectors_in_its_progress(tmp_path, bucc, tiny_model_dir):
    model, work = tiny_model_dir("bert"), tmp_path / "w"
    for _ in range(2):  # the second run encodes nothing: every vector comes from the cache
        code, output = calibrate(bucc, model, work)
        assert code == 0, output
        [line] = [line for line in output.splitlines() if line.startswith("encoding de-en dev:")]
        assert "(100%)" in line, output
