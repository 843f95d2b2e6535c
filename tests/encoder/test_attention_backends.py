"""Choosing the packed attention on CUDA (PyTorch varlen, xFormers, SDPA) and the GPU backends' plumbing,
checked on the CPU through stand-ins for their kernels; test_cuda.py beside it runs the real ones on a GPU."""

from __future__ import annotations

import importlib.util
import json
import types

import pytest
import torch

from bitextmine.encoder import attention
from bitextmine.encoder.attention import (
    BlockDiagonalSDPA,
    TorchVarlen,
    XFormersBlockDiagonal,
    select_attention,
)
from bitextmine.encoder.encoder import SentenceEncoder
from bitextmine.encoder.packed import PackedBertForward
from bitextmine.errors import BitextmineError, BitextmineWarning
from tests.helpers import naive_block_attention, padded_reference, random_sequences

CUDA = torch.device("cuda")  # never touched: the probes are stood in for


def fake_varlen(calls: list | None = None):
    """Stands in for torch.nn.attention.varlen.varlen_attn: attention within each [cu[i], cu[i+1])."""

    def varlen_attn(q, k, v, cu_seq_q, cu_seq_k, max_q, max_k):
        assert cu_seq_q.dtype == torch.int32 and cu_seq_q is cu_seq_k and max_q == max_k
        seqlens = cu_seq_q.diff().tolist()
        assert max_q == max(seqlens) and int(cu_seq_q[-1]) == q.shape[0]
        if calls is not None:
            calls.append(seqlens)
        return naive_block_attention(torch.stack([q, k, v], dim=1), seqlens).to(q.dtype)

    return varlen_attn


def test_varlen_attends_within_sentences_in_bf16():
    torch.manual_seed(0)
    qkv, seqlens = torch.randn(24, 3, 2, 8), [5, 1, 6, 12]
    calls = []
    got = TorchVarlen(fake_varlen(calls))(qkv.bfloat16(), seqlens, 0.0)
    assert calls == [seqlens] and got.dtype == torch.bfloat16
    assert torch.allclose(got.float(), BlockDiagonalSDPA()(qkv, seqlens, 0.0), atol=3e-2)


@pytest.mark.parametrize(("dtype", "dropout"), [(torch.float32, 0.0), (torch.bfloat16, 0.1)])
def test_varlen_leaves_what_its_kernel_cannot_run_to_sdpa(dtype, dropout):
    """Flash attention has no fp32 kernel, and varlen_attn runs no dropout."""
    calls = []
    qkv, seqlens = torch.randn(12, 3, 2, 8, dtype=dtype), [5, 1, 6]
    TorchVarlen(fake_varlen(calls))(qkv, seqlens, dropout)
    assert calls == []


def test_packed_forward_through_varlen_equals_the_padded_forward(tiny_model_dir):
    from transformers import AutoModel

    model = AutoModel.from_pretrained(tiny_model_dir("xlm-roberta")).eval()
    sequences = random_sequences(model, [9, 1, 33, 2, 17], seed=4)
    want = padded_reference(model, sequences)
    calls = []
    stream = torch.tensor([t for s in sequences for t in s])
    with torch.no_grad():
        got = PackedBertForward(model.bfloat16(), TorchVarlen(fake_varlen(calls)))(
            stream, list(map(len, sequences))
        )
    assert len(calls) == model.config.num_hidden_layers
    for out, ref in zip(got.float().split(list(map(len, sequences))), want, strict=True):
        assert torch.nn.functional.cosine_similarity(out.flatten(), ref.flatten(), dim=0) > 0.999


def test_the_real_varlen_probe_says_why_it_cannot_run_here():
    problem = TorchVarlen().probe(torch.device("cpu"), 8)
    assert problem.startswith("PyTorch's varlen attention has no bfloat16 kernel here (Could not run")
    assert "\n" not in problem


