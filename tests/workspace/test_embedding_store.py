"""Embedding store: float16 shards, manifests, completion checks, refusal to mix models."""

from __future__ import annotations

import numpy as np
import pytest

from bitextmine.errors import BitextmineError
from bitextmine.workspace.embeddings import EmbeddingShard, EmbeddingStore, ModelIdentity

MODEL_A = ModelIdentity("model-a", "aaaa", 4, {"pooling": "mean"})
MODEL_B = ModelIdentity("model-b", "bbbb", 8, {"pooling": "cls"})


def unit_rows(n: int, dim: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def shard(name: str, rows: int, sha: str = "t0") -> EmbeddingShard:
    return EmbeddingShard(name, rows, sha, tokens=rows * 3, truncated=0)


def test_written_shards_survive_a_reopen_as_float16_memmaps(tmp_path):
    store = EmbeddingStore(tmp_path, "de")
    store.bind(MODEL_A)
    vectors = unit_rows(5, 4)
    store.write_shard(shard("shard-00000", 5), vectors)

    reopened = EmbeddingStore(tmp_path, "de")
    assert reopened.manifest.model == MODEL_A
    loaded = reopened.load("shard-00000")
    assert isinstance(loaded, np.memmap) and loaded.dtype == np.float16
    assert np.allclose(loaded, vectors, atol=1e-3)
    assert reopened.is_complete("shard-00000", "t0", 5)
    assert not reopened.is_complete("shard-00000", "other-text", 5)
    assert not reopened.is_complete("shard-00000", "t0", 6)
    assert not reopened.is_complete("shard-00001", "t0", 5)
    (tmp_path / "shard-00000.npy").unlink()
    assert not reopened.is_complete("shard-00000", "t0", 5)
    assert not list(tmp_path.glob(".*tmp*"))


def test_another_model_is_refused_unless_overwriting(tmp_path):
    store = EmbeddingStore(tmp_path, "de")
    store.bind(MODEL_A)
    store.write_shard(shard("shard-00000", 2), unit_rows(2, 4))
    with pytest.raises(BitextmineError) as info:
        EmbeddingStore(tmp_path, "de").bind(MODEL_B)
    message = str(info.value)
    assert "model-a" in message and "aaaa" in message and "model-b" in message and "dim 8" in message
    assert "\n" not in message

    store = EmbeddingStore(tmp_path, "de")
    store.bind(MODEL_B, overwrite=True)
    assert store.shard_names() == [] and not (tmp_path / "shard-00000.npy").exists()
    with pytest.raises(ValueError, match="expected"):
        store.write_shard(shard("shard-00000", 2), unit_rows(2, 4))  # dim 4 into a dim-8 store


def test_rebinding_the_same_model_keeps_finished_shards(tmp_path):
    store = EmbeddingStore(tmp_path, "de")
    store.bind(MODEL_A)
    store.write_shard(shard("shard-00000", 2), unit_rows(2, 4))
    again = EmbeddingStore(tmp_path, "de")
    again.bind(MODEL_A)
    assert again.is_complete("shard-00000", "t0", 2)


def test_retain_drops_shards_of_a_shrunken_corpus(tmp_path):
    store = EmbeddingStore(tmp_path, "de")
    store.bind(MODEL_A)
    for i in range(3):
        store.write_shard(shard(f"shard-{i:05d}", 2), unit_rows(2, 4, seed=i))
    store.retain({"shard-00000"})
    assert store.shard_names() == ["shard-00000"]
    assert sorted(p.name for p in tmp_path.glob("shard-*.npy")) == ["shard-00000.npy"]


def test_unbound_store_says_to_encode_first(tmp_path):
    with pytest.raises(BitextmineError, match="run bitextmine encode"):
        EmbeddingStore(tmp_path, "fr").shard_names()


def test_sharded_vectors_take_and_blocks_match_the_concatenated_shards(tmp_path):
    store = EmbeddingStore(tmp_path, "de")
    store.bind(MODEL_A)
    parts = [unit_rows(n, 4, seed=n) for n in (3, 5, 2)]
    for i, part in enumerate(parts):
        store.write_shard(shard(f"shard-{i:05d}", len(part)), part)
    whole = np.concatenate(parts).astype(np.float16).astype(np.float32)
    vectors = EmbeddingStore(tmp_path, "de").vectors()
    assert len(vectors) == 10 and vectors.dim == 4
    rows = np.array([9, 0, 3, 3, 7, 2])
    assert np.array_equal(vectors.take(rows), whole[rows])
    blocks = list(vectors.blocks(4))
    assert [start for start, _ in blocks] == [0, 4, 8]
    assert np.array_equal(np.concatenate([b for _, b in blocks]), whole)


def mapped_kb(paths: set[str]) -> int:
    """Resident kB of this process's mappings of `paths` (from /proc/self/smaps)."""
    total, current = 0, None
    with open("/proc/self/smaps") as fh:
        for line in fh:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
                current = fields[5] if len(fields) > 5 else None
            elif fields[0] == "Rss:" and current in paths:
                total += int(fields[1])
    return total


@pytest.mark.integration  # a large mapped file: seconds
def test_a_random_gather_leaves_few_file_pages_mapped(tmp_path, monkeypatch):
    store = EmbeddingStore(tmp_path, "de")
    store.bind(ModelIdentity("model-a", "aaaa", 384, {"pooling": "mean"}))
    parts = [unit_rows(40_000, 384, seed=s) for s in (1, 2)]  # 2 x 30 MB of float16
    for i, part in enumerate(parts):
        store.write_shard(shard(f"shard-{i:05d}", len(part)), part)
    whole = np.concatenate(parts).astype(np.float16).astype(np.float32)
    paths = {str(tmp_path / f"shard-{i:05d}.npy") for i in range(2)}
    rows = np.random.default_rng(0).integers(0, len(whole), size=20_000)

    vectors = EmbeddingStore(tmp_path, "de").vectors()
    monkeypatch.setattr(
        "bitextmine.workspace.embeddings.TAKE_CHUNK_ROWS", len(rows)
    )  # one chunk, no drop inside
    assert np.array_equal(vectors.take(rows), whole[rows])
    assert mapped_kb(paths) > 30_000  # fault-around mapped most of the 60 MB
    vectors.drop_pages()
    assert mapped_kb(paths) < 1_000

    monkeypatch.setattr("bitextmine.workspace.embeddings.TAKE_CHUNK_ROWS", 256)
    assert np.array_equal(vectors.take(rows), whole[rows])
    assert mapped_kb(paths) < 1_000  # each chunk's pages were unmapped after it


def test_shards_are_in_row_order_past_99999(tmp_path):
    """Names sorted as text put shard-100000 before shard-10001 and misaligned vectors and texts."""
    store = EmbeddingStore(tmp_path, "de")
    store.bind(MODEL_A)
    for name, fill in (("shard-100000", 2.0), ("shard-99999", 1.0), ("shard-100001", 3.0)):
        store.write_shard(shard(name, 1), np.full((1, 4), fill, np.float32))
    store = EmbeddingStore(tmp_path, "de")
    assert store.shard_names() == ["shard-99999", "shard-100000", "shard-100001"]
    assert store.vectors().take(np.arange(3))[:, 0].tolist() == [1.0, 2.0, 3.0]
