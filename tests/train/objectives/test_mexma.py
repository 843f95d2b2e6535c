"""MEXMA objective: KoLeo/MSE by hand, masking, unmasking CE vs a padded HF reference, gradients, training."""

from __future__ import annotations

import dataclasses
import importlib.util
import math

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModel, AutoTokenizer

from bitextmine.train.model import EncodedSide, TrainContext, TrainEncoder
from bitextmine.train.objectives.base import ObjectiveInputs
from bitextmine.train.objectives.mexma import Mexma, koleo, mask_tokens, mse_alignment, with_sentence_vector
from bitextmine.train.objectives.settings import ContrastiveSettings, MexmaSettings
from tests.helpers import TRAINING_TEXT

GERMAN = TRAINING_TEXT[1::2]
ENGLISH = TRAINING_TEXT[0::2]


def setup(tiny_model_dir, kind: str = "bert", seed: int = 0):
    directory = tiny_model_dir(kind)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    torch.manual_seed(seed)
    encoder = TrainEncoder(AutoModel.from_pretrained(directory))
    ctx = TrainContext(
        encoder=encoder,
        mask_token_id=tokenizer.mask_token_id,
        special_ids=frozenset(tokenizer.all_special_ids),
        vocab_size=len(tokenizer),
        languages=["de", "en"],
        generator=torch.Generator().manual_seed(seed),
    )
    return tokenizer, encoder, ctx


def packed(tokenizer, sentences: list[str]) -> tuple[torch.Tensor, list[int]]:
    ids = tokenizer(sentences)["input_ids"]
    return torch.tensor([t for s in ids for t in s]), [len(s) for s in ids]


def encode_pair(tokenizer, encoder) -> tuple[EncodedSide, EncodedSide]:
    src_ids, src_lens = packed(tokenizer, GERMAN)
    tgt_ids, tgt_lens = packed(tokenizer, ENGLISH)
    src = encoder.encode(src_ids, src_lens, torch.zeros(len(src_lens), dtype=torch.long))
    tgt = encoder.encode(tgt_ids, tgt_lens, torch.ones(len(tgt_lens), dtype=torch.long))
    return src, tgt


# --- pure terms ---------------------------------------------------------------------------------------


def test_koleo_by_hand():
    vectors = torch.tensor([[2.0, 0.0], [0.0, 3.0], [1.0, 1.0], [-1.0, 0.0]])
    # unit vectors at 0°, 90°, 45°, 180°; nearest neighbours: 45°, 45°, 0° (or 90°), 90°
    chord_45 = 2 * math.sin(math.radians(45) / 2)
    chord_90 = math.sqrt(2.0)
    expected = -(3 * math.log(chord_45) + math.log(chord_90)) / 4
    assert koleo(vectors).item() == pytest.approx(expected, abs=1e-5)
    # scale-free: the vectors are L2-normalised first
    assert koleo(vectors * 7).item() == pytest.approx(expected, abs=1e-5)


def test_koleo_gradient_spreads_close_vectors():
    vectors = torch.tensor([[1.0, 0.0], [1.0, 0.05], [0.0, 1.0]], requires_grad=True)
    koleo(vectors).backward()
    step = vectors.detach() - 0.1 * vectors.grad
    assert koleo(step) < koleo(vectors.detach())
    assert koleo(torch.ones(1, 3)).item() == 0.0  # no neighbour in a batch of one


def test_mse_by_hand():
    a = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    b = torch.tensor([[1.0, 0.0, 3.0], [1.0, -1.0, 0.0]])
    assert mse_alignment(a, b).item() == pytest.approx((4 + 1 + 1) / 6)


# --- masking ------------------------------------------------------------------------------------------


def _mask(ids, lens, seed, **kw):
    args = dict(ratio=0.4, mask_token_id=4, special_ids=frozenset({0, 1, 2, 3, 4}), vocab_size=50)
    args.update(kw)
    return mask_tokens(ids, lens, generator=torch.Generator().manual_seed(seed), **args)


def test_masking_ratio_specials_and_at_least_one():
    lens = [12, 7, 3, 2, 1, 27]
    sentences = [[2] + [5 + (7 * i + j) % 40 for j in range(n - 2)] + [3] for i, n in enumerate(lens[:4])]
    sentences += [[2], [2, *range(10, 35), 3]]
    ids = torch.tensor([t for s in sentences for t in s])
    corrupted, selected = _mask(ids, lens, seed=1, replace_prob=1.0, random_prob=0.0)
    special = torch.isin(ids, torch.arange(5))
    assert not selected[special].any()
    assert torch.equal(corrupted[special], ids[special])
    assert torch.equal(corrupted == 4, selected)  # pure masking: every selected token is [MASK]
    per_sentence = [int(s.sum()) for s in torch.split(selected, lens)]
    # 10 → 4, 5 → 2, 1 → 1 (at least one), 0 → 0, only-special → 0, 25 → 10
    assert per_sentence == [4, 2, 1, 0, 0, 10]


