"""From-scratch encoder: SentencePiece vocabulary, the HF tokenizer over it, and the tiny XLM-R model."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
import torch
from transformers import AutoModel, AutoTokenizer

from bitextmine.encoder.encoder import SentenceEncoder
from bitextmine.encoder.packed import supports_packing
from bitextmine.errors import BitextmineError
from bitextmine.train.scratch import (
    SPM_FILENAME,
    build_scratch_model,
    build_tokenizer,
    sample_sentences,
    scratch_config,
    train_sentencepiece,
)
from tests.helpers import require_shared

VOCAB = 800
TINY = dict(layers=2, hidden=32, heads=4, intermediate=64)
EDGE_CASES = [
    "  leading,   inner   and trailing spaces  ",
    "tab\tand\nnewline",
    "ｆｕｌｌ ｗｉｄｔｈ ① and ligature ﬁ",
    "unseen scripts: 中文字 Ελληνικά кириллица",
    "no\u00a0break and zero\u200bwidth",
    "Straße – „Anführungszeichen“ … 3.1 %",
]


def _lines(path: Path, start: int, stop: int) -> list[str]:
    with open(path, encoding="utf-8") as fh:
        return fh.read().splitlines()[start:stop]


@pytest.fixture(scope="module")
def news() -> Path:
    return require_shared("data/parallel/de-en")


@pytest.fixture(scope="module")
def train_text(news) -> list[str]:
    return _lines(news / "news.de", 0, 500) + _lines(news / "news.en", 0, 500)


@pytest.fixture(scope="module")
def held_out(news) -> list[str]:
    """50 sentences the vocabulary never saw."""
    return _lines(news / "news.de", 1000, 1025) + _lines(news / "news.en", 1000, 1025)


@pytest.fixture(scope="module")
def spm_path(train_text, tmp_path_factory) -> Path:
    return train_sentencepiece(train_text, tmp_path_factory.mktemp("spm"), vocab_size=VOCAB, seed=0)


@pytest.fixture(scope="module")
def scratch_dir(train_text, tmp_path_factory) -> Path:
    """build_scratch_model's output with the model saved next to the tokenizer files."""
    out = tmp_path_factory.mktemp("scratch")
    model, _ = build_scratch_model(train_text, out, vocab_size=VOCAB, seed=0, **TINY)
    model.save_pretrained(out)
    return out


def _spm_pieces(path: Path, text: str) -> list[str]:
    return spm.SentencePieceProcessor(model_file=str(path)).encode(text, out_type=str)


# --- vocabulary -------------------------------------------------------------------------------------


def test_sample_keeps_everything_under_the_cap_in_order():
    assert sample_sentences(["b", "  ", "a\n", "", " c "], 10, seed=3) == ["b", "a", "c"]


def test_sample_is_seeded_and_capped():
    texts = [f"sentence {i}" for i in range(1000)]
    first = sample_sentences(iter(texts), 50, seed=0)
    assert len(first) == 50 and len(set(first)) == 50 and set(first) <= set(texts)
    assert sample_sentences(iter(texts), 50, seed=0) == first
    assert sample_sentences(iter(texts), 50, seed=1) != first


@pytest.mark.integration  # a vocabulary or model built and run: seconds
def test_vocabulary_is_deterministic(train_text, spm_path, tmp_path):
    again = train_sentencepiece(iter(train_text), tmp_path / "again", vocab_size=VOCAB, seed=0)
    assert spm_path.name == SPM_FILENAME
    assert again.read_bytes() == spm_path.read_bytes()


@pytest.mark.integration  # a vocabulary or model built and run: seconds
def test_sampled_vocabulary_depends_on_the_seed_only(train_text, tmp_path):
    def pieces(seed: int, name: str) -> list[str]:
        path = train_sentencepiece(train_text, tmp_path / name, vocab_size=400, seed=seed, max_sentences=300)
        processor = spm.SentencePieceProcessor(model_file=str(path))
        return [processor.id_to_piece(i) for i in range(processor.get_piece_size())]

    assert pieces(7, "a") == pieces(7, "b")
    assert pieces(7, "a") != pieces(8, "c")


