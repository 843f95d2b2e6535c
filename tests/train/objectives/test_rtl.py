"""DAP's RTL objective: head layout and loss by hand, head initialisation, gradients, learning."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from bitextmine.train.model import EncodedSide, TrainContext, TrainEncoder
from bitextmine.train.objectives.base import ObjectiveInputs
from bitextmine.train.objectives.rtl import RepresentationTranslation
from bitextmine.train.objectives.settings import RtlSettings
from tests.helpers import TRAINING_TEXT

LANGUAGES = ["en", "de"]
ENGLISH, GERMAN = TRAINING_TEXT[0::2], TRAINING_TEXT[1::2]


def build(tiny_model_dir, kind: str, seed: int = 0):
    directory = tiny_model_dir(kind)
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    encoder = TrainEncoder(AutoModel.from_pretrained(directory)).eval()
    ctx = TrainContext(
        encoder=encoder,
        mask_token_id=tokenizer.mask_token_id,
        special_ids=frozenset(tokenizer.all_special_ids),
        vocab_size=len(tokenizer),
        languages=LANGUAGES,
        generator=torch.Generator().manual_seed(0),
    )
    return tokenizer, encoder, RepresentationTranslation(encoder.model, RtlSettings(rtl_layers=2)).eval(), ctx


def encode(encoder: TrainEncoder, tokenizer, texts: list[str], lang: str) -> EncodedSide:
    ids = [tokenizer(t)["input_ids"] for t in texts]
    stream = torch.tensor([i for s in ids for i in s])
    langs = torch.full((len(texts),), LANGUAGES.index(lang))
    return encoder.encode(stream, [len(s) for s in ids], langs)


def pair(encoder, tokenizer, n: int = 4) -> tuple[EncodedSide, EncodedSide]:
    return encode(encoder, tokenizer, GERMAN[:n], "de"), encode(encoder, tokenizer, ENGLISH[:n], "en")


def run_hf_layers(layers, hidden: torch.Tensor) -> torch.Tensor:
    hidden = hidden[None]
    for layer in layers:
        out = layer(hidden)
        hidden = out[0] if isinstance(out, tuple) else out
    return hidden[0]


def reference_logits(head, encoder, tokenizer, src: EncodedSide, i: int) -> torch.Tensor:
    """Eq. 4 for pair i with plain (unpacked) HF layers: source states but CLS, then [MASK] slots."""
    emb = encoder.model.embeddings
    start = sum(src.seqlens[:i])
    memory = src.hidden[start + 1 : start + src.seqlens[i]]
    english = tokenizer(ENGLISH[i])["input_ids"]
    positions = [p for p, t in enumerate(english) if t not in tokenizer.all_special_ids]
    offset = encoder.config.pad_token_id + 1 if encoder.config.model_type == "xlm-roberta" else 0
    slots = emb.LayerNorm(
        emb.word_embeddings.weight[tokenizer.mask_token_id]
        + emb.position_embeddings.weight[torch.tensor(positions) + offset]
        + emb.token_type_embeddings.weight[0]
    )
    out = run_hf_layers(head.layers, torch.cat([memory, slots]))
    return out[len(memory) :] @ head.vocab.weight.T


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


@pytest.mark.parametrize("kind", ["bert", "xlm-roberta"])
def test_loss_matches_hand_computation(tiny_model_dir, kind):
    tokenizer, encoder, head, ctx = build(tiny_model_dir, kind)
    with torch.no_grad():
        src, tgt = pair(encoder, tokenizer)
        logits, targets, owner = head.predict(src, tgt, ctx)
        loss = head(ObjectiveInputs(src, tgt, ctx)).loss
        expected_logits = [reference_logits(head, encoder, tokenizer, src, i) for i in range(4)]
    # hand-listed targets: each English sentence's tokens without CLS/SEP, in order
    hand = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in ENGLISH[:4]]
    assert targets.tolist() == [t for s in hand for t in s]
    assert owner.tolist() == [i for i, s in enumerate(hand) for _ in s]
    torch.testing.assert_close(logits, torch.cat(expected_logits), rtol=1e-4, atol=1e-4)
    logp = log_softmax(logits.double().numpy())
    start, per_sentence = 0, []
    for ids in hand:
        rows = logp[start : start + len(ids)]
        per_sentence.append(-rows[np.arange(len(ids)), ids].mean())
        start += len(ids)
    assert float(loss) == pytest.approx(np.mean(per_sentence), rel=1e-5)


def test_head_is_an_independent_copy_of_the_last_layers(tiny_model_dir):
    _, encoder, head, _ = build(tiny_model_dir, "bert")
    model = encoder.model
    assert len(head.layers) == 2
    for copied, original in zip(head.layers, model.encoder.layer[-2:], strict=True):
        ours, theirs = copied.state_dict(), original.state_dict()
        assert ours.keys() == theirs.keys()
        for key in ours:
            torch.testing.assert_close(ours[key], theirs[key], rtol=0, atol=0)
            assert ours[key].data_ptr() != theirs[key].data_ptr()
    torch.testing.assert_close(head.vocab.weight, model.get_input_embeddings().weight, rtol=0, atol=0)
    assert head.vocab.weight.data_ptr() != model.get_input_embeddings().weight.data_ptr()
    before = head.layers[0].attention.self.query.weight.detach().clone()
    with torch.no_grad():
        model.encoder.layer[-2].attention.self.query.weight.add_(1.0)
        model.get_input_embeddings().weight.add_(1.0)
    torch.testing.assert_close(head.layers[0].attention.self.query.weight, before, rtol=0, atol=0)
    assert not torch.equal(head.vocab.weight, model.get_input_embeddings().weight)


def test_gradients_reach_encoder_and_head(tiny_model_dir):
    tokenizer, encoder, head, ctx = build(tiny_model_dir, "bert")
    src, tgt = pair(encoder, tokenizer)
    head(ObjectiveInputs(src, tgt, ctx)).loss.backward()
    model = encoder.model
    reached = {
        "encoder first layer": model.encoder.layer[0].attention.self.query.weight,
        "encoder last layer": model.encoder.layer[-1].output.dense.weight,
        "position embeddings": model.embeddings.position_embeddings.weight,
        "head layers": head.layers[0].attention.self.key.weight,
        "head last layer": head.layers[-1].output.dense.weight,
        "vocabulary projection": head.vocab.weight,
    }
    for what, parameter in reached.items():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, what
    # the [MASK] slots are embedded by the encoder, so its [MASK] row learns too
    assert model.embeddings.word_embeddings.weight.grad[tokenizer.mask_token_id].abs().sum() > 0


def test_english_side_gets_no_gradient_through_its_states(tiny_model_dir):
    """Only the English ids and lengths are used: the English token states do not enter RTL."""
    tokenizer, encoder, head, ctx = build(tiny_model_dir, "bert")
    src, tgt = pair(encoder, tokenizer)
    tgt.hidden.retain_grad()
    head(ObjectiveInputs(src, tgt, ctx)).loss.backward()
    assert tgt.hidden.grad is None


def test_optimizer_steps_lower_the_loss(tiny_model_dir):
    tokenizer, encoder, head, ctx = build(tiny_model_dir, "xlm-roberta")
    optimizer = torch.optim.AdamW([*encoder.parameters(), *head.parameters()], lr=3e-3)
    losses = []
    for _ in range(8):
        src, tgt = pair(encoder, tokenizer)
        loss = head(ObjectiveInputs(src, tgt, ctx)).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert all(b < a for a, b in itertools.pairwise(losses)), losses
    assert losses[-1] < 0.9 * losses[0], losses


def test_special_tokens_are_neither_slots_nor_targets(tiny_model_dir):
    tokenizer, encoder, head, ctx = build(tiny_model_dir, "bert")
    english = [ENGLISH[0], f"{ENGLISH[1]} {tokenizer.sep_token} {ENGLISH[2]}"]
    with torch.no_grad():
        src = encode(encoder, tokenizer, GERMAN[:2], "de")
        tgt = encode(encoder, tokenizer, english, "en")
        logits, targets, owner = head.predict(src, tgt, ctx)
    assert not set(targets.tolist()) & ctx.special_ids
    content = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in english]
    assert targets.tolist() == [t for s in content for t in s if t not in ctx.special_ids]
    assert len(logits) == len(targets)
    assert torch.bincount(owner).tolist() == [len(content[0]), len(content[1]) - 1]


def test_source_cls_is_not_seen_by_the_head(tiny_model_dir):
    tokenizer, encoder, head, ctx = build(tiny_model_dir, "bert")
    with torch.no_grad():
        src, tgt = pair(encoder, tokenizer, n=2)
        logits, _, _ = head.predict(src, tgt, ctx)
        src.hidden[0] += 100.0  # the first sentence's CLS state
        src.hidden[src.seqlens[0]] -= 100.0  # the second's
        changed, _, _ = head.predict(src, tgt, ctx)
    torch.testing.assert_close(changed, logits, rtol=0, atol=0)


def test_pairs_do_not_see_each_other(tiny_model_dir):
    tokenizer, encoder, head, ctx = build(tiny_model_dir, "bert")
    with torch.no_grad():
        src, tgt = pair(encoder, tokenizer, n=2)
        logits, _, owner = head.predict(src, tgt, ctx)
        src.hidden[src.seqlens[0] + 1 :] += 1.0  # the second pair's source states
        changed, _, _ = head.predict(src, tgt, ctx)
    first = owner == 0
    torch.testing.assert_close(changed[first], logits[first], rtol=0, atol=1e-6)
    assert not torch.allclose(changed[~first], logits[~first])


def test_mismatched_batches_are_refused(tiny_model_dir):
    tokenizer, encoder, head, ctx = build(tiny_model_dir, "bert")
    with torch.no_grad(), pytest.raises(ValueError, match="source sentences"):
        head(
            ObjectiveInputs(
                encode(encoder, tokenizer, GERMAN[:2], "de"),
                encode(encoder, tokenizer, ENGLISH[:3], "en"),
                ctx,
            )
        )