def test_masking_is_deterministic_and_80_10_10():
    ids = torch.arange(5, 45).repeat(50)
    lens = [40] * 50
    first = _mask(ids, lens, seed=3)
    again = _mask(ids, lens, seed=3)
    other = _mask(ids, lens, seed=4)
    assert all(torch.equal(x, y) for x, y in zip(first, again, strict=True))
    assert not torch.equal(first[1], other[1])
    corrupted, selected = first
    assert int(selected.sum()) == 50 * 16
    n = int(selected.sum())
    masked = int((corrupted[selected] == 4).sum())
    kept = int((corrupted[selected] == ids[selected]).sum())
    assert abs(masked / n - 0.8) < 0.05
    assert abs(kept / n - 0.1) < 0.04  # unchanged (plus the rare random draw of the same id)
    assert not torch.isin(corrupted, torch.arange(4)).any()  # random replacements are never special
    assert torch.equal(corrupted[~selected], ids[~selected])


def test_with_sentence_vector_replaces_cls_or_prepends():
    hidden = torch.arange(7.0)[:, None].repeat(1, 2)  # token t has state [t, t]
    vectors = torch.tensor([[-1.0, -1.0], [-2.0, -2.0]])
    stream, lens, sources = with_sentence_vector(hidden, [4, 3], torch.tensor([True, False]), vectors)
    assert lens == [4, 4]
    assert stream[:, 0].tolist() == [-1, 1, 2, 3, -2, 4, 5, 6]
    assert sources.tolist() == [-1, 1, 2, 3, -1, 4, 5, 6]


# --- unmasking loss against a padded Hugging Face reference ----------------------------------------------


def reference_unmasking(obj, encoder, ctx, side, other_vectors, masked_ids, selected) -> torch.Tensor:
    """Padded HF forward of the masked view, then each sentence [other vector, states[1:]] through the
    head layers called as plain HF layers, one sentence at a time; CE over all selected tokens."""
    lens = side.seqlens
    width = max(lens)
    real = torch.arange(width)[None, :] < torch.tensor(lens)[:, None]
    padded = torch.full((len(lens), width), encoder.config.pad_token_id)
    padded[real] = masked_ids
    states = encoder.model(input_ids=padded, attention_mask=real.long()).last_hidden_state
    weight = encoder.model.embeddings.word_embeddings.weight
    logits, targets = [], []
    for i, (n, ids, chosen) in enumerate(
        zip(lens, torch.split(side.input_ids, lens), torch.split(selected, lens), strict=True)
    ):
        x = torch.cat([other_vectors[i : i + 1], states[i, 1:n]])[None]
        for layer in obj.head:
            out = layer(x)
            x = out[0] if isinstance(out, tuple) else out
        logits.append(x[0, 1:][chosen[1:]] @ weight.T + obj.vocab_bias)
        targets.append(ids[1:][chosen[1:]])
    return F.cross_entropy(torch.cat(logits), torch.cat(targets))


@pytest.mark.integration  # training steps on a tiny model: seconds
@pytest.mark.parametrize("kind", ["bert", "xlm-roberta"])
def test_unmasking_matches_padded_reference(tiny_model_dir, kind):
    tokenizer, encoder, ctx = setup(tiny_model_dir, kind)
    encoder.eval()
    obj = Mexma(encoder.config, MexmaSettings(), head_layers=2, alpha=1.0, beta=0.0, gamma=0.0).eval()
    with torch.no_grad():
        src, tgt = encode_pair(tokenizer, encoder)
        state = ctx.generator.get_state()
        out = obj(ObjectiveInputs(src, tgt, ctx))
        replay = torch.Generator()
        replay.set_state(state)
        expected = {}
        for name, side, other in (("mlm_src", src, tgt), ("mlm_tgt", tgt, src)):
            masked_ids, selected = mask_tokens(
                side.input_ids,
                side.seqlens,
                ratio=0.4,
                mask_token_id=ctx.mask_token_id,
                special_ids=ctx.special_ids,
                vocab_size=ctx.vocab_size,
                generator=replay,
            )
            ref = reference_unmasking(obj, encoder, ctx, side, other.pooled, masked_ids, selected)
            expected[name] = ref.item()
    assert out.terms["mlm_src"] == pytest.approx(expected["mlm_src"], rel=1e-4)
    assert out.terms["mlm_tgt"] == pytest.approx(expected["mlm_tgt"], rel=1e-4)
    assert out.loss.item() == pytest.approx(expected["mlm_src"] + expected["mlm_tgt"], rel=1e-4)
    assert set(out.terms) == {"mlm_src", "mlm_tgt", "align", "koleo"}
    assert out.terms["align"] == pytest.approx(mse_alignment(src.pooled, tgt.pooled).item(), rel=1e-5)
    assert out.terms["koleo"] == pytest.approx((koleo(src.pooled) + koleo(tgt.pooled)).item(), rel=1e-5)


