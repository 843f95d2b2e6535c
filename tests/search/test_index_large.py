"""The large-index default path: an HNSW coarse quantizer above 4,096 lists, a training sample
held to TRAIN_SAMPLE_BYTES, and an unsharded build that resumes after a kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import faiss
import numpy as np
import pytest

from bitextmine.errors import BitextmineError
from bitextmine.faults import FAULT_ENV
from bitextmine.launch.jobs import run_jobs
from bitextmine.search import training
from bitextmine.search.factory_choice import FLAT_QUANTIZER_MAX_LISTS, choose_factory
from bitextmine.search.index_build import (
    build_index,
    checkpoint_ranges,
    finish_merged_build,
    start_sharded_build,
)
from bitextmine.search.training import (
    MIN_TRAIN_PER_LIST,
    POINTS_PER_LIST,
    TRAIN_SAMPLE_BYTES,
    check_training_sample,
    training_rows,
)
from bitextmine.steps.index import populate_jobs
from tests.helpers import clustered_unit, outputs, store_vectors

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


@pytest.mark.parametrize("dim", [384, 1024])
@pytest.mark.parametrize("n", [10**7, 10**8, 10**9])
def test_default_training_sample_is_held_to_its_cap_with_64_rows_a_list(n, dim):
    factory = choose_factory(n, dim)
    nlist = faiss.extract_index_ivf(faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)).nlist
    rows = training_rows(factory, n, dim)
    assert rows * dim * 4 <= TRAIN_SAMPLE_BYTES
    assert rows >= nlist * MIN_TRAIN_PER_LIST >= nlist * POINTS_PER_LIST
    assert nlist > FLAT_QUANTIZER_MAX_LISTS and "_HNSW32" in factory
    check_training_sample(factory, n, dim)  # the library's own choice is never refused


def test_the_cap_lowers_the_list_count_only_where_it_binds():
    assert choose_factory(10**7, 384) == "OPQ48,IVF32768_HNSW32,PQ48np"  # 65,536 without the cap
    assert choose_factory(10**7, 1024) == "OPQ128,IVF16384_HNSW32,PQ128np"
    assert choose_factory(3 * 10**6, 384) == "IVF3000,Flat"  # lists of 1,000 vectors, as before


def test_an_explicit_factory_trains_on_the_capped_sample_or_is_refused_in_one_line():
    cap = TRAIN_SAMPLE_BYTES // (4 * 384)
    assert training_rows("OPQ48,IVF65536_HNSW32,PQ48np", 10**8, 384) == cap  # 42 a list: trained
    check_training_sample("OPQ48,IVF65536_HNSW32,PQ48np", 10**8, 384)
    with pytest.raises(BitextmineError) as err:
        check_training_sample(choose_factory(10**9, 384, list_size=4096), 10**9, 384)
    message = str(err.value)
    assert "\n" not in message and "244,141 lists need 9,521,499 training rows" in message
    assert f"use at most {cap // 39:,} lists" in message
    check_training_sample("IVF512,Flat", 100, 384)  # too few vectors: FAISS's own error, as before


def test_a_refused_factory_fails_before_any_training_or_file(tmp_path, monkeypatch):
    monkeypatch.setattr(training, "TRAIN_SAMPLE_BYTES", 4 * 16 * 1000)  # 1,000 rows of 16-d
    vectors = store_vectors(tmp_path / "emb", clustered_unit(3000, 16), shard_rows=1000)
    with pytest.raises(BitextmineError, match="its 32 lists need 1,248 training rows"):
        build_index(vectors, "de", factory="IVF32,Flat")
    with pytest.raises(BitextmineError, match="use at most 25 lists"):
        start_sharded_build(vectors, "de", tmp_path / "index", [(0, 3000)], factory="IVF32,Flat")
    assert not (tmp_path / "index").exists()
    assert build_index(vectors, "de", factory="IVF16,Flat", nprobe=4)[1].train_rows == 1000


def test_checkpoint_ranges_split_mergeable_indexes_only():
    assert checkpoint_ranges(2500, "IVF16,Flat", 16, rows=1000) == [(0, 833), (833, 1667), (1667, 2500)]
    assert checkpoint_ranges(2000, "OPQ4,IVF16,PQ4np", 16, rows=1000) == [(0, 1000), (1000, 2000)]
    assert checkpoint_ranges(2000, "Flat", 16, rows=1000) == [(0, 1000), (1000, 2000)]
    assert checkpoint_ranges(2000, "HNSW32", 16, rows=1000) == [(0, 2000)]  # FAISS cannot merge HNSW
    assert checkpoint_ranges(0, "Flat", 16) == [(0, 0)]


def merged_build(vectors, index_dir, factory, rows, ran=None):
    """The index step's unsharded path: template, the part jobs not done, their merge."""
    ranges = checkpoint_ranges(len(vectors), factory, vectors.dim, rows)
    build = start_sharded_build(vectors, "de", index_dir, ranges, factory=factory)
    jobs = populate_jobs(build)
    if ran is not None:
        ran.extend(job.name for job in jobs if not job.done())
    run_jobs(jobs)
    return finish_merged_build(build, nprobe=4)


