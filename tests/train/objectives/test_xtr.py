"""EMS's XTR objective: bag-of-tokens KL by hand, gradients, learning, special tokens."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from bitextmine.train.model import EncodedSide, TrainContext, TrainEncoder
from bitextmine.train.objectives.base import ObjectiveInputs
from bitextmine.train.objectives.xtr import CrossLingualTokenReconstruction, bag_kl
from tests.helpers import TRAINING_TEXT

LANGUAGES = ["en", "de", "fr"]
ENGLISH, GERMAN = TRAINING_TEXT[0::2], TRAINING_TEXT[1::2]


def build(tiny_model_dir, kind: str = "bert", seed: int = 0):
    directory = tiny_model_dir(kind)
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    encoder = TrainEncoder(AutoModel.from_pretrained(directory)).eval()
    specials = frozenset(tokenizer.all_special_ids)
    ctx = TrainContext(
        encoder, tokenizer.mask_token_id, specials, len(tokenizer), LANGUAGES, torch.Generator()
    )
    xtr = CrossLingualTokenReconstruction(encoder.config.hidden_size, len(tokenizer), LANGUAGES, specials)
    return tokenizer, encoder, xtr, ctx


def encode(encoder: TrainEncoder, tokenizer, texts: list[str], lang: str) -> EncodedSide:
    ids = [tokenizer(t)["input_ids"] for t in texts]
    stream = torch.tensor([i for s in ids for i in s])
    return encoder.encode(stream, [len(s) for s in ids], torch.full((len(texts),), LANGUAGES.index(lang)))


def pair(encoder, tokenizer, n: int = 4) -> tuple[EncodedSide, EncodedSide]:
    return encode(encoder, tokenizer, GERMAN[:n], "de"), encode(encoder, tokenizer, ENGLISH[:n], "en")


def hand_bag(tokenizer, text: str, vocab: int) -> np.ndarray:
    """p(w) = N_w / |S| over the sentence's tokens, without CLS/SEP."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    p = np.zeros(vocab)
    for token, count in Counter(ids).items():
        p[token] = count / len(ids)
    return p


