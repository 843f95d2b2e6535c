"""The GPU paths against their CPU references: packed varlen and xFormers attention, bf16 encoding,
backward.

Skipped without CUDA (CI has none); run them on a GPU machine with `pytest tests/encoder/test_cuda.py`.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModel

from bitextmine.encoder.attention import (
    BlockDiagonalSDPA,
    TorchVarlen,
    XFormersBlockDiagonal,
    select_attention,
)
from bitextmine.encoder.encoder import SentenceEncoder
from bitextmine.encoder.packed import PackedBertForward, head_dim_of
from tests.helpers import max_length, packed_hidden, padded_reference, random_sequences

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
CUDA = torch.device("cuda")
SENTENCES = [
    "Der Hund schläft auf dem Sofa.",
    "The dog sleeps on the sofa.",
    "Prices rose sharply in the second quarter, analysts said on Tuesday.",
    "a",
]


@pytest.mark.parametrize("kind", ["bert", "xlm-roberta"])
def test_packed_on_cuda_equals_padded_forward(tiny_model_dir, kind):
    model = AutoModel.from_pretrained(tiny_model_dir(kind)).eval()
    top = max_length(model)
    sequences = random_sequences(model, [top, 1, 3, 17, 2, top - 1, 40, 41], seed=5)
    want = padded_reference(model, sequences)  # fp32 on the CPU
    model.to(CUDA)
    attention = select_attention(CUDA, head_dim_of(model.config))
    assert attention.name == ("xformers" if xformers_problem(head_dim_of(model.config)) is None else "sdpa")
    for got, ref in zip(packed_hidden(model, sequences, attention), want, strict=True):
        # TF32 matmuls on the GPU: close to, not bit-equal with, the CPU
        assert torch.allclose(got.cpu(), ref, atol=2e-3), (got.cpu() - ref).abs().max()


def test_xformers_backward_matches_sdpa(tiny_model_dir):
    model = AutoModel.from_pretrained(tiny_model_dir("xlm-roberta")).to(CUDA).train()
    problem = xformers_problem(head_dim_of(model.config))
    if problem:
        pytest.skip(problem)
    for module in model.modules():  # dropout off so that both backends see the same function
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    sequences = random_sequences(model, [9, 33, 2, 17], seed=2)
    stream = torch.tensor([t for s in sequences for t in s], device=CUDA)
    grads = []
    for attention in (select_attention(CUDA, head_dim_of(model.config), "xformers"), BlockDiagonalSDPA()):
        model.zero_grad()
        PackedBertForward(model, attention)(stream, [len(s) for s in sequences]).square().mean().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert F.cosine_similarity(grads[0], grads[1], dim=0) > 0.9999
    assert torch.allclose(grads[0], grads[1], atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_encoder_on_cuda_matches_cpu_fp32(tiny_model_dir, precision):
    reference = SentenceEncoder.load(str(tiny_model_dir("xlm-roberta")), device="cpu").encode(SENTENCES)
    encoder = SentenceEncoder.load(str(tiny_model_dir("xlm-roberta")), device="cuda", precision=precision)
    assert encoder.mode.startswith("packed") and encoder.precision == precision
    got = encoder.encode(SENTENCES)
    assert got.tokens == reference.tokens
    cosines = (got.vectors * reference.vectors).sum(1)
    assert cosines.min() > (0.9999 if precision == "fp32" else 0.99), cosines


def test_padded_encoder_on_cuda_matches_packed(tiny_model_dir):
    packed = SentenceEncoder.load(str(tiny_model_dir("bert")), device="cuda").encode(SENTENCES)
    padded = SentenceEncoder.load(str(tiny_model_dir("bert")), device="cuda", packed=False).encode(SENTENCES)
    assert (packed.vectors * padded.vectors).sum(1).min() > 0.9999


def test_varlen_forward_and_backward_match_sdpa_in_bf16(tiny_model_dir):
    model = AutoModel.from_pretrained(tiny_model_dir("xlm-roberta")).to(CUDA, torch.bfloat16).train()
    head_dim = head_dim_of(model.config)
    problem = TorchVarlen().probe(CUDA, head_dim)
    if problem:
        pytest.skip(problem)
    for module in model.modules():  # varlen runs no dropout: the same function for both backends
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    assert select_attention(CUDA, head_dim, dtype=torch.bfloat16).name == "varlen"
    sequences = random_sequences(model, [9, 33, 2, 17, 1], seed=3)
    stream = torch.tensor([t for s in sequences for t in s], device=CUDA)
    outputs, grads = [], []
    for attention in (TorchVarlen(), BlockDiagonalSDPA()):
        model.zero_grad()
        hidden = PackedBertForward(model, attention)(stream, [len(s) for s in sequences])
        hidden.float().square().mean().backward()
        outputs.append(hidden.detach().float().flatten())
        grads.append(torch.cat([p.grad.float().flatten() for p in model.parameters() if p.grad is not None]))
    assert F.cosine_similarity(outputs[0], outputs[1], dim=0) > 0.999
    assert F.cosine_similarity(grads[0], grads[1], dim=0) > 0.99


def test_bf16_encoder_on_cuda_uses_varlen_and_records_it(tiny_model_dir):
    encoder = SentenceEncoder.load(str(tiny_model_dir("bert")), device="cuda", precision="bf16")
    if TorchVarlen().probe(CUDA, head_dim_of(encoder.loaded.model.config)) is None:
        assert encoder.mode == "packed (varlen)"
    reference = SentenceEncoder.load(str(tiny_model_dir("bert")), device="cpu").encode(SENTENCES)
    assert (encoder.encode(SENTENCES).vectors * reference.vectors).sum(1).min() > 0.99


def xformers_problem(head_dim: int) -> str | None:
    """None when xFormers is installed and runs here, else why it does not."""
    try:
        return XFormersBlockDiagonal().probe(CUDA, head_dim)
    except ImportError:
        return "xFormers is not installed"
