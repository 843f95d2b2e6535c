"""FAISS indexes over embedding shards: factory choice, exactness, IVF recall, chunking, persistence."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import faiss
import numpy as np
import pytest

from bitextmine.errors import BitextmineError
from bitextmine.launch.jobs import run_jobs
from bitextmine.search.factory_choice import choose_factory
from bitextmine.search.index_build import build_index, finish_sharded_build, start_sharded_build
from bitextmine.search.index_files import IndexInfo, load_index, save_index
from bitextmine.search.index_io import IndexCache, file_sha256, write_index
from bitextmine.search.ivf_scan import search
from bitextmine.search.knn import rerank
from bitextmine.search.recall_tuning import RERANK_FETCH, default_nprobe, list_imbalance, set_nprobe
from bitextmine.search.sharded import bytes_per_vector, plan_ranges
from bitextmine.search.training import check_training_sample, training_rows
from bitextmine.steps.index import populate_jobs
from tests.helpers import clustered_unit, random_unit, run, store_vectors, unit

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def brute_force(queries: np.ndarray, base: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    sims = queries @ base.T
    ids = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(sims, ids, 1), ids


def recall(found: np.ndarray, exact: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(e)) / len(e) for f, e in zip(found, exact, strict=True)]))


@pytest.fixture(scope="module")
def ivf(tmp_path_factory):
    vectors = store_vectors(tmp_path_factory.mktemp("emb"), clustered_unit(20_000, 32))
    index, info = build_index(vectors, "de", factory="IVF512,Flat", recall_queries=500)
    return vectors, index, info


@pytest.mark.parametrize(
    ("n", "dim", "expected"),
    [
        (0, 384, "Flat"),
        (200_000, 384, "Flat"),
        (200_001, 384, "IVF200,Flat"),  # lists of DEFAULT_LIST_SIZE vectors up to 4M
        (1_000_000, 384, "IVF1000,Flat"),
        (4_000_000, 384, "IVF4000,Flat"),
        (4_000_001, 384, "OPQ48,IVF32768_HNSW32,PQ48np"),
        (
            10**9,
            384,
            "OPQ48,IVF32768_HNSW32,PQ48np",
        ),  # 64 training rows a list in 4 GiB (see test_index_large)
        (10**7, 32, "OPQ4,IVF65536_HNSW32,PQ4np"),
        (10**7, 100, "OPQ10,IVF65536_HNSW32,PQ10np"),
    ],
)
def test_choose_factory_by_size(n, dim, expected):
    assert choose_factory(n, dim) == expected


@pytest.mark.parametrize("dim", [384, 32])
@pytest.mark.parametrize("n", [10, 200_001, 4_000_000, 4_000_001, 10**9])
def test_chosen_factories_are_valid_faiss_strings(n, dim):
    factory = choose_factory(n, dim)
    index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    assert index.d == dim and index.metric_type == faiss.METRIC_INNER_PRODUCT
    if factory != "Flat":
        assert faiss.extract_index_ivf(index).nlist * 39 <= training_rows(factory, n, dim)


@pytest.mark.parametrize(
    ("n", "dim", "list_size", "expected"),
    [
        (300_000, 384, 366, "IVF820,Flat"),  # flat coarse search up to 4,096 lists
        (3_000_000, 384, 366, "IVF8197_HNSW32,Flat"),
        (100_000, 384, 1000, "IVF100,Flat"),  # IVF even where the default is exact search
        (10**8, 384, 4096, "OPQ48,IVF24414_HNSW32,PQ48np"),
        (100, 32, 5, "IVF2,Flat"),  # at most n / 39 lists: k-means needs 39 points a centroid
        (10, 32, 5, "IVF1,Flat"),
        (409_600, 32, 100, "IVF4096,Flat"),
        (409_700, 32, 100, "IVF4097_HNSW32,Flat"),  # an HNSW graph finds the lists above 4,096
        (10**7, 384, 4096, "OPQ48,IVF2441,PQ48np"),
    ],
)
def test_a_list_size_fixes_the_list_length(n, dim, list_size, expected):
    factory = choose_factory(n, dim, list_size)
    assert factory == expected
    index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    nlist = faiss.extract_index_ivf(index).nlist
    assert nlist == 1 or nlist * 39 <= training_rows(factory, n, dim)


def test_nprobe_and_training_rules():
    assert default_nprobe("Flat") is None
    assert default_nprobe("OPQ48,IVF32768,PQ48np") == 4096
    assert default_nprobe("IVF512,Flat") == 64
    assert default_nprobe("IVF16,Flat") == 16
    assert training_rows("IVF4096,Flat", 10**7, 384) == 4096 * 256
    assert training_rows("IVF64,Flat", 5000, 384) == 5000
    assert training_rows("IVF16,Flat", 10**6, 384) == 100_000
    assert training_rows("OPQ4,IVF16,PQ4np", 10**6, 32) >= 256 * 39


def test_training_sample_is_bounded_in_bytes():
    affordable = 4 * 2**30 // (4 * 384)  # rows of a 4 GiB float32 sample
    assert training_rows("IVF8197_HNSW32,Flat", 3 * 10**6, 384) == 8197 * 256 < affordable
    assert training_rows("IVF16384,Flat", 10**8, 384) == affordable < 16384 * 256
    assert training_rows("IVF16384,Flat", 10**8, 3072) == affordable // 8  # 4 GiB is fewer rows at 3072-d
    assert training_rows("OPQ48,IVF262144,PQ48np", 10**9, 384) == affordable


def test_flat_search_equals_brute_force(tmp_path):
    vectors = store_vectors(tmp_path, random_unit(300, 16), shard_rows=128)
    index, info = build_index(vectors, "de", nprobe=5)
    assert (info.factory, info.nprobe, info.recall, info.train_rows, info.count) == (
        "Flat",
        None,
        1.0,
        0,
        300,
    )
    queries = random_unit(20, 16, seed=1)
    sims, ids = search(index, queries, 5)
    exact_sims, exact_ids = brute_force(queries, vectors.take(np.arange(300)), 5)
    assert sims.dtype == np.float32 and ids.dtype == np.int64
    np.testing.assert_array_equal(ids, exact_ids)
    np.testing.assert_allclose(sims, exact_sims, atol=1e-5)
    assert search(index, queries, 1000)[1].shape == (20, 300)


@pytest.mark.integration  # FAISS training: seconds
def test_ivf_recall_is_reported_and_grows_with_nprobe(ivf):
    vectors, index, info = ivf
    assert (info.factory, info.nprobe, info.train_rows) == ("IVF512,Flat", 64, 20_000)
    assert info.recall >= 0.9 and info.recall_queries == 500
    base = vectors.take(np.arange(len(vectors)))
    queries = base[np.random.default_rng(7).choice(len(base), 500, replace=False)]
    exact_sims, exact_ids = brute_force(queries, base, 4)
    assert recall(search(index, queries, 4)[1], exact_ids) >= 0.9
    recalls = []
    for nprobe in (1, 4, 16, 64, 256, 512):
        set_nprobe(index, nprobe)
        recalls.append(recall(search(index, queries, 4)[1], exact_ids))
    assert recalls == sorted(recalls) and recalls[0] < 1.0
    sims, ids = search(index, queries, 4)
    np.testing.assert_array_equal(ids, exact_ids)
    np.testing.assert_allclose(sims, exact_sims, atol=1e-5)
    set_nprobe(index, info.nprobe)


def test_populating_in_chunks_builds_the_same_index(tmp_path):
    vectors = store_vectors(tmp_path, clustered_unit(5000, 16), shard_rows=1500)
    added: list[int] = []
    chunked, info = build_index(
        vectors, "de", factory="IVF32,Flat", nprobe=5, chunk_rows=700, progress=added.append
    )
    whole, _ = build_index(vectors, "de", factory="IVF32,Flat", nprobe=5)
    assert added == [700] * 7 + [100] and info.count == 5000
    assert info.nprobe == 5 and faiss.extract_index_ivf(chunked).nprobe == 5
    queries = random_unit(50, 16, seed=3)
    for got, want in zip(search(chunked, queries, 8), search(whole, queries, 8), strict=True):
        np.testing.assert_array_equal(got, want)


def test_save_load_round_trip(ivf, tmp_path):
    vectors, index, info = ivf
    index_dir = tmp_path / "index"
    save_index(index, info, index_dir)
    save_index(index, info, index_dir)
    assert sorted(p.name for p in index_dir.iterdir()) == ["de.faiss", "de.json"]
    loaded, loaded_info = load_index(index_dir, "de", vectors)
    assert loaded_info == info
    assert IndexInfo.from_json(info.to_json()) == info
    queries = random_unit(30, 32, seed=4)
    for got, want in zip(search(loaded, queries, 4), search(index, queries, 4), strict=True):
        np.testing.assert_array_equal(got, want)
    overridden, overridden_info = load_index(index_dir, "de", vectors, nprobe=128)
    assert overridden_info.nprobe == 128 and faiss.extract_index_ivf(overridden).nprobe == 128
    with IndexCache() as indexes:
        capped, _ = load_index(index_dir, "de", vectors, max_codes=10, indexes=indexes)
        assert faiss.extract_index_ivf(capped).max_codes == 10
        assert (search(capped, queries, 20)[1][:, 10:] == -1).all()
        reloaded, _ = load_index(index_dir, "de", vectors, indexes=indexes)
        assert reloaded is capped and faiss.extract_index_ivf(reloaded).max_codes == 0  # the cap is lifted


def counted_reads(monkeypatch) -> list[str]:
    """The names of the index files FAISS reads from here on."""
    reads, read = [], faiss.read_index
    monkeypatch.setattr(faiss, "read_index", lambda path: reads.append(Path(path).name) or read(path))
    return reads


def test_load_index_keeps_the_file_loaded_only_in_the_callers_cache(ivf, tmp_path, monkeypatch):
    vectors, index, info = ivf
    save_index(index, info, tmp_path / "index")
    reads = counted_reads(monkeypatch)
    first, _ = load_index(tmp_path / "index", "de", vectors)
    assert load_index(tmp_path / "index", "de", vectors)[0] is not first  # nothing kept between calls
    with IndexCache() as indexes:
        held, _ = load_index(tmp_path / "index", "de", vectors, indexes=indexes)
        assert load_index(tmp_path / "index", "de", vectors, indexes=indexes)[0] is held
    assert reads == ["de.faiss"] * 3


def test_checksums_are_confirmed_once_for_the_owner_of_a_cache_and_on_every_load_without(
    ivf, tmp_path, monkeypatch
):
    """What a process confirmed was kept in a module-level set that no caller owned; now the caller's
    IndexCache keeps it (mine's jobs share one), and a load without a cache checks the files again."""
    vectors, index, info = ivf
    save_index(index, info, tmp_path / "index")
    hashed = []

    def counted(path: Path) -> str:
        hashed.append(path.name)
        return file_sha256(path)

    for module in ("index_io", "index_files"):
        monkeypatch.setattr(f"bitextmine.search.{module}.file_sha256", counted)
    for _ in range(2):
        load_index(tmp_path / "index", "de", vectors)
    with IndexCache() as indexes:
        for _ in range(2):
            load_index(tmp_path / "index", "de", vectors, indexes=indexes)
        os.utime(tmp_path / "index" / "de.faiss", ns=(1, 1))  # written since: hashed again
        load_index(tmp_path / "index", "de", vectors, indexes=indexes)
    assert hashed == ["de.faiss"] * 4


def test_an_index_cache_holds_the_file_read_last_until_another_is_read_or_it_closes(tmp_path, monkeypatch):
    a, b = tmp_path / "a.faiss", tmp_path / "b.faiss"
    for path in (a, b):
        write_index(faiss.IndexFlatIP(4), path)
    reads = counted_reads(monkeypatch)
    with IndexCache() as indexes:
        first = indexes.read(a)
        assert indexes.read(a) is first
        indexes.read(b)  # frees a
        indexes.read(a)
        os.utime(a, ns=(1, 1))  # a written since: read again
        indexes.read(a)
    indexes.read(a)  # closed: nothing held
    assert reads == ["a.faiss", "b.faiss", "a.faiss", "a.faiss", "a.faiss"]
    copy = pickle.loads(pickle.dumps(indexes))  # a job's argument, sent to another process
    copy.read(a)
    assert reads[5:] == ["a.faiss"]


def test_load_refuses_missing_and_stale_indexes(ivf, tmp_path):
    vectors, index, info = ivf
    with pytest.raises(BitextmineError, match=r"no index for 'de' in .*run `bitextmine index de`"):
        load_index(tmp_path / "index", "de", vectors)
    save_index(index, info, tmp_path / "index")
    other_model = store_vectors(tmp_path / "b", clustered_unit(20_000, 32), fingerprint="fp-b")
    fewer_rows = store_vectors(tmp_path / "c", clustered_unit(100, 32))
    for stale in (other_model, fewer_rows):
        with pytest.raises(BitextmineError, match=r"index of 'de' is stale .*rerun `bitextmine index de`"):
            load_index(tmp_path / "index", "de", stale)


def test_invalid_factory_and_unavailable_gpu_are_user_errors(tmp_path):
    vectors = store_vectors(tmp_path, random_unit(100, 16))
    with pytest.raises(BitextmineError, match="invalid FAISS factory 'IVFx,Flat': could not parse") as err:
        build_index(vectors, "de", factory="IVFx,Flat")
    assert "\n" not in str(err.value)
    with pytest.raises(BitextmineError, match="cannot train FAISS index 'IVF512,Flat' on 100 rows"):
        build_index(vectors, "de", factory="IVF512,Flat")
    if faiss.get_num_gpus() == 0:
        with pytest.raises(BitextmineError, match="GPU"):
            build_index(vectors, "de", gpu=True)
        with pytest.raises(BitextmineError, match="GPU"):  # before any shard is written
            build_index_in_shards(vectors, "de", tmp_path / "index", [(0, 50), (50, 100)], gpu=True)
        assert not (tmp_path / "index").exists()


@pytest.fixture
def cpu_as_gpu(monkeypatch) -> list[str]:
    """FAISS's GPU calls replaced by identities on CPU; returns the class names of what went to a GPU."""
    cloned: list[str] = []

    def to_gpu(index):
        cloned.append(type(faiss.downcast_index(index)).__name__)
        return index

    monkeypatch.setattr("bitextmine.search.index_build.check_gpu", lambda: None)
    monkeypatch.setattr(faiss, "index_cpu_to_all_gpus", to_gpu)
    monkeypatch.setattr(faiss, "index_gpu_to_cpu", lambda index: index, raising=False)
    return cloned


@pytest.mark.parametrize(
    ("factory", "sent_to_gpu"),
    [("IVF16,Flat", ["IndexIVFFlat"]), ("IVF16_HNSW32,Flat", ["IndexFlat"]), ("Flat", ["IndexFlat"])],
)
def test_gpu_builds_clone_flat_quantizers_and_cluster_for_hnsw_ones(
    tmp_path, cpu_as_gpu, factory, sent_to_gpu
):
    """An HNSW coarse quantizer has no GPU version: only the k-means assignments go to the GPUs, and the
    index trained that way equals the CPU build."""
    vectors = store_vectors(tmp_path / "emb", clustered_unit(2000, 16))
    on_cpu, _ = build_index(vectors, "de", factory=factory, nprobe=4, recall_queries=100)
    on_gpu, info = build_index(vectors, "de", factory=factory, nprobe=4, recall_queries=100, gpu=True)
    assert cpu_as_gpu == sent_to_gpu and info.gpu
    assert faiss.serialize_index(on_gpu).tobytes() == faiss.serialize_index(on_cpu).tobytes()
    if "HNSW" in factory:
        assert faiss.extract_index_ivf(on_gpu).clustering_index is None
        cpu_as_gpu.clear()
        ranges = [(0, 1000), (1000, 2000)]
        build_index_in_shards(vectors, "de", tmp_path / "index", ranges, factory=factory, gpu=True)
        assert cpu_as_gpu == ["IndexFlat"]  # the template's k-means; shards are populated on CPU


@pytest.mark.integration  # FAISS training: seconds
def test_opq_ivf_pq_builds_saves_and_loads(tmp_path):
    vectors = store_vectors(tmp_path / "emb", clustered_unit(2000, 16))
    index, info = build_index(vectors, "de", factory="OPQ4,IVF16,PQ4np", recall_queries=200)
    assert info.nprobe == default_nprobe("OPQ4,IVF16,PQ4np") and 0 < info.recall <= 1
    assert faiss.extract_index_ivf(index).nprobe == info.nprobe
    save_index(index, info, tmp_path / "index")
    loaded, _ = load_index(tmp_path / "index", "de", vectors, nprobe=2)
    assert faiss.extract_index_ivf(loaded).nprobe == 2
    sims, ids = search(loaded, random_unit(10, 16, seed=5), 4)
    assert ids.shape == (10, 4) and (ids >= 0).all() and np.isfinite(sims).all()


def test_rerank_keeps_the_exact_best_and_marks_missing_hits():
    base = random_unit(30, 8, seed=2)
    queries = random_unit(5, 8, seed=3)
    ids = np.array(
        [[3, 1, 4, 10, 5], [9, 2, 6, 5, 3], [-1, -1, -1, -1, -1], [7, -1, 8, -1, 0], [0, 1, 2, 3, 4]]
    )
    cos, top = rerank(queries, ids, lambda i: base[i], 3)
    for q in range(5):
        hits = [i for i in ids[q] if i >= 0]
        want = sorted(hits, key=lambda i: -float(queries[q] @ base[i]))[:3]
        assert top[q, : len(want)].tolist() == want and (top[q, len(want) :] == -1).all()
        np.testing.assert_allclose(cos[q, : len(want)], [queries[q] @ base[i] for i in want], atol=1e-6)
        assert np.isnan(cos[q, len(want) :]).all()


@pytest.mark.parametrize("chunk_rows", [1, 2, 4])
def test_rerank_in_chunks_equals_one_pass(chunk_rows):
    base, queries = random_unit(30, 8, seed=2), random_unit(5, 8, seed=3)
    ids = np.random.default_rng(4).integers(-1, 30, size=(5, 6))
    whole = rerank(queries, ids, lambda i: base[i], 3, chunk_rows=100)
    chunked = rerank(queries, ids, lambda i: base[i], 3, chunk_rows=chunk_rows)
    for got, want in zip(chunked, whole, strict=True):
        assert got.tobytes() == want.tobytes()
    assert [a.shape for a in rerank(queries[:0], ids[:0], lambda i: base[i], 3)] == [(0, 3), (0, 3)]


@pytest.fixture(scope="module")
def other_language(ivf):
    """Queries like another language's sentences: noisy copies of indexed rows, never the rows themselves."""
    vectors, _, _ = ivf
    rows = vectors.take(np.random.default_rng(11).choice(len(vectors), 400, replace=False))
    return "en", unit(rows + 0.35 * np.random.default_rng(12).normal(size=rows.shape) / np.sqrt(32))


@pytest.mark.integration  # FAISS training: seconds
def test_other_language_queries_tune_nprobe_to_the_fewest_reaching_the_target(ivf, other_language):
    vectors, _, _ = ivf
    index, info = build_index(vectors, "de", factory="IVF512,Flat", queries=other_language, target_recall=0.9)
    assert info.recall_source == "en" and info.recall_queries == 400 and info.recall >= 0.9
    assert info.nprobe in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512) and info.nprobe > 1
    base = vectors.take(np.arange(len(vectors)))
    queries = other_language[1]
    exact_ids = brute_force(queries, base, 4)[1]
    assert recall(search(index, queries, 4)[1], exact_ids) >= 0.9
    set_nprobe(index, info.nprobe // 2)
    assert recall(search(index, queries, 4)[1], exact_ids) < 0.9
    assert info.search_ms_per_1000 > 0 and info.exact_ms_per_1000 > 0 and info.fetch == 4


@pytest.mark.integration  # FAISS training: seconds
def test_automatic_ivf_flat_gives_way_to_flat_only_when_slower_than_exact(ivf, other_language, monkeypatch):
    from bitextmine.search import factory_choice, recall_tuning

    vectors, _, _ = ivf
    monkeypatch.setattr(factory_choice, "FLAT_MAX", 1000)
    real_probe = recall_tuning.recall_probe
    for exact_seconds, factory in ((1e9, f"IVF{round(len(vectors) / 1000)},Flat"), (0.0, "Flat")):
        monkeypatch.setattr(
            recall_tuning,
            "recall_probe",
            lambda *a, s=exact_seconds, **kw: replace(real_probe(*a, **kw), exact_seconds=s),
        )
        index, info = build_index(vectors, "de", queries=other_language)
        assert info.factory == factory and isinstance(index, faiss.IndexFlat) == (factory == "Flat")
        assert ("built Flat instead" in info.note) == (factory == "Flat")
        assert info.recall >= 0.95 and info.recall_source == "en"
    index, info = build_index(vectors, "de", factory="IVF512,Flat", queries=other_language)
    assert info.factory == "IVF512,Flat" and info.note == ""  # an explicit factory is kept


@pytest.mark.integration  # FAISS training: seconds
@pytest.mark.parametrize("exact_rate", [1e3, 1e15])  # exact search far slower, or far faster
def test_automatic_ivf_flat_on_unstructured_vectors_probes_more_or_gives_way_to_exact(
    tmp_path, monkeypatch, exact_rate
):
    from bitextmine.search import factory_choice
    from bitextmine.search.cost import ExactCost
    from bitextmine.search.recall_tuning import RECALL_FLOOR

    monkeypatch.setattr(factory_choice, "FLAT_MAX", 1000)
    vectors = store_vectors(tmp_path / "emb", random_unit(5000, 64, seed=41))
    queries = random_unit(500, 64, seed=42)
    cost = ExactCost(exact_rate, len(vectors), 5000, "bf16", shared=True)
    # as `index` builds its own choice: probing one list of five, too few for random vectors
    index, info = build_index(vectors, "de", queries=("en", queries), nprobe=1, exact_cost=cost)
    exact_ids = brute_force(queries, vectors.take(np.arange(len(vectors))), 4)[1]
    if exact_rate < 1e6:
        assert info.factory == "IVF5,Flat" and info.nprobe > 1 and info.note == ""
        assert recall(search(index, queries, 4)[1], exact_ids) >= info.recall >= RECALL_FLOOR
        set_nprobe(index, info.nprobe // 2)
        assert recall(search(index, queries, 4)[1], exact_ids) < RECALL_FLOOR  # the fewest probes doubled
    else:
        assert info.factory == "Flat" and isinstance(index, faiss.IndexFlat) and info.recall == 1.0
        assert "recall@4" in info.note and "built Flat instead" in info.note


def test_an_ivf_search_weighed_against_exact_search_counts_its_fastest_timing(tmp_path, monkeypatch):
    """One slow timing (the machine busy with other work) does not make the IVF look slower than exact."""
    from bitextmine.search import recall_tuning

    vectors = store_vectors(tmp_path / "emb", random_unit(300, 16, seed=3))
    index = faiss.IndexFlatIP(16)
    index.add(vectors.take(np.arange(len(vectors))))
    probe = recall_tuning.recall_probe(vectors, random_unit(20, 16, seed=4), "en", 4)
    durations = iter([5.0, 0.5, 1.0])  # the first search waits behind other work
    clock = [0.0]

    def timed_search(index, queries, k):
        clock[0] += next(durations)
        return index.search(queries, k)

    monkeypatch.setattr(recall_tuning, "search", timed_search)
    monkeypatch.setattr(recall_tuning.time, "perf_counter", lambda: clock[0])
    recall, seconds = recall_tuning.measure_recall(index, probe, vectors, 4, 4, repeats=3)
    assert (recall, seconds) == (1.0, 0.5)


def test_the_search_time_an_index_reports_is_its_fastest_search_not_its_first(tmp_path, monkeypatch):
    """The first search of an IVF-Flat pays one-time costs (the list scan imports torch): the time
    `index` reports for a given factory and nprobe, beside exact search's, leaves them out."""
    from bitextmine.search import recall_tuning

    vectors = store_vectors(tmp_path / "emb", clustered_unit(2000, 16))
    durations = iter([5.0, 0.5, 1.0])  # the first search pays the one-time costs
    clock = [0.0]
    real_search = recall_tuning.search

    def timed_search(index, queries, k):
        clock[0] += next(durations)
        return real_search(index, queries, k)

    monkeypatch.setattr(recall_tuning, "search", timed_search)
    monkeypatch.setattr(recall_tuning.time, "perf_counter", lambda: clock[0])
    queries = ("en", random_unit(100, 16, seed=5))
    _, info = build_index(vectors, "de", factory="IVF16,Flat", nprobe=4, queries=queries, recall_queries=100)
    assert info.nprobe == 4 and info.search_ms_per_1000 == 1000 * 0.5 / 100 * 1000


def test_the_cost_of_exact_search_counts_one_product_where_both_directions_share_it():
    from bitextmine.search.cost import ExactCost

    one_way, shared = (ExactCost(1e9, 10**6, 5 * 10**5, "bf16", shared=s) for s in (False, True))
    assert shared.mining_seconds == one_way.mining_seconds / 2 == 10**6 * 5 * 10**5 / 1e9
    assert shared.query_seconds(1000) == one_way.query_seconds(1000) / 2 == 1000 * 10**6 / 1e9 / 2
    assert shared.ms_per_1000_queries == 1000 * shared.query_seconds(1000)


@pytest.mark.integration
def test_pq_indexes_fetch_more_and_rerank_exactly(tmp_path):
    vectors = store_vectors(tmp_path / "emb", clustered_unit(4000, 16))
    _, plain = build_index(vectors, "de", factory="OPQ4,IVF16,PQ4np", nprobe=16, fetch=4, recall_queries=300)
    _, reranked = build_index(vectors, "de", factory="OPQ4,IVF16,PQ4np", nprobe=16, recall_queries=300)
    assert plain.fetch == 4 and reranked.fetch == RERANK_FETCH
    assert reranked.recall > plain.recall and reranked.recall >= 0.95


def build_index_in_shards(vectors, lang, index_dir, ranges, *, ran=None, factory=None, gpu=False, **tuning):
    """The index step's sharded path: train the template, run the populate jobs not done, finish."""
    build = start_sharded_build(vectors, lang, index_dir, ranges, factory=factory, gpu=gpu)
    jobs = populate_jobs(build)
    if ran is not None:
        ran.extend(job.name for job in jobs if not job.done())
    run_jobs(jobs)
    return finish_sharded_build(build, **tuning)


@pytest.mark.integration  # FAISS training: seconds
@pytest.mark.parametrize("factory", ["Flat", "IVF32,Flat"])
def test_index_in_row_shards_searches_like_one_index(tmp_path, factory):
    """Shards populated from one trained template, searched one at a time and merged, find what the
    unsharded index finds (IVF: the same lists are probed in every shard)."""
    vectors = store_vectors(tmp_path / "emb", clustered_unit(3000, 16), shard_rows=1000)
    ranges = plan_ranges(3000, factory, 16, max_bytes=3000 * bytes_per_vector(factory, 16) / 3)
    assert ranges == [(0, 1000), (1000, 2000), (2000, 3000)]
    sharded, info = build_index_in_shards(
        vectors, "de", tmp_path / "index", ranges, factory=factory, nprobe=4
    )
    whole, _ = build_index(vectors, "de", factory=factory, nprobe=4)
    queries = random_unit(40, 16, seed=8)
    got_sims, got_ids = search(sharded, queries, 6)
    want_sims, want_ids = search(whole, queries, 6)
    np.testing.assert_array_equal(got_ids, want_ids)
    np.testing.assert_allclose(got_sims, want_sims, atol=1e-6)
    assert [s["stop"] for s in info.shards] == [1000, 2000, 3000] and info.count == 3000

    assert info.imbalance == list_imbalance(whole)
    save_index(sharded, info, tmp_path / "index")
    loaded, loaded_info = load_index(tmp_path / "index", "de", vectors)
    assert loaded_info == info and loaded.ntotal == 3000
    np.testing.assert_array_equal(search(loaded, queries, 6)[1], want_ids)
    if factory != "Flat":  # each shard scans at most max_codes rows of its own lists
        capped, _ = load_index(tmp_path / "index", "de", vectors, max_codes=4)
        assert (search(capped, queries, 20)[1][:, 3 * 4 :] == -1).all()
        assert all(faiss.extract_index_ivf(capped.load(s)).max_codes == 4 for s in capped.shards)


def test_sharded_build_resumes_with_the_missing_shards_only(tmp_path):
    vectors = store_vectors(tmp_path / "emb", clustered_unit(3000, 16), shard_rows=1000)
    ranges = [(0, 1200), (1200, 3000)]
    index_dir = tmp_path / "index"
    _, info = build_index_in_shards(vectors, "de", index_dir, ranges, factory="IVF32,Flat")
    first = {p.name: p.read_bytes() for p in index_dir.iterdir()}
    (index_dir / info.shards[1]["file"]).unlink()
    ran: list[str] = []
    build_index_in_shards(vectors, "de", index_dir, ranges, ran=ran, factory="IVF32,Flat")
    assert ran == ["index de shard 2/2"]
    assert {p.name: p.read_bytes() for p in index_dir.iterdir()} == first


def test_plan_ranges_fit_the_memory_budget():
    assert plan_ranges(10, "Flat", 4, None) == [(0, 10)]
    ranges = plan_ranges(1_000_000, "IVF1024,Flat", 384, max_bytes=400e6)
    per_row = bytes_per_vector("IVF1024,Flat", 384)
    assert per_row == 4 * 384 + 8 and len(ranges) == 4
    assert all((b - a) * per_row <= 400e6 for a, b in ranges) and ranges[-1][1] == 1_000_000
    assert bytes_per_vector("OPQ48,IVF4096,PQ48np", 384) == 56 and bytes_per_vector("IVF64,SQ8", 384) == 392


def test_list_imbalance_counts_the_rows_each_list_holds(tmp_path):
    """FAISS's imbalance factor from the quantizer's own assignment of every row, and by hand."""
    vectors = store_vectors(tmp_path / "emb", clustered_unit(3000, 16, clusters=5))
    index, info = build_index(vectors, "de", factory="IVF32,Flat", nprobe=4)
    rows = vectors.take(np.arange(3000))
    _, assign = faiss.extract_index_ivf(index).quantizer.search(rows, 1)
    sizes = np.bincount(assign[:, 0], minlength=32)
    want = 32 * (sizes.astype(float) ** 2).sum() / 3000**2
    assert info.imbalance == pytest.approx(want, rel=1e-3)
    assigned = faiss.swig_ptr(np.ascontiguousarray(assign[:, 0]))
    assert info.imbalance == pytest.approx(faiss.imbalance_factor(3000, 32, assigned), rel=1e-3)
    assert list_imbalance(build_index(store_vectors(tmp_path / "e2", rows[:50]), "de")[0]) is None  # Flat


def test_imbalance_of_hand_filled_lists():
    index = faiss.index_factory(2, "IVF2,Flat", faiss.METRIC_INNER_PRODUCT)
    index.train(np.array([[1, 0], [0, 1]], np.float32))
    index.add(np.array([[1, 0], [0.9, 0.1], [0, 1], [0.1, 0.9]], np.float32))
    assert list_imbalance(index) == 1.0  # 2 x (2^2 + 2^2) / 4^2
    index.add(np.array([[0.8, 0.2], [0.7, 0.3]], np.float32))
    assert list_imbalance(index) == pytest.approx(2 * (4**2 + 2**2) / 6**2, abs=1e-3)


@pytest.mark.parametrize(("field", "value"), [("nprobe", 0), ("nprobe", -3), ("fetch", 0)])
def test_an_index_record_with_a_search_setting_below_1_is_refused_naming_it(tmp_path, field, value):
    vectors = store_vectors(tmp_path / "emb", clustered_unit(500, 16))
    save_index(*build_index(vectors, "de", factory="IVF8,Flat", recall_queries=50), tmp_path / "index")
    record = tmp_path / "index" / "de.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), field: value}))
    with pytest.raises(BitextmineError, match=f"{field} is {value}, not at least 1") as err:
        load_index(tmp_path / "index", "de", vectors)
    assert str(err.value).startswith(f"{record}: ") and "\n" not in str(err.value)


def test_an_opq_rotation_on_fewer_training_rows_than_dimensions_is_refused():
    with pytest.raises(BitextmineError, match="OPQ rotation needs at least 384 training rows") as err:
        check_training_sample("OPQ16,IVF4,PQ16", 300, 384)
    assert "not 300" in str(err.value) and "\n" not in str(err.value)
    check_training_sample("OPQ16,IVF4,PQ16", 384, 384)
    check_training_sample("IVF4,PQ16", 300, 384)  # PQ alone trains (FAISS warns below 9,984 rows)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("factory", "message"),
    [
        ("HNSW0", "every size in it must be at least 1"),
        ("IVF0,Flat", "every size in it must be at least 1"),
        ("PQ16x0", "every size in it must be at least 1"),
        ("IVF4_HNSW1,Flat", "an HNSW graph needs at least 2 links"),
        ("OPQ16,IVF4,PQ16", "OPQ rotation needs at least 384 training rows"),
    ],
)
def test_factories_that_crash_faiss_are_refused_in_one_line(tmp_path, factory, message):
    """In a child process: without the checks FAISS aborts or crashes it (status 134, 136, 139)."""
    np.save(tmp_path / "v.npy", random_unit(300, 384).astype(np.float32))
    (tmp_path / "de.txt").write_text("".join(f"line {i}\n" for i in range(300)))
    work = str(tmp_path / "w")
    imported = ["--embeddings", str(tmp_path / "v.npy"), "--model-name", "m"]
    code, output = run("encode", str(tmp_path / "de.txt"), "-l", "de", "-w", work, *imported)
    assert code == 0, output
    command = [sys.executable, "-m", "bitextmine", "index", "de", "-w", work, "--factory", factory]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 1 and len(errors) == 1 and message in errors[0], done.stderr


@pytest.mark.integration
@pytest.mark.parametrize("factory", ["IDMap,Flat", "NSG2"])
def test_a_factory_faiss_cannot_fill_fails_once_in_one_line(tmp_path, factory):
    """They were tried 3 times, then "index de failed (3 attempts): RuntimeError: …"."""
    np.save(tmp_path / "v.npy", random_unit(40, 8).astype(np.float32))
    (tmp_path / "de.txt").write_text("".join(f"line {i}\n" for i in range(40)))
    work = str(tmp_path / "w")
    imported = ["--embeddings", str(tmp_path / "v.npy"), "--model-name", "m"]
    assert run("encode", str(tmp_path / "de.txt"), "-l", "de", "-w", work, *imported)[0] == 0
    code, output = run("index", "de", "-w", work, "--factory", factory)
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert code == 1 and len(errors) == 1 and "Traceback" not in output, output
    message = " ".join(output[output.index("error:") :].split())
    assert "cannot take vectors" in message and "give another --factory" in message, output
    assert "attempts" not in message, output