def numpy_q(xtr: CrossLingualTokenReconstruction, vectors: np.ndarray, lang: int) -> np.ndarray:
    """Eq. 4 with numpy: softmax(W_emb swish(W_fc (u_la ⊕ u) + b_fc))."""
    weight = {k: v.detach().double().numpy() for k, v in xtr.state_dict().items()}
    joint = np.concatenate(
        [np.repeat(weight["language_embedding.weight"][lang][None], len(vectors), 0), vectors], 1
    )
    z = joint @ weight["fc.weight"].T + weight["fc.bias"]
    logits = (z / (1 + np.exp(-z))) @ weight["vocab.weight"].T
    e = np.exp(logits - logits.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def numpy_kl(p: np.ndarray, q: np.ndarray) -> float:
    support = p > 0
    return float((p[support] * (np.log(p[support]) - np.log(q[support]))).sum())


def test_loss_matches_numpy(tiny_model_dir):
    tokenizer, encoder, xtr, ctx = build(tiny_model_dir)
    with torch.no_grad():
        src, tgt = pair(encoder, tokenizer)
        out = xtr(ObjectiveInputs(src, tgt, ctx))
    vocab = len(tokenizer)
    q_en = numpy_q(xtr, src.pooled.double().numpy(), LANGUAGES.index("en"))
    q_de = numpy_q(xtr, tgt.pooled.double().numpy(), LANGUAGES.index("de"))
    to_en = np.mean([numpy_kl(hand_bag(tokenizer, t, vocab), q_en[i]) for i, t in enumerate(ENGLISH[:4])])
    from_en = np.mean([numpy_kl(hand_bag(tokenizer, t, vocab), q_de[i]) for i, t in enumerate(GERMAN[:4])])
    assert out.terms["xtr_to_en"] == pytest.approx(to_en, rel=1e-5)
    assert out.terms["xtr_from_en"] == pytest.approx(from_en, rel=1e-5)
    assert float(out.loss) == pytest.approx((to_en + from_en) / 2, rel=1e-5)


def test_known_weights_give_known_distribution(tiny_model_dir):
    """Zero weights: q is uniform, so KL = log|V| - H(p); a repeated token counts twice in p."""
    tokenizer, encoder, xtr, ctx = build(tiny_model_dir)
    with torch.no_grad():
        for parameter in xtr.parameters():
            parameter.zero_()
        src, tgt = pair(encoder, tokenizer, n=1)
        out = xtr(ObjectiveInputs(src, tgt, ctx))
    english = tokenizer(ENGLISH[0], add_special_tokens=False)["input_ids"]
    german = tokenizer(GERMAN[0], add_special_tokens=False)["input_ids"]
    assert max(Counter(english).values()) == 2  # "the dog sleeps on the sofa": 'the' twice

    def expected(ids: list[int]) -> float:
        p = np.array(list(Counter(ids).values())) / len(ids)
        return float(np.log(len(tokenizer)) + (p * np.log(p)).sum())

    assert out.terms["xtr_to_en"] == pytest.approx(expected(english), rel=1e-6)
    assert out.terms["xtr_from_en"] == pytest.approx(expected(german), rel=1e-6)


def test_kl_is_zero_when_prediction_matches_the_bag():
    ids = torch.tensor([2, 7, 9, 7, 3, 2, 5, 3])  # [CLS] 7 9 7 [SEP] | [CLS] 5 [SEP]
    p = torch.zeros(2, 12)
    p[0, 7], p[0, 9], p[1, 5] = 2 / 3, 1 / 3, 1.0
    logits = torch.log(p.clamp(min=1e-30))
    kl, present = bag_kl(logits, ids, [5, 3], frozenset({2, 3}))
    assert present.tolist() == [True, True]
    torch.testing.assert_close(kl, torch.zeros(2), atol=1e-6, rtol=0)


def test_gradients_reach_encoder_and_head(tiny_model_dir):
    tokenizer, encoder, xtr, ctx = build(tiny_model_dir)
    src, tgt = pair(encoder, tokenizer)
    xtr(ObjectiveInputs(src, tgt, ctx)).loss.backward()
    model = encoder.model
    reached = {
        "encoder first layer": model.encoder.layer[0].attention.self.query.weight,
        "encoder last layer": model.encoder.layer[-1].output.dense.weight,
        "word embeddings": model.embeddings.word_embeddings.weight,
        "fc": xtr.fc.weight,
        "vocabulary projection": xtr.vocab.weight,
    }
    for what, parameter in reached.items():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, what
    used = xtr.language_embedding.weight.grad.abs().sum(1)
    assert used[LANGUAGES.index("en")] > 0 and used[LANGUAGES.index("de")] > 0
    assert used[LANGUAGES.index("fr")] == 0


def test_optimizer_steps_lower_the_loss(tiny_model_dir):
    tokenizer, encoder, xtr, ctx = build(tiny_model_dir, "xlm-roberta")
    optimizer = torch.optim.AdamW([*encoder.parameters(), *xtr.parameters()], lr=3e-3)
    losses = []
    for _ in range(8):
        src, tgt = pair(encoder, tokenizer)
        loss = xtr(ObjectiveInputs(src, tgt, ctx)).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert all(b < a for a, b in itertools.pairwise(losses)), losses
    assert losses[-1] < 0.8 * losses[0], losses


@pytest.mark.parametrize("kind", ["bert", "xlm-roberta"])
def test_special_tokens_are_not_in_the_bag(tiny_model_dir, kind):
    tokenizer, encoder, _, ctx = build(tiny_model_dir, kind)
    texts = [ENGLISH[0], f"{ENGLISH[1]} {tokenizer.sep_token} {tokenizer.unk_token}"]
    with torch.no_grad():
        side = encode(encoder, tokenizer, texts, "en")
        logits = torch.randn(2, len(tokenizer))
        kl, _ = bag_kl(logits, side.input_ids, side.seqlens, ctx.special_ids)
        moved = logits.clone()
        moved[:, sorted(ctx.special_ids)] += (
            5.0  # the specials' probability only enters through q's normaliser
        )
        kl_moved, _ = bag_kl(moved, side.input_ids, side.seqlens, ctx.special_ids)
    q = torch.softmax(logits.double(), -1).numpy()
    for i, text in enumerate(texts):
        ids = [t for t in tokenizer(text, add_special_tokens=False)["input_ids"] if t not in ctx.special_ids]
        p = np.zeros(len(tokenizer))
        for token, count in Counter(ids).items():
            p[token] = count / len(ids)
        assert float(kl[i]) == pytest.approx(numpy_kl(p, q[i]), rel=1e-5)
    assert bool((kl_moved > kl).all())


def test_constructor_special_ids_are_excluded_too(tiny_model_dir):
    tokenizer, encoder, _, ctx = build(tiny_model_dir)
    the = tokenizer.convert_tokens_to_ids("the")
    torch.manual_seed(1)
    plain = CrossLingualTokenReconstruction(encoder.config.hidden_size, len(tokenizer), LANGUAGES)
    torch.manual_seed(1)
    without_the = CrossLingualTokenReconstruction(
        encoder.config.hidden_size, len(tokenizer), LANGUAGES, frozenset({the})
    )
    with torch.no_grad():
        src, tgt = pair(encoder, tokenizer, n=1)
        logits = plain.logits(src.pooled, tgt.langs)
        kl, _ = bag_kl(logits, tgt.input_ids, tgt.seqlens, ctx.special_ids | {the})
        out = without_the(ObjectiveInputs(src, tgt, ctx))
    assert out.terms["xtr_to_en"] == pytest.approx(float(kl[0]), rel=1e-6)


def test_sentence_without_tokens_is_skipped():
    logits = torch.randn(2, 10, requires_grad=True)
    ids = torch.tensor([2, 3, 2, 6, 3])  # first sentence is only [CLS] [SEP]
    kl, present = bag_kl(logits, ids, [2, 3], frozenset({2, 3}))
    assert present.tolist() == [False, True]
    assert float(kl[0].detach()) == 0.0


def test_languages_must_match_the_context(tiny_model_dir):
    tokenizer, encoder, xtr, ctx = build(tiny_model_dir)
    ctx.languages = ["en", "fr", "de"]
    with torch.no_grad(), pytest.raises(ValueError, match="languages"):
        xtr(ObjectiveInputs(*pair(encoder, tokenizer, n=1), ctx))