@pytest.fixture
def stand_ins(monkeypatch):
    """Installs stand-in probes: `set(varlen=..., xformers=...)` gives each a problem (None: it runs),
    or `missing` for a library that is not installed."""

    def install(varlen: str | None = None, xformers: str | None = None) -> None:
        for backend, problem in ((TorchVarlen, varlen), (XFormersBlockDiagonal, xformers)):
            if problem == "missing":
                monkeypatch.setattr(backend, "__init__", _not_installed)
            else:
                monkeypatch.setattr(backend, "__init__", lambda self: None)
                monkeypatch.setattr(backend, "probe", lambda self, device, head_dim, p=problem: p)

    return install


def _not_installed(self):
    raise ImportError("stand-in: not installed")


@pytest.mark.parametrize(
    ("dtype", "dropout", "chosen"),
    [(torch.bfloat16, 0.0, "varlen"), (torch.bfloat16, 0.1, "xformers"), (torch.float32, 0.0, "xformers")],
)
def test_auto_prefers_varlen_for_bf16_without_dropout_then_xformers(stand_ins, dtype, dropout, chosen):
    stand_ins()
    assert select_attention(CUDA, 8, dtype=dtype, dropout=dropout).name == chosen
    assert select_attention(torch.device("cpu"), 8, dtype=dtype, dropout=dropout).name == "sdpa"


def test_a_backend_that_cannot_run_is_passed_over_with_a_warning(stand_ins):
    stand_ins(varlen="no kernel A", xformers="no kernel B")
    with pytest.warns(
        BitextmineWarning, match=r"^no kernel A; no kernel B; using PyTorch SDPA attention instead$"
    ):
        assert select_attention(CUDA, 8, dtype=torch.bfloat16).name == "sdpa"
    stand_ins(varlen="no kernel A", xformers=None)
    with pytest.warns(BitextmineWarning, match=r"^no kernel A; using xformers attention instead$"):
        assert select_attention(CUDA, 8, dtype=torch.bfloat16).name == "xformers"


def test_a_missing_library_is_silent_unless_asked_for(stand_ins, recwarn):
    stand_ins(varlen="missing", xformers="missing")
    assert select_attention(CUDA, 8, dtype=torch.bfloat16).name == "sdpa"
    assert not recwarn.list
    with pytest.raises(BitextmineError, match=r"^attention backend xformers: xFormers is not installed$"):
        select_attention(CUDA, 8, "xformers")
    with pytest.raises(
        BitextmineError, match=r"^attention backend varlen: this torch has no torch.nn.attention"
    ):
        select_attention(CUDA, 8, "varlen")


def test_a_backend_asked_for_by_name_that_cannot_run_is_an_error(stand_ins):
    stand_ins(varlen="no kernel A", xformers="no kernel B")
    with pytest.raises(BitextmineError, match=r"^attention backend varlen: no kernel A$"):
        select_attention(CUDA, 8, "varlen", dtype=torch.float32)  # asked for: tried even for fp32
    with pytest.raises(
        BitextmineError, match=r"^unknown attention backend 'flash': choose from auto, varlen"
    ):
        select_attention(CUDA, 8, "flash")


def test_the_encoder_picks_its_attention_for_the_precision_it_runs(tiny_model_dir, stand_ins, monkeypatch):
    """bf16 encoding gets varlen; the attention of an fp32 encoder is chosen for fp32."""
    chosen = []
    real = attention.select_attention
    monkeypatch.setattr(
        "bitextmine.encoder.encoder.select_attention",
        lambda device, head_dim, prefer, dtype: chosen.append(dtype) or real(torch.device("cpu"), head_dim),
    )
    for precision in ("fp32", "bf16"):
        SentenceEncoder.load(str(tiny_model_dir("bert")), device="cpu", precision=precision)
    assert chosen == [torch.float32, torch.bfloat16]


# xFormers' kernels stood in for -------------------------------------------------------------------


