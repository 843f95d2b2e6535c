"""Exact or IVF by the measured cost of exact mining (search/cost.py), exact indexes without files, and
exact mining of both directions at once."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from bitextmine.faults import FAULT_ENV
from bitextmine.search.cost import ExactCost, measure_exact_cost
from bitextmine.search.factory import EXACT
from bitextmine.search.factory_choice import auto_nprobe, choose_factory
from bitextmine.search.gemm import ArrayVectors, GemmPlan
from tests.helpers import clustered_unit, heavy_imports, outputs, random_unit, run


def test_the_cost_scales_the_measured_rate_to_both_directions():
    cost = ExactCost(products_per_second=1e9, rows=1_000_000, other_rows=500_000, plan="bf16")
    assert cost.mining_seconds == 2 * 1_000_000 * 500_000 / 1e9
    assert cost.ms_per_1000_queries == 1e6 * 1_000_000 / 1e9


def test_a_measured_rate_is_positive_and_counts_the_timed_products():
    base = ArrayVectors(random_unit(3000, 32, seed=1))
    cost = measure_exact_cost(base, random_unit(200, 32, seed=2), 7000, GemmPlan.for_device("cpu"))
    assert cost.products_per_second > 0 and (cost.rows, cost.other_rows) == (3000, 7000)


class RowsRead(ArrayVectors):
    """An array source that counts the rows its blocks yield."""

    read = 0

    def blocks(self, block_rows):
        for start, block in super().blocks(block_rows):
            self.read += len(block)
            yield start, block


def test_the_rate_is_measured_over_the_sample_read_once_after_a_warm_up_on_one_block():
    plan = GemmPlan.for_device("cpu")
    for rows in (2 * plan.base_rows + 5, plan.base_rows // 2):
        base = RowsRead(random_unit(rows, 16, seed=1))
        measure_exact_cost(base, random_unit(50, 16, seed=2), None, plan)
        assert base.read == rows + min(rows, plan.base_rows)


def test_exact_is_chosen_by_the_measured_time_not_the_size():
    assert choose_factory(10**7, 384, exact_seconds=100.0, budget=3600.0) == EXACT
    assert choose_factory(10_000, 384, exact_seconds=4000.0, budget=3600.0).startswith("IVF")
    assert choose_factory(10_000, 384) == EXACT  # no measurement: by size, as before


def test_the_automatic_ivf_flat_probes_16_lists_or_one_in_32_and_other_factories_are_tuned():
    assert auto_nprobe(choose_factory(300_000, 384, exact_seconds=700.0)) == 16
    assert choose_factory(1_050_592, 384, exact_seconds=7000.0) == "IVF1051,Flat"
    assert auto_nprobe("IVF1051,Flat") == 32  # 1M a side: where 16 probes lost pairs (bench_scale_real.md)
    assert auto_nprobe("IVF3000,Flat") == 93
    assert auto_nprobe("IVF8,Flat") == 8  # never more probes than lists
    assert auto_nprobe(choose_factory(10**7, 384, exact_seconds=1e6)) is None  # PQ: tuned by recall
    assert auto_nprobe("Flat") is None


@pytest.mark.integration  # an indexed workspace, the CLI
def test_index_writes_no_faiss_file_for_exact_search_and_ivf_above_the_budget(indexed_workspace):
    work, _ = indexed_workspace
    info = json.loads((work / "index" / "de.json").read_text())
    assert info["factory"] == EXACT and info["recall_source"] == "en" and info["search_ms_per_1000"] > 0
    assert not (work / "index" / "de.faiss").exists()
    code, output = run("mine", "de", "en", "-w", str(work))
    assert code == 0, output
    code, output = run("index", "de", "-w", str(work), "--exact-budget", "0")
    assert code == 0, output
    info = json.loads((work / "index" / "de.json").read_text())
    if info["factory"] == EXACT:  # IVF was built, fell short of exact search and was dropped
        assert "built Flat instead" in info["note"] and not (work / "index" / "de.faiss").exists()
    else:
        assert info["factory"].startswith("IVF") and (work / "index" / "de.faiss").exists()
        assert info["nprobe"] == auto_nprobe(info["factory"])  # not tuned by recall
    assert np.isfinite(info["recall"])
    code, output = run("index", "de", "-w", str(work), "--exact-budget", "0", "--factory", "IVF1,Flat")
    assert code == 0, output
    assert (work / "index" / "de.faiss").exists()


@pytest.mark.integration  # an encoded workspace, the CLI
def test_an_exact_index_prints_no_progress_for_the_build_it_does_not_do(workspace):
    work, _ = workspace
    code, output = run("index", "de", "-w", str(work))
    assert code == 0 and "note: exact search by matrix products" in output, output
    assert "indexing de" not in output
    code, output = run("index", "de", "-w", str(work), "--factory", "IVF1,Flat")
    assert code == 0 and "indexing de: 25/25 (100%)" in output, output


@pytest.mark.integration  # an encoded workspace, the CLI
@pytest.mark.skipif(torch.cuda.is_available(), reason="the error of a machine without CUDA")
def test_index_gpu_without_cuda_is_a_one_line_error(workspace):
    work, _ = workspace
    code, output = run("index", "de", "-w", str(work), "--gpu")
    assert code == 1 and "torch sees no CUDA device here" in output, output
    assert "Traceback" not in output and not (work / "index" / "de.json").exists()


def test_index_help_states_the_defaults_the_code_uses():
    from bitextmine.search.cost import EXACT_BUDGET_SECONDS
    from bitextmine.search.factory_choice import AUTO_NPROBE, DEFAULT_LIST_SIZE, PROBED_SHARE

    code, output = run("index", "--help")
    text = " ".join(output.replace("│", " ").split())  # the help as one line, whatever its width
    assert code == 0
    assert f"[default: {EXACT_BUDGET_SECONDS:g}]" in text
    assert f"[default: {DEFAULT_LIST_SIZE:,} up to 4M vectors" in text
    assert f"[default: {AUTO_NPROBE} for the default IVF-Flat, or 1 list in {PROBED_SHARE}" in text


def _exact_workspace(work: Path, tmp_path: Path, vectors: dict[str, np.ndarray]) -> None:
    """A workspace of imported vectors (unit, float32), both languages indexed exactly."""
    for lang, rows in vectors.items():
        np.save(tmp_path / f"{lang}.npy", rows)
        text = tmp_path / f"{lang}.txt"
        text.write_text("".join(f"{lang} {i}\n" for i in range(len(rows))))
        args = ("-l", lang, "-w", str(work), "--embeddings", str(tmp_path / f"{lang}.npy"))
        code, output = run("encode", "--lid", "off", str(text), *args, "--model-name", "m")
        assert code == 0, output
        code, output = run("index", lang, "-w", str(work), "--factory", "Flat")
        assert code == 0, output


def _mined_lists(work: Path, *extra: str) -> tuple[np.ndarray, np.ndarray, bytes]:
    """`mine de en` with `extra`: its forward and backward neighbour lists (joined over its jobs), and
    the mined file."""
    code, output = run("mine", "de", "en", "-w", str(work), "--filters", "none", *extra)
    assert code == 0, output
    (plan,) = (work / "mined" / ".neighbours").iterdir()
    lists = [
        np.concatenate([np.load(path) for path in sorted(plan.glob(f"{direction}-*.npy"))])
        for direction in ("fwd", "bwd")
    ]
    return lists[0], lists[1], (work / "mined" / "de-en.tsv.zst").read_bytes()


@pytest.mark.integration  # seconds of search
@pytest.mark.parametrize("shape", ["random", "clustered with duplicates"])
def test_exact_mining_searches_both_ways_at_once_and_finds_the_brute_force_neighbours(
    tmp_path, shape, monkeypatch
):
    from bitextmine.search import gemm

    passes = []  # of the products, both directions at once
    shared_pass = gemm._mutual_best
    monkeypatch.setattr(gemm, "_mutual_best", lambda *a: passes.append(a) or shared_pass(*a))
    if shape == "random":
        de, en = random_unit(600, 48, seed=31), random_unit(450, 48, seed=32)
    else:
        de, en = clustered_unit(600, 48, clusters=6, seed=33), clustered_unit(450, 48, clusters=6, seed=34)
        en[[5, 200, 449]] = en[100]  # ties: rows with one cosine, broken by the smaller row
        de[[0, 300]] = en[100]
    de, en = (rows.astype(np.float16).astype(np.float32) for rows in (de, en))  # as the shards hold them
    work = tmp_path / "work"
    _exact_workspace(work, tmp_path, {"de": de, "en": en})
    fwd, bwd, mined = _mined_lists(work)  # one job: both directions from one product per block
    assert len(passes) == 1 and len(list((work / "mined" / ".neighbours").glob("*/*.npy"))) == 2
    for lists, queries, base in ((fwd, de, en), (bwd, en, de)):
        cos = queries.astype(np.float64) @ base.astype(np.float64).T
        rows = np.broadcast_to(np.arange(len(base)), cos.shape)
        want = np.lexsort((rows, -cos), axis=1)[:, :4]
        np.testing.assert_array_equal(lists["id"], want)
        np.testing.assert_allclose(lists["cos"], np.take_along_axis(cos, want, 1), atol=1e-6)
    one_way = _mined_lists(work, "--job-rows", "256")  # jobs of 256 queries, one direction at a time
    np.testing.assert_array_equal(one_way[0], fwd)
    np.testing.assert_array_equal(one_way[1], bwd)
    assert one_way[2] == mined and len(passes) == 1


@pytest.mark.integration
def test_exact_mining_killed_between_its_two_lists_resumes_to_identical_outputs(tmp_path):
    indexed = tmp_path / "indexed"
    _exact_workspace(
        indexed, tmp_path, {"de": random_unit(300, 16, seed=35), "en": random_unit(200, 16, seed=36)}
    )
    runs = {}
    for name, fault in (("straight", None), ("killed", "after-rename@1")):  # after the forward lists
        work = tmp_path / name
        shutil.copytree(indexed, work)
        env = {key: value for key, value in os.environ.items() if key != FAULT_ENV} | (
            {FAULT_ENV: fault} if fault else {}
        )
        command = [
            sys.executable,
            "-m",
            "bitextmine",
            "mine",
            "de",
            "en",
            "-w",
            str(work),
            "--filters",
            "none",
        ]
        run_once = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        if fault:
            assert run_once.returncode == -signal.SIGKILL, run_once.stderr
            assert len(list((work / "mined" / ".neighbours").glob("*/fwd-*.npy"))) == 1
            assert not list((work / "mined" / ".neighbours").glob("*/bwd-*.npy"))
            env.pop(FAULT_ENV)
            run_once = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert run_once.returncode == 0, run_once.stderr
        runs[name] = outputs(work)
    assert runs["killed"] == runs["straight"]


@pytest.mark.integration  # the CLI, processes of their own
def test_a_pairs_second_index_chooses_on_the_rate_the_first_measured_here_without_torch(tmp_path):
    """`index en` after `index de` takes de's measured exact-search rate (one measurement a pair: the
    same exact cost either way round) and imports no torch; a rate recorded on another host, for
    another device, or two hours ago, is measured again."""
    work = tmp_path / "w"
    for lang, seed in (("de", 1), ("en", 2)):
        np.save(tmp_path / f"{lang}.npy", random_unit(300, 16, seed=seed))
        text = tmp_path / f"{lang}.txt"
        text.write_text("".join(f"{lang} {i}\n" for i in range(300)))
        args = ("-l", lang, "-w", str(work), "--embeddings", str(tmp_path / f"{lang}.npy"))
        code, output = run("encode", "--lid", "off", str(text), *args, "--model-name", "m")
        assert code == 0, output
    code, output = run("index", "de", "-w", str(work))
    assert code == 0, output
    assert heavy_imports("index", "en", "-w", str(work)) == []
    de, en = (json.loads((work / "index" / f"{lang}.json").read_text()) for lang in ("de", "en"))
    assert de["factory"] == en["factory"] == EXACT and en["exact_rate"] == de["exact_rate"]
    assert de["exact_rate"]["host"] == socket.gethostname() and de["exact_rate"]["device"] == "cpu"
    assert en["exact_ms_per_1000"] == de["exact_ms_per_1000"]  # 300 rows a side

    for field, value in (("host", "elsewhere"), ("device", "cuda"), ("measured", time.time() - 7200)):
        de["exact_rate"] = {**en["exact_rate"], field: value, "products_per_second": 1.0}
        (work / "index" / "de.json").write_text(json.dumps(de))
        code, output = run("index", "en", "-w", str(work))
        assert code == 0, output
        en = json.loads((work / "index" / "en.json").read_text())
        assert en["exact_rate"]["products_per_second"] > 1.0 and en["factory"] == EXACT, field