@pytest.mark.integration  # a tokenizer trained: seconds
def test_sentencepiece_ids_follow_xlmr(spm_path):
    processor = spm.SentencePieceProcessor(model_file=str(spm_path))
    assert processor.get_piece_size() == VOCAB
    assert [processor.id_to_piece(i) for i in range(4)] == ["<s>", "<pad>", "</s>", "<unk>"]


def test_too_small_corpus_is_a_clear_error(train_text, tmp_path):
    with pytest.raises(BitextmineError, match=r"cannot train a 800-piece .* on 3 sentences.*<= \d+"):
        train_sentencepiece(train_text[:3], tmp_path, vocab_size=800)
    with pytest.raises(BitextmineError, match="no non-empty sentences"):
        train_sentencepiece(["", "   "], tmp_path)
    with pytest.raises(BitextmineError, match="vocabulary size"):
        train_sentencepiece(train_text, tmp_path, vocab_size=4)
    assert not (tmp_path / SPM_FILENAME).exists()


# --- tokenizer --------------------------------------------------------------------------------------


def test_tokenizer_segments_like_sentencepiece(spm_path, held_out):
    tokenizer = build_tokenizer(spm_path)
    processor = spm.SentencePieceProcessor(model_file=str(spm_path))
    assert len(held_out) == 50
    for text in held_out + EDGE_CASES:
        encoding = tokenizer(text, add_special_tokens=False)
        assert encoding.tokens() == processor.encode(text, out_type=str), text
        # train_sentencepiece lays the model out like XLM-R, so even the ids agree
        assert encoding.input_ids == processor.encode(text), text


def test_special_ids_and_template(spm_path, held_out):
    tokenizer = build_tokenizer(spm_path)
    assert (tokenizer.bos_token_id, tokenizer.pad_token_id, tokenizer.eos_token_id) == (0, 1, 2)
    assert (tokenizer.unk_token_id, tokenizer.mask_token_id) == (3, VOCAB)
    assert (tokenizer.cls_token_id, tokenizer.sep_token_id) == (0, 2)
    assert len(tokenizer) == VOCAB + 1
    text = held_out[0]
    ids = tokenizer(text).input_ids
    assert ids[0] == 0 and ids[-1] == 2 and ids[1:-1] == tokenizer(text, add_special_tokens=False).input_ids
    first, second = (tokenizer(t, add_special_tokens=False).input_ids for t in held_out[:2])
    assert tokenizer(held_out[0], held_out[1]).input_ids == [0, *first, 2, 2, *second, 2]
    assert tokenizer("unseen 中").input_ids[-2] == 3  # unknown character -> <unk>
    assert tokenizer.decode(tokenizer(held_out[1]).input_ids, skip_special_tokens=True) == held_out[1]
    assert tokenizer("x <mask> y").input_ids.count(VOCAB) == 1


@pytest.mark.integration  # a tokenizer trained: seconds
def test_tokenizer_over_a_default_layout_model(train_text, held_out, tmp_path):
    """SentencePiece's own default ids (<unk>=0, <s>=1, </s>=2, no <pad>) are remapped to XLM-R's."""
    writer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(train_text), model_writer=writer, vocab_size=500, num_threads=1, minloglevel=2
    )
    path = tmp_path / "default.model"
    path.write_bytes(writer.getvalue())
    tokenizer = build_tokenizer(path)
    assert tokenizer.convert_ids_to_tokens([0, 1, 2, 3, len(tokenizer) - 1]) == [
        "<s>",
        "<pad>",
        "</s>",
        "<unk>",
        "<mask>",
    ]
    assert len(tokenizer) == 500 + 2  # <pad> and <mask> are new
    for text in held_out[:10] + EDGE_CASES:
        assert tokenizer(text, add_special_tokens=False).tokens() == _spm_pieces(path, text), text


