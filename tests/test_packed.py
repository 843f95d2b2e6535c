"""Packed block-diagonal forward vs the padded Hugging Face forward (the reference)."""

from __future__ import annotations

import importlib.util
import itertools
import random
import types

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModel

from bitextmine.encoder.attention import (
    BlockDiagonalSDPA,
    XFormersBlockDiagonal,
    checked_xformers,
    equal_length_runs,
    length_buckets,
    select_attention,
)
from bitextmine.encoder.batching import token_budget_batches
from bitextmine.encoder.packed import packed_positions, supports_packing
from bitextmine.errors import BitextmineError, BitextmineWarning
from tests.helpers import max_length, packed_hidden, padded_reference, random_sequences


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


def naive_block_attention(qkv: torch.Tensor, seqlens: list[int]) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v computed sentence by sentence with explicit matrix products."""
    outputs, start = [], 0
    for n in seqlens:
        q, k, v = qkv[start : start + n].double().unbind(1)  # [n, heads, dim] each
        scores = torch.einsum("qhd,khd->hqk", q, k) / q.shape[-1] ** 0.5
        outputs.append(torch.einsum("hqk,khd->qhd", scores.softmax(-1), v))
        start += n
    return torch.cat(outputs).float()


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


@pytest.mark.skipif(not torch.cuda.is_available(), reason="xFormers BlockDiagonalMask path needs CUDA")
def test_xformers_block_diagonal_matches_bucketed_sdpa():
    pytest.importorskip("xformers")
    problem = XFormersBlockDiagonal().probe(torch.device("cuda"), 32)
    if problem:
        pytest.skip(problem)
    backend = select_attention(torch.device("cuda"), 32)
    assert backend.name == "xformers"
    lengths = [1, 5, 17, 64, 3]
    qkv = torch.randn(sum(lengths), 3, 4, 32, device="cuda", dtype=torch.float16)
    got = backend(qkv, lengths, 0.0).float()
    want = BlockDiagonalSDPA()(qkv.float(), lengths, 0.0)
    assert torch.allclose(got, want, atol=2e-3)


def fake_fmha(kernel):
    """Stands in for xformers.ops.fmha: `kernel(q, k, v, seqlens)` is its memory_efficient_attention."""

    def attention(q, k, v, attn_bias, p):
        return kernel(q, k, v, attn_bias.seqlens)

    mask = types.SimpleNamespace(from_seqlens=lambda seqlens: types.SimpleNamespace(seqlens=seqlens))
    return types.SimpleNamespace(
        memory_efficient_attention=attention, attn_bias=types.SimpleNamespace(BlockDiagonalMask=mask)
    )


def _no_kernel(q, k, v, seqlens):
    raise NotImplementedError(
        "No operator found for `memory_efficient_attention_forward` with inputs:\n"
        f"     query       : shape={tuple(q.shape)} ({q.dtype})\n"
        "`cutlassF-pt` is not supported because:\n"
        "    xFormers wasn't build with CUDA support\n"
        "`fa2F@2.5.7-pt` is not supported because:\n"
        "    dtype=torch.float32 (supported: {torch.float16, torch.bfloat16})"
    )


def _wrong_architecture(q, k, v, seqlens):
    raise RuntimeError("CUDA error: no kernel image is available for execution on the device")


def _naive_kernel(q, k, v, seqlens):
    qkv = torch.stack([q[0], k[0], v[0]], dim=1)
    return naive_block_attention(qkv, list(seqlens)).to(q.dtype)[None]


def test_xformers_without_kernels_falls_back_to_sdpa_with_a_warning():
    backend = XFormersBlockDiagonal(fake_fmha(_no_kernel))
    with pytest.warns(
        BitextmineWarning, match=r"no float32 kernel here \(xFormers wasn.t build with CUDA support\)"
    ):
        chosen = checked_xformers(backend, torch.device("cpu"), head_dim=8, strict=False)
    assert chosen.name == "sdpa"
    with pytest.raises(BitextmineError, match=r"^attention backend xformers: xFormers has no float32 kernel"):
        checked_xformers(backend, torch.device("cpu"), head_dim=8, strict=True)
    built_for_other_gpus = XFormersBlockDiagonal(fake_fmha(_wrong_architecture))
    with pytest.warns(BitextmineWarning, match=r"\(CUDA error: no kernel image is available"):
        assert checked_xformers(built_for_other_gpus, torch.device("cpu"), 8, strict=False).name == "sdpa"


def test_xformers_with_kernels_is_kept_and_attends_within_sentences():
    backend = XFormersBlockDiagonal(fake_fmha(_naive_kernel))
    assert checked_xformers(backend, torch.device("cpu"), head_dim=8, strict=True) is backend
    qkv, seqlens = torch.randn(12, 3, 2, 8), [5, 1, 6]
    assert torch.allclose(backend(qkv, seqlens, 0.0), BlockDiagonalSDPA()(qkv, seqlens, 0.0), atol=1e-5)


def test_select_attention_uses_sdpa_off_cuda_and_names_a_missing_xformers():
    assert select_attention(torch.device("cpu"), 8).name == "sdpa"
    if importlib.util.find_spec("xformers") is None:
        assert select_attention(torch.device("cuda"), 8).name == "sdpa"
        with pytest.raises(BitextmineError, match="xFormers is not installed"):
            select_attention(torch.device("cuda"), 8, "xformers")