@pytest.mark.skipif(not torch.cuda.is_available(), reason="xFormers BlockDiagonalMask path needs CUDA")
def test_xformers_block_diagonal_matches_bucketed_sdpa():
    pytest.importorskip("xformers")
    problem = XFormersBlockDiagonal().probe(CUDA, 32)
    if problem:
        pytest.skip(problem)
    lengths = [1, 5, 17, 64, 3]
    qkv = torch.randn(sum(lengths), 3, 4, 32, device="cuda", dtype=torch.float16)
    got = select_attention(CUDA, 32, "xformers")(qkv, lengths, 0.0).float()
    want = BlockDiagonalSDPA()(qkv.float(), lengths, 0.0)
    assert torch.allclose(got, want, atol=2e-3)


def fake_fmha(kernel):
    """Stands in for xformers.ops.fmha: `kernel(q, k, v, seqlens)` is its memory_efficient_attention."""

    def memory_efficient_attention(q, k, v, attn_bias, p):
        return kernel(q, k, v, attn_bias.seqlens)

    mask = types.SimpleNamespace(from_seqlens=lambda seqlens: types.SimpleNamespace(seqlens=seqlens))
    return types.SimpleNamespace(
        memory_efficient_attention=memory_efficient_attention,
        attn_bias=types.SimpleNamespace(BlockDiagonalMask=mask),
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


def test_the_xformers_probe_names_the_first_reason():
    cpu = torch.device("cpu")
    problem = XFormersBlockDiagonal(fake_fmha(_no_kernel)).probe(cpu, 8)
    assert problem == "xFormers has no float32 kernel here (xFormers wasn't build with CUDA support)"
    problem = XFormersBlockDiagonal(fake_fmha(_wrong_architecture)).probe(cpu, 8)
    assert problem.endswith("(CUDA error: no kernel image is available for execution on the device)")


def test_xformers_with_kernels_attends_within_sentences():
    backend = XFormersBlockDiagonal(fake_fmha(_naive_kernel))
    assert backend.probe(torch.device("cpu"), 8) is None
    qkv, seqlens = torch.randn(12, 3, 2, 8), [5, 1, 6]
    assert torch.allclose(backend(qkv, seqlens, 0.0), BlockDiagonalSDPA()(qkv, seqlens, 0.0), atol=1e-5)


def test_select_attention_uses_sdpa_off_cuda_and_names_a_missing_xformers():
    assert select_attention(torch.device("cpu"), 8).name == "sdpa"
    if importlib.util.find_spec("xformers") is None:
        assert select_attention(CUDA, 8).name == "sdpa"
        with pytest.raises(BitextmineError, match="xFormers is not installed"):
            select_attention(CUDA, 8, "xformers")


@pytest.mark.integration
def test_encode_records_the_forward_of_each_shard_and_refuses_a_backend_that_cannot_run(
    tmp_path, tiny_model_dir
):
    from typer.testing import CliRunner

    from bitextmine.cli import app

    source = tmp_path / "de.txt"
    source.write_text("Der Hund schläft.\nDie Katze auch.\nEin dritter Satz.\n")
    work = tmp_path / "work"
    args = ["encode", str(source), "-l", "de", "--model", str(tiny_model_dir("bert")), "--workdir", str(work)]
    args += ["--precision", "fp32", "--shard-size", "2", "--json", str(tmp_path / "summary.json")]
    result = CliRunner().invoke(app, [*args, "--attention", "sdpa"])
    assert result.exit_code == 0, result.output
    records = sorted((work / "emb" / "de").glob("shard-*.json"))
    assert [json.loads(r.read_text())["forward"] for r in records] == ["packed (sdpa)"] * 2
    assert json.loads((tmp_path / "summary.json").read_text())["forwards"] == ["packed (sdpa)"]
    assert "packed (sdpa)" in result.output
    result = CliRunner().invoke(app, [*args, "--attention", "varlen", "--overwrite"])
    assert result.exit_code == 1
    (line,) = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert line.startswith(
        "error: attention backend varlen: PyTorch's varlen attention has no bfloat16 kernel"
    )
