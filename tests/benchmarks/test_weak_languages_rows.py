"""The rows and report of examples/benchmarks/weak_languages_rows.py on hand-made run directories: one row
a run (arm from the directory name, steps and flags from ARMS), the base's row, each arm's mean ± sd."""

from __future__ import annotations

import json
import sys

import pytest

from tests.helpers import REPO

sys.path.insert(0, str(REPO / "examples" / "benchmarks"))
rows_script = pytest.importorskip("weak_languages_rows")
bench_stamp = pytest.importorskip("benchlib").stamp


def write_run(
    run_dir,
    yor: float,
    tatoeba: float | None = None,
    distill_en: float | None = 0.2,
    unseen: float | None = 70.0,
) -> None:
    """A run's files: xsim 0 for every language but Yoruba; Tatoeba `tatoeba` on average, every language;
    `unseen` likewise on the languages no training file has (None: no file, as a run failed there)."""
    run_dir.mkdir(parents=True)
    xsim = [{"lang": x, "error_rate": yor if x == "yor" else 0.0} for x in rows_script.XSIM_LANGS]
    (run_dir / "xsim.json").write_text(json.dumps({"rows": xsim}))
    if unseen is not None:
        both = [{"lang": x, "xx_to_eng": unseen, "eng_to_xx": unseen} for x in rows_script.UNSEEN_LANGS]
        (run_dir / "unseen.json").write_text(json.dumps({"rows": both}))
    if tatoeba is None:
        return
    langs = rows_script.TATOEBA_LANGS
    both = [{"lang": x, "xx_to_eng": tatoeba - 1, "eng_to_xx": tatoeba + 1} for x in langs]
    (run_dir / "tatoeba.json").write_text(json.dumps({"rows": both}))
    (run_dir / "train.json").write_text(json.dumps({"pairs": 100, "seconds": 12.34}))
    (run_dir / "model").mkdir()
    last = {"step": 3, "loss": 0.5} | ({"distill/xx": 0.3, "distill/en": distill_en} if distill_en else {})
    log = [{"step": 1, "loss": 2.0}, last]
    (run_dir / "model" / "train_log.jsonl").write_text("\n".join(map(json.dumps, log)))


def test_a_row_a_run_and_the_base_with_the_arms_steps_and_flags(tmp_path, capsys):
    write_run(tmp_path / "base", yor=27.0)
    write_run(tmp_path / "m0-seed0", yor=6.0, tatoeba=90.0)
    write_run(tmp_path / "m0-seed1", yor=5.0, tatoeba=91.0)
    write_run(tmp_path / "other-seed0", yor=1.0, tatoeba=99.0)  # not an arm asked for
    (tmp_path / "m0-seed2").mkdir()  # a run that failed in training: no files
    write_run(tmp_path / "m0-seed3", yor=4.0, tatoeba=92.0, unseen=None)  # failed in its last evaluation
    rows = rows_script.collect(tmp_path, rows_script.parse_arms("m0:300:--margin 0"))
    assert [(r["arm"], r["seed"]) for r in rows] == [("base", None), ("m0", 0), ("m0", 1)]
    assert "m0-seed3 lacks unseen.json: left out" in capsys.readouterr().err
    run = rows[1]
    assert (run["steps"], run["flags"]) == (300, "--margin 0") and run["xsim"]["yor"] == 6.0
    assert run["tatoeba"]["ces"] == 90.0  # the mean of both directions
    assert run["train"] == {"pairs": 100, "seconds": 12.3, "loss": 0.5, "distill/xx": 0.3, "distill/en": 0.2}
    assert all(key in run for key in ("date", "machine", "software", "commit"))


def test_the_report_gives_each_arms_mean_and_sd_over_seeds(tmp_path):
    write_run(tmp_path / "base", yor=27.0, unseen=50.0)
    for seed, (yor, tatoeba) in enumerate([(6.0, 90.0), (5.0, 91.0)]):
        write_run(tmp_path / f"m0-seed{seed}", yor=yor, tatoeba=tatoeba, unseen=60.0 + seed)
    text = rows_script.report(rows_script.collect(tmp_path, rows_script.parse_arms("m0:300:--margin 0")))
    # xsim averages 10 languages: 0.6 and 0.5; sd of (0.6, 0.5) and of (6, 5) and of (90, 91)
    machine = rows_script.machine_label(bench_stamp()["machine"])
    means = "0.55 ± 0.07 | 5.50 ± 0.71 | 90.50 ± 0.71 | 60.50 ± 0.71 | 0.20 ± 0.00"
    assert f"| m0 | {machine} | 300 | `--margin 0` | 2 | {means} |" in text
    assert f"| base | {machine} | - | - | - | 2.70 ± 0.00 | 27.00 ± 0.00 | - | 50.00 ± 0.00 | - |" in text


def test_an_arm_without_distill_has_no_distill_figures(tmp_path):
    write_run(tmp_path / "base", yor=27.0)
    write_run(tmp_path / "c-seed0", yor=4.0, tatoeba=90.0, distill_en=None)
    rows = rows_script.collect(tmp_path, rows_script.parse_arms("c:300:--objectives contrastive"))
    assert rows[1]["train"] == {"pairs": 100, "seconds": 12.3, "loss": 0.5}
    assert "| 1 | 0.40 ± 0.00 | 4.00 ± 0.00 | 90.00 ± 0.00 | 70.00 ± 0.00 | - |" in rows_script.report(rows)


def test_runs_are_grouped_by_machine_named_by_its_gpu_or_else_its_cpu():
    assert rows_script.machine_label("Intel Xeon, 16 cores, 126 GB RAM, NVIDIA H200") == "NVIDIA H200"
    assert rows_script.machine_label("AMD EPYC, 2 cores, 24 GB RAM") == "AMD EPYC"


def test_arms_parse_into_names_steps_and_flags():
    assert rows_script.parse_arms("a:300:;b:600:--lr 5e-5;") == {"a": (300, ""), "b": (600, "--lr 5e-5")}
