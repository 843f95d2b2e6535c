"""examples/benchmarks/gpu_check.py at toy sizes on the CPU: every section runs and reports, so the script
is known to work before a GPU machine is lent (where it runs at full size)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import sentences

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "benchmarks" / "gpu_check.py"


@pytest.mark.integration
def test_the_gpu_check_runs_every_section_on_the_cpu(tiny_model_dir, tmp_path):
    text = tmp_path / "sentences.txt"
    text.write_text("\n".join(sentences(80, seed=3)) + "\n")
    command = [sys.executable, str(SCRIPT), "--model-shape", str(tiny_model_dir("bert")), "--sentences"]
    done = subprocess.run(
        [*command, str(text), "--out", str(tmp_path), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    rows = {row["section"]: row for row in json.loads((tmp_path / "gpu_check_dry_run.json").read_text())}
    assert sorted(rows) == ["attention", "encode", "mine-10m", "mine-1m", "search-plans", "workspace-mine"]
    assert not [row for row in rows.values() if "error" in row]
    # the CPU has one backend of the three; bf16 on a 2-layer 32-d random model is loose (the real
    # check is on the GPU, with the shared model's shape: >= 0.99997 there)
    assert rows["attention"]["sdpa"]["min_cos"] > 0.9
    assert rows["mine-1m"]["pairs_identical_to_cpu"] and rows["mine-10m"]["queries_per_s"] > 0
    assert all(key in rows["encode"] for key in ("speedup", "min_cos_vs_st"))
    plans = rows["search-plans"]
    assert len(plans["queries_per_s_by_plan"]) == 25 and plans["fastest"] in rows["mine-10m"]["plan"]
    assert all(ms > 0 for ms in plans["stage_ms"].values())
    assert not any(plans["rows_unlike_fp32_reference_by_plan"].values())
    workspace = rows["workspace-mine"]
    assert workspace["candidates"] > 0 and workspace["candidates_identical_to_cpu"]
    assert set(workspace["command_seconds"]) == {
        "encode de",
        "index de",
        "encode en",
        "index en",
        "mine on cpu",
    }
