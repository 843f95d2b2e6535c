"""A small BERT-style encoder trained from scratch, with a SentencePiece vocabulary from the training text.

EMS (Mao and Nakagawa) trains its encoder in one run with no pre-trained initialisation: a unigram
SentencePiece vocabulary learned on the parallel corpus (60k pieces in the paper) and a 6-layer
transformer encoder (1024 hidden, 16 heads, 4096 feed-forward in the paper). The defaults here are a
smaller version of the same recipe (16k pieces, 6 x 384 hidden, 6 heads, 1536 feed-forward).

The model is an `XLMRobertaModel`, so the packed forward, `AutoModel` and the rest of the project treat
it like any XLM-R checkpoint. The tokenizer is a plain `tokenizers` Unigram model holding the
SentencePiece pieces and scores, SentencePiece's own precompiled normalisation table and its whitespace
handling, with XLM-R's special tokens: it segments text exactly as the SentencePiece model does, and
`AutoTokenizer` reloads it from tokenizer.json without sentencepiece or a slow tokenizer class.
"""

from __future__ import annotations

import io
import random
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import sentencepiece as spm
import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from torch import nn
from transformers import PreTrainedTokenizerFast, XLMRobertaConfig, XLMRobertaModel

from bitextmine.errors import BitextmineError
from bitextmine.files import atomic_open

SPM_FILENAME = "sentencepiece.model"
BOS, PAD, EOS, UNK, MASK = "<s>", "<pad>", "</s>", "<unk>", "<mask>"
XLMR_SPECIALS = (BOS, PAD, EOS, UNK)  # ids 0..3, as in XLM-R; <mask> is the last id
MIN_VOCAB_SIZE = 16
# SentencePiece's unigram EM result depends (slightly) on its thread count: fixing it makes the
# vocabulary a function of the text and the seed only, whatever machine trains it.
SPM_THREADS = 16
_META = "▁"  # SentencePiece's whitespace symbol (U+2581)


# --- vocabulary -------------------------------------------------------------------------------------


def sample_sentences(texts: Iterable[str], max_sentences: int, seed: int) -> list[str]:
    """Non-empty stripped lines of `texts`, all of them or a seeded uniform sample (reservoir) of them."""
    if max_sentences < 1:
        raise BitextmineError(f"max_sentences must be at least 1, got {max_sentences}")
    rng = random.Random(seed)
    sample: list[str] = []
    seen = 0
    for text in texts:
        line = text.strip()
        if not line:
            continue
        seen += 1
        if len(sample) < max_sentences:
            sample.append(line)
        elif (slot := rng.randrange(seen)) < max_sentences:
            sample[slot] = line
    return sample


def train_sentencepiece(
    texts: Iterable[str],
    out_dir: Path,
    vocab_size: int = 16000,
    seed: int = 0,
    max_sentences: int = 2_000_000,
) -> Path:
    """Train a unigram SentencePiece model on `texts` (streamed; sample at most max_sentences,
    deterministically by seed) and return the .model path (``out_dir/sentencepiece.model``).

    The model's ids follow XLM-R (<s>=0, <pad>=1, </s>=2, <unk>=3), so they equal the ids of
    `build_tokenizer`'s tokenizer, which adds <mask> after the last piece. `vocab_size` counts those
    four specials but not <mask>. A corpus too small for `vocab_size` raises BitextmineError.
    """
    if vocab_size < MIN_VOCAB_SIZE:
        raise BitextmineError(f"vocabulary size must be at least {MIN_VOCAB_SIZE}, got {vocab_size}")
    sentences = sample_sentences(texts, max_sentences, seed)
    if not sentences:
        raise BitextmineError("no non-empty sentences to train the SentencePiece vocabulary on")
    proto = _train_unigram(sentences, vocab_size)
    path = Path(out_dir) / SPM_FILENAME
    with atomic_open(path, "wb") as fh:
        fh.write(proto)
    return path