@pytest.mark.integration  # FAISS training: seconds
@pytest.mark.parametrize("factory", ["Flat", "IVF16,Flat", "IVF16_HNSW32,Flat", "OPQ4,IVF16,PQ4np"])
def test_parts_merge_into_the_bytes_of_a_one_pass_build(tmp_path, factory):
    vectors = store_vectors(tmp_path / "emb", clustered_unit(3000, 16), shard_rows=700)
    merged, info = merged_build(vectors, tmp_path / "index", factory, rows=1000)
    whole, whole_info = build_index(vectors, "de", factory=factory, nprobe=4)
    assert merged.ntotal == 3000 and info.factory == factory
    assert faiss.serialize_index(merged).tobytes() == faiss.serialize_index(whole).tobytes()
    assert (info.recall, info.nprobe, info.train_rows) == (
        whole_info.recall,
        whole_info.nprobe,
        whole_info.train_rows,
    )


def test_a_rerun_populates_only_the_missing_parts(tmp_path):
    vectors = store_vectors(tmp_path / "emb", clustered_unit(3000, 16), shard_rows=1000)
    index_dir = tmp_path / "index"
    first, _ = merged_build(vectors, index_dir, "IVF16,Flat", rows=1000)
    template = next(index_dir.glob("de.*.template.faiss"))
    stamp = template.stat().st_mtime_ns
    next(index_dir.glob("de.*.001.faiss")).unlink()
    ran: list[str] = []
    again, _ = merged_build(vectors, index_dir, "IVF16,Flat", rows=1000, ran=ran)
    assert ran == ["index de shard 2/3"] and template.stat().st_mtime_ns == stamp  # not retrained
    assert faiss.serialize_index(again).tobytes() == faiss.serialize_index(first).tobytes()


INDEX_DE = """
import sys
from bitextmine.steps.index import IndexOptions, index
from bitextmine.workspace.layout import Workspace
index(Workspace(sys.argv[1]), "de", IndexOptions(factory="IVF2,Flat", checkpoint_rows=8))
"""


def index_de(work: Path, fault: str | None = None) -> subprocess.CompletedProcess:
    """The index step for de in a process of its own, in parts of 8 rows (25 rows: 4 parts)."""
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    env.update({FAULT_ENV: fault} if fault else {})
    command = [sys.executable, "-c", INDEX_DE, str(work)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.integration
@pytest.mark.parametrize("fault", ["before-rename@1", "after-rename@3"])  # mid-train, mid-populate
def test_a_killed_unsharded_build_resumes_to_identical_files(workspace, tmp_path, fault):
    """Writes: the template (1), 4 parts (2-5), de.faiss (6), de.json (7). After a kill mid-populate the
    rerun keeps the template and the 2 parts done: its 3rd write is already de.faiss."""
    work, _ = workspace
    reference = tmp_path / "reference"
    assert index_de(work).returncode == 0
    os.rename(work / "index", reference)
    killed = index_de(work, fault)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    kept = {p.name: p.stat().st_mtime_ns for p in (work / "index").glob("de.*.faiss")}
    assert len(kept) == (0 if fault.startswith("before") else 3)
    if kept:
        assert index_de(work, "after-rename@3").returncode == -signal.SIGKILL
        assert (work / "index" / "de.faiss").is_file() and not (work / "index" / "de.json").exists()
        assert {name: (work / "index" / name).stat().st_mtime_ns for name in kept} == kept
    rerun = index_de(work)
    assert rerun.returncode == 0, rerun.stderr
    assert outputs(work / "index") == outputs(reference)
    assert sorted(p.name for p in (work / "index").iterdir()) == ["de.faiss", "de.json"]
    assert not list(work.rglob(".*.tmp-*"))


@pytest.mark.integration  # FAISS training: seconds
def test_an_opq_sample_is_rotated_in_place_as_faiss_would_train():
    """IndexPreTransform.train keeps a rotated copy of the sample (twice TRAIN_SAMPLE_BYTES at 10M rows);
    the sample is rotated in place instead: in one chunk that trains FAISS's own bytes; in several, the
    rotation of each row is the same to float rounding."""
    sample, factory = clustered_unit(4000, 16), "OPQ4,IVF16,PQ4np"
    want = faiss.index_factory(16, factory, faiss.METRIC_INNER_PRODUCT)
    want.train(sample)
    for chunk_rows in (4000, 1500):
        got = faiss.index_factory(16, factory, faiss.METRIC_INNER_PRODUCT)
        rotated = sample.copy()
        training._train_rotated(faiss.downcast_index(got), rotated, chunk_rows=chunk_rows)
        assert got.is_trained
        opq = faiss.downcast_VectorTransform(faiss.downcast_index(got).chain.at(0))
        np.testing.assert_allclose(rotated, opq.apply(sample), atol=1e-6)  # the sample itself, rotated
        if chunk_rows == len(sample):
            assert faiss.serialize_index(got).tobytes() == faiss.serialize_index(want).tobytes()