def test_unreadable_model_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.model"
    bad.write_bytes(b"not a model")
    with pytest.raises(BitextmineError, match="not a readable SentencePiece model"):
        build_tokenizer(bad)
    with pytest.raises(BitextmineError, match="not a readable SentencePiece model"):
        build_tokenizer(tmp_path / "missing.model")


# --- model ------------------------------------------------------------------------------------------


def test_config_shape():
    config = scratch_config(801, 1, **TINY)
    assert config.model_type == "xlm-roberta"
    assert (config.vocab_size, config.pad_token_id, config.max_position_embeddings) == (801, 1, 514)
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == (2, 32, 4)
    assert config.intermediate_size == 64
    default = scratch_config(16001, 1)
    assert (default.num_hidden_layers, default.hidden_size, default.num_attention_heads) == (6, 384, 6)
    assert default.intermediate_size == 1536
    with pytest.raises(BitextmineError, match="divisible"):
        scratch_config(801, 1, hidden=30, heads=4)


def test_bad_shape_fails_before_vocabulary_training(tmp_path):
    with pytest.raises(BitextmineError, match="divisible"):
        build_scratch_model(["never read"], tmp_path, hidden=30, heads=4)
    assert not any(tmp_path.iterdir())


@pytest.mark.integration  # a tokenizer trained: seconds
def test_scratch_dir_files(scratch_dir):
    names = {p.name for p in scratch_dir.iterdir()}
    assert {"tokenizer.json", "tokenizer_config.json", "config.json", SPM_FILENAME} <= names


@pytest.mark.integration  # a vocabulary or model built and run: seconds
def test_model_is_seeded_and_leaves_global_rng_alone(train_text, tmp_path):
    small = train_text[::4]  # a quicker vocabulary; the model init is what this test is about
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    first, tokenizer = build_scratch_model(small, tmp_path / "a", vocab_size=400, seed=5, **TINY)
    assert torch.equal(torch.rand(3), expected_next)
    second, _ = build_scratch_model(small, tmp_path / "b", vocab_size=400, seed=5, **TINY)
    other, _ = build_scratch_model(small, tmp_path / "c", vocab_size=400, seed=6, **TINY)
    a, b, c = first.state_dict(), second.state_dict(), other.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["embeddings.word_embeddings.weight"], c["embeddings.word_embeddings.weight"])
    assert first.config.vocab_size == len(tokenizer) and first.pooler is None
    assert tokenizer.model_max_length == 512


@pytest.mark.integration  # a vocabulary or model built and run: seconds
def test_round_trip_gives_identical_outputs(train_text, held_out, tmp_path):
    model, tokenizer = build_scratch_model(train_text[::2], tmp_path, vocab_size=500, seed=0, **TINY)
    model.save_pretrained(tmp_path)
    reloaded_model = AutoModel.from_pretrained(tmp_path).eval()
    reloaded_tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    for text in held_out + EDGE_CASES:
        assert reloaded_tokenizer(text).input_ids == tokenizer(text).input_ids, text
    assert reloaded_tokenizer.mask_token_id == tokenizer.mask_token_id
    assert reloaded_tokenizer.pad_token_id == 1
    batch = tokenizer(held_out[:8], padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = model.eval()(**batch).last_hidden_state
        actual = reloaded_model(**reloaded_tokenizer(held_out[:8], padding=True, return_tensors="pt"))
    assert torch.equal(actual.last_hidden_state, expected)


def test_supports_packing(scratch_dir):
    assert supports_packing(AutoModel.from_pretrained(scratch_dir))


@pytest.mark.integration  # a vocabulary or model built and run: seconds
def test_sentence_encoder_packed_equals_padded(scratch_dir, held_out):
    sentences = held_out[:6] + EDGE_CASES[:2]
    packed = SentenceEncoder.load(str(scratch_dir), device="cpu")
    padded = SentenceEncoder.load(str(scratch_dir), device="cpu", packed=False)
    assert packed.mode.startswith("packed") and padded.mode == "padded"
    a, b = packed.encode(sentences).vectors, padded.encode(sentences).vectors
    assert a.shape == (len(sentences), 32)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-5)
    assert (a * b).sum(axis=1).min() > 0.9999