def _train_unigram(sentences: list[str], vocab_size: int) -> bytes:
    writer = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=writer,
            model_type="unigram",
            vocab_size=vocab_size,
            bos_id=0,
            pad_id=1,
            eos_id=2,
            unk_id=3,
            bos_piece=BOS,
            pad_piece=PAD,
            eos_piece=EOS,
            unk_piece=UNK,
            input_sentence_size=0,  # sampling is ours (seeded); SentencePiece reads all it is given
            shuffle_input_sentence=False,
            num_threads=SPM_THREADS,
            minloglevel=2,
        )
    except RuntimeError as exc:
        raise BitextmineError(_training_failure(exc, vocab_size, len(sentences))) from None
    return writer.getvalue()


def _training_failure(exc: RuntimeError, vocab_size: int, sentences: int) -> str:
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    reason = re.sub(r"^.*?\]\s*", "", reason)  # drop "INTERNAL: src/x.cc(744) [check] " noise
    return (
        f"cannot train a {vocab_size}-piece SentencePiece vocabulary on {sentences} sentences ({reason}); "
        "use a smaller vocabulary size or more training text"
    )


# --- tokenizer --------------------------------------------------------------------------------------


def build_tokenizer(spm_model: Path, model_max_length: int = 512) -> PreTrainedTokenizerFast:
    """An HF fast tokenizer over `spm_model` with XLM-R conventions.

    Ids: <s>=0, <pad>=1, </s>=2, <unk>=3, then the model's ordinary pieces in model order, <mask> last;
    one sentence is ``<s> X </s>``, a pair ``<s> A </s></s> B </s>``. Segmentation equals
    SentencePiece's (for models with the default whitespace options and no byte fallback, as
    `train_sentencepiece` trains). `save_pretrained` writes tokenizer.json, which `AutoTokenizer` reloads.
    """
    proto = _read_model(Path(spm_model))
    processor = spm.SentencePieceProcessor(model_proto=proto)
    tokenizer = Tokenizer(models.Unigram(_xlmr_vocab(processor), unk_id=XLMR_SPECIALS.index(UNK)))
    charsmap = _precompiled_charsmap(proto)
    if charsmap:
        tokenizer.normalizer = normalizers.Precompiled(charsmap)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Metaspace(replacement=_META, prepend_scheme="always"),
        ]
    )
    tokenizer.decoder = decoders.Metaspace(replacement=_META, prepend_scheme="always")
    tokenizer.post_processor = _xlmr_template(tokenizer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        model_max_length=model_max_length,
        bos_token=BOS,
        eos_token=EOS,
        sep_token=EOS,
        cls_token=BOS,
        unk_token=UNK,
        pad_token=PAD,
        mask_token=AddedToken(MASK, lstrip=True, rstrip=False, normalized=False, special=True),
    )


def _read_model(path: Path) -> bytes:
    try:
        proto = path.read_bytes()
        spm.SentencePieceProcessor(model_proto=proto)
    except (OSError, RuntimeError) as exc:
        raise BitextmineError(f"{path}: not a readable SentencePiece model ({exc})") from None
    return proto


def _xlmr_vocab(processor: spm.SentencePieceProcessor) -> list[tuple[str, float]]:
    """(piece, score) in XLM-R id order: the four specials, the ordinary pieces, <mask>."""
    ordinary = [
        (processor.id_to_piece(i), processor.get_score(i))
        for i in range(processor.get_piece_size())
        if not (processor.is_control(i) or processor.is_unknown(i) or processor.is_unused(i))
    ]
    clash = {MASK, *XLMR_SPECIALS} & {piece for piece, _ in ordinary}
    if clash:
        raise BitextmineError(f"SentencePiece model has ordinary pieces named like specials: {sorted(clash)}")
    return [(s, 0.0) for s in XLMR_SPECIALS] + ordinary + [(MASK, 0.0)]