def test_weights_combine_terms(tiny_model_dir):
    tokenizer, encoder, ctx = setup(tiny_model_dir)
    encoder.eval()
    obj = Mexma(encoder.config, MexmaSettings(), head_layers=1, alpha=0.3, beta=2.0, gamma=0.7).eval()
    with torch.no_grad():
        out = obj(ObjectiveInputs(*encode_pair(tokenizer, encoder), ctx))
    t = out.terms
    expected = 0.3 * (t["mlm_src"] + t["mlm_tgt"]) + 2.0 * t["align"] + 0.7 * t["koleo"]
    assert out.loss.item() == pytest.approx(expected, rel=1e-5)


# --- token-level gradients --------------------------------------------------------------------------------


def _grads(module) -> list[torch.Tensor]:
    return [p.grad for p in module.parameters() if p.grad is not None and p.grad.abs().sum() > 0]


@pytest.mark.parametrize("token_gradients", [False, True])
def test_token_gradients_switch(tiny_model_dir, token_gradients):
    """MLM only (beta = gamma = 0), clean sentence vectors detached: the encoder is reached only by the
    masked view's token states and the tied projection, so it gets gradient exactly when token_gradients."""
    tokenizer, encoder, ctx = setup(tiny_model_dir)
    encoder.train()
    settings = MexmaSettings(token_gradients=token_gradients)
    obj = Mexma(encoder.config, settings, head_layers=1, alpha=1.0, beta=0.0, gamma=0.0)
    src, tgt = encode_pair(tokenizer, encoder)
    src = dataclasses.replace(src, pooled=src.pooled.detach())
    tgt = dataclasses.replace(tgt, pooled=tgt.pooled.detach())
    obj(ObjectiveInputs(src, tgt, ctx)).loss.backward()
    assert len(_grads(obj)) == len(list(obj.parameters()))  # the head always learns
    assert bool(_grads(encoder)) is token_gradients


def test_without_token_gradients_the_sentence_vectors_still_carry_the_unmasking(tiny_model_dir):
    """The paper's ablation keeps the gradient through the prepended (clean) sentence vectors."""
    tokenizer, encoder, ctx = setup(tiny_model_dir)
    obj = Mexma(
        encoder.config, MexmaSettings(token_gradients=False), head_layers=1, alpha=1.0, beta=0.0, gamma=0.0
    )
    obj(ObjectiveInputs(*encode_pair(tokenizer, encoder), ctx)).loss.backward()
    assert encoder.model.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0


# --- training ------------------------------------------------------------------------------------------


@pytest.mark.integration  # training steps on a tiny model: seconds
@pytest.mark.parametrize("alignment", ["mse", "contrastive"])
def test_a_few_steps_lower_the_loss(tiny_model_dir, alignment):
    if (
        alignment == "contrastive"
        and importlib.util.find_spec("bitextmine.train.objectives.contrastive") is None
    ):
        pytest.skip("bitextmine/train/objectives/contrastive.py (the §5.2 alignment) is not written yet")
    tokenizer, encoder, ctx = setup(tiny_model_dir, "xlm-roberta")
    encoder.eval()  # no dropout: the fixed batch and fixed masks give a deterministic loss
    settings = MexmaSettings(mexma_alignment=alignment)
    obj = Mexma(encoder.config, settings, head_layers=1, gamma=0.005 if alignment == "mse" else 0.0)
    optimizer = torch.optim.Adam([*encoder.parameters(), *obj.parameters()], lr=5e-3)
    losses = []
    for _ in range(12):
        ctx.generator.manual_seed(0)
        out = obj(ObjectiveInputs(*encode_pair(tokenizer, encoder), ctx))
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
        losses.append(out.loss.item())
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < 0.8 * losses[0]


@pytest.mark.integration  # training steps on a tiny model: seconds
def test_contrastive_alignment_term(tiny_model_dir):
    if importlib.util.find_spec("bitextmine.train.objectives.contrastive") is None:
        pytest.skip("bitextmine/train/objectives/contrastive.py (the §5.2 alignment) is not written yet")
    from bitextmine.train.objectives.contrastive import Contrastive

    tokenizer, encoder, ctx = setup(tiny_model_dir)
    encoder.eval()
    obj = Mexma(
        encoder.config,
        MexmaSettings(mexma_alignment="contrastive"),
        head_layers=1,
        alpha=0.0,
        beta=1.0,
        gamma=0.0,
    )
    with torch.no_grad():
        src, tgt = encode_pair(tokenizer, encoder)
        out = obj(ObjectiveInputs(src, tgt, ctx))
        plain = Contrastive(encoder.config.hidden_size, ContrastiveSettings())
        expected = plain(ObjectiveInputs(src, tgt, ctx)).loss.item()
    assert out.terms["align"] == pytest.approx(expected, rel=1e-5)
    assert out.loss.item() == pytest.approx(expected, rel=1e-5)


def test_rejects_unknown_alignment():
    with pytest.raises(ValueError, match="alignment"):
        MexmaSettings(mexma_alignment="cosine")
