"""Packed block-diagonal forward vs the padded Hugging Face forward (the reference)."""

from __future__ import annotations

import itertools
import random

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModel

from bitextmine.encoder.attention import (
    BlockDiagonalSDPA,
    equal_length_runs,
    length_buckets,
)
from bitextmine.encoder.batching import token_budget_batches
from bitextmine.encoder.packed import packed_positions, supports_packing
from tests.helpers import max_length, naive_block_attention, packed_hidden, padded_reference, random_sequences


@pytest.mark.parametrize("kind", ["bert", "xlm-roberta"])
@pytest.mark.parametrize(
    "lengths",
    [[1], [7], "max", [1, 1, 3, 17, 2, 9, 40, 41, 5, 1], [1, 1, 4, 4, 4, 9, 9, 30], "mixed-with-max"],
    ids=["one-token", "batch-of-one", "at-max-length", "varied", "sorted", "varied-with-max"],
)
def test_packed_equals_padded_tiny_models(tiny_model_dir, kind, lengths):
    model = AutoModel.from_pretrained(tiny_model_dir(kind)).eval()
    top = max_length(model)
    if lengths == "max":
        lengths = [top]
    elif lengths == "mixed-with-max":
        lengths = [top, 1, top - 1, 12, top, 2]
    sequences = random_sequences(model, lengths, seed=len(lengths))
    for got, want in zip(packed_hidden(model, sequences), padded_reference(model, sequences), strict=True):
        assert got.shape == want.shape
        assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()
        cos = F.cosine_similarity(got.mean(0), want.mean(0), dim=0)
        assert cos >= 0.9999


@pytest.mark.parametrize(
    "seqlens",
    [[3, 3, 3, 5, 5, 9], [1, 1, 1, 1], [7, 2, 30, 1, 12, 13, 2], [40]],
    ids=["sorted-runs", "one-token-runs", "unsorted-buckets", "single"],
)
def test_block_diagonal_sdpa_matches_naive_attention(seqlens):
    torch.manual_seed(0)
    qkv = torch.randn(sum(seqlens), 3, 4, 8)
    uses_runs = 2 * len(equal_length_runs(seqlens)) <= len(seqlens)
    assert uses_runs == (seqlens in ([3, 3, 3, 5, 5, 9], [1, 1, 1, 1]))
    got = BlockDiagonalSDPA()(qkv, seqlens, 0.0)
    assert torch.allclose(got, naive_block_attention(qkv, seqlens), atol=1e-5)


def test_positions_restart_per_sentence():
    assert packed_positions([3, 1, 2], offset=0, device=torch.device("cpu")).tolist() == [0, 1, 2, 0, 0, 1]
    assert packed_positions([2, 2], offset=2, device=torch.device("cpu")).tolist() == [2, 3, 2, 3]


def test_length_buckets_bound_the_ratio_and_cover_everything():
    rng = random.Random(3)
    lengths = [rng.randint(1, 300) for _ in range(500)]
    buckets = length_buckets(lengths, ratio=1.25)
    assert sorted(i for b in buckets for i in b) == list(range(500))
    for bucket in buckets:
        sizes = [lengths[i] for i in bucket]
        assert max(sizes) <= 1.25 * min(sizes)
    padded_cost = sum(len(b) * max(lengths[i] for i in b) ** 2 for b in buckets)
    assert padded_cost <= 1.25**2 * sum(n * n for n in lengths)
    assert padded_cost < sum(lengths) ** 2 / 50  # far from the packed length squared


def test_token_budget_batches_cover_each_input_once_within_budget():
    rng = random.Random(5)
    lengths = [rng.randint(1, 120) for _ in range(1000)] + [500]  # one longer than the budget
    batches = list(token_budget_batches(lengths, max_tokens=400, window=128))
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for batch in batches:
        assert len(batch) == 1 or sum(lengths[i] for i in batch) <= 400
        assert all(lengths[a] <= lengths[b] for a, b in itertools.pairwise(batch))
    assert [1000] in batches


def test_supports_packing_rejects_other_architectures(tiny_model_dir):
    model = AutoModel.from_pretrained(tiny_model_dir("bert"))
    assert supports_packing(model)
    model.config.position_embedding_type = "relative_key"
    assert not supports_packing(model)