def _xlmr_template(tokenizer: Tokenizer) -> processors.TemplateProcessing:
    bos, eos = tokenizer.token_to_id(BOS), tokenizer.token_to_id(EOS)
    return processors.TemplateProcessing(
        single=f"{BOS} $A {EOS}",
        pair=f"{BOS} $A {EOS} {EOS} $B {EOS}",
        special_tokens=[(BOS, bos), (EOS, eos)],
    )


def _precompiled_charsmap(proto: bytes) -> bytes:
    """ModelProto.normalizer_spec.precompiled_charsmap (fields 3 then 2), read without protobuf."""
    spec = next((value for field, value in _proto_fields(proto) if field == 3), b"")
    return next((value for field, value in _proto_fields(spec) if field == 2), b"")


def _proto_fields(data: bytes) -> Iterator[tuple[int, bytes | int]]:
    """(field number, value) of a protobuf message; length-delimited values as bytes."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            size, pos = _varint(data, pos)
            value, pos = data[pos : pos + size], pos + size
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, pos = data[pos : pos + size], pos + size
        else:
            raise BitextmineError(f"SentencePiece model: unsupported protobuf wire type {wire}")
        yield field, value


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos


# --- model ------------------------------------------------------------------------------------------


def scratch_config(
    vocab_size: int,
    pad_token_id: int,
    *,
    layers: int = 6,
    hidden: int = 384,
    heads: int = 6,
    intermediate: int = 1536,
    max_positions: int = 514,
) -> XLMRobertaConfig:
    """XLM-R-shaped config (absolute positions after the padding id, one token type, eps 1e-5)."""
    _check_shape(layers, hidden, heads)
    if max_positions < pad_token_id + 3:
        raise BitextmineError(f"max_positions={max_positions} leaves no room for a sentence")
    return XLMRobertaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=intermediate,
        max_position_embeddings=max_positions,
        pad_token_id=pad_token_id,
        bos_token_id=0,
        eos_token_id=2,
        type_vocab_size=1,
        layer_norm_eps=1e-5,
        position_embedding_type="absolute",
    )


def _check_shape(layers: int, hidden: int, heads: int) -> None:
    if layers < 1 or heads < 1 or hidden % heads:
        raise BitextmineError(
            f"encoder shape: need at least one layer and a hidden size divisible by the heads "
            f"(layers={layers}, hidden={hidden}, heads={heads})"
        )


def build_scratch_model(
    texts: Iterable[str],
    out_dir: Path,
    *,
    vocab_size: int = 16000,
    layers: int = 6,
    hidden: int = 384,
    heads: int = 6,
    intermediate: int | None = None,
    max_positions: int = 514,
    seed: int = 0,
    max_sentences: int = 2_000_000,
) -> tuple[nn.Module, PreTrainedTokenizerFast]:
    """Train the vocabulary, build a randomly initialised XLMRobertaModel (no pooler) seeded by `seed`,
    save the tokenizer files (and the SentencePiece model) into out_dir, return (model, tokenizer).

    `intermediate` defaults to 4 x hidden. The model is left in training mode; the global torch RNG is
    not disturbed. Save the model into out_dir to make it a complete model directory.
    """
    _check_shape(layers, hidden, heads)  # before the (long) vocabulary training
    out_dir = Path(out_dir)
    spm_path = train_sentencepiece(texts, out_dir, vocab_size, seed, max_sentences)
    pad_offset = XLMR_SPECIALS.index(PAD) + 1  # XLM-R positions start after the padding id
    tokenizer = build_tokenizer(spm_path, model_max_length=max_positions - pad_offset)
    config = scratch_config(
        len(tokenizer),
        tokenizer.pad_token_id,
        layers=layers,
        hidden=hidden,
        heads=heads,
        intermediate=intermediate if intermediate is not None else 4 * hidden,
        max_positions=max_positions,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = XLMRobertaModel(config, add_pooling_layer=False)
    tokenizer.save_pretrained(out_dir)
    return model, tokenizer
