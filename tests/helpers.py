"""Helpers the test modules share (fixtures are in conftest.py): the ../shared folder, tiny random models,
the CLI run in-process, generated sentences, and the packed and padded forwards compared by the encoder
tests."""

from __future__ import annotations

import io
import os
import random
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
import zstandard
from typer.testing import CliRunner

if TYPE_CHECKING:
    import torch

REPO = Path(__file__).resolve().parents[1]


SHARED = Path(os.environ.get("BITEXTMINE_SHARED", REPO.parent / "shared"))


E5_DIR = SHARED / "models" / "multilingual-e5-small-q4"


TRAINING_TEXT = [
    "the dog sleeps on the sofa",
    "der Hund schläft auf dem Sofa",
    "a man rides a bicycle through the old town",
    "ein Mann fährt mit dem Fahrrad durch die Altstadt",
    "prices rose sharply in the second quarter",
    "die Preise stiegen im zweiten Quartal stark",
    "children play football in the park after school",
    "Kinder spielen nach der Schule Fußball im Park",
]


def require_shared(relative: str) -> Path:
    """Path under ../shared; skip when absent, fail instead when BITEXTMINE_REQUIRE_SHARED=1."""
    path = SHARED / relative
    if not path.exists():
        reason = f"{path} is absent (the shared data/models folder next to the repo)"
        if os.environ.get("BITEXTMINE_REQUIRE_SHARED") == "1":
            pytest.fail(f"BITEXTMINE_REQUIRE_SHARED=1 but {reason}")
        pytest.skip(reason)
    return path


def _tiny_tokenizer(kind: str):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    if kind == "bert":
        specials = {
            "pad_token": "[PAD]",
            "unk_token": "[UNK]",
            "cls_token": "[CLS]",
            "sep_token": "[SEP]",
            "mask_token": "[MASK]",
        }
        order = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        bos, eos = "[CLS]", "[SEP]"
    else:
        specials = {
            "bos_token": "<s>",
            "pad_token": "<pad>",
            "eos_token": "</s>",
            "unk_token": "<unk>",
            "cls_token": "<s>",
            "sep_token": "</s>",
            "mask_token": "<mask>",
        }
        order = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
        bos, eos = "<s>", "</s>"
    tok = Tokenizer(models.WordPiece(unk_token=specials["unk_token"]))
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(TRAINING_TEXT, trainers.WordPieceTrainer(vocab_size=300, special_tokens=order))
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}", special_tokens=[(bos, tok.token_to_id(bos)), (eos, tok.token_to_id(eos))]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=62, **specials)


def build_tiny_model(kind: str, directory: Path, seed: int = 0) -> Path:
    """A randomly initialised 2-layer BERT or XLM-R with a WordPiece vocabulary, saved to `directory`."""
    import torch
    from transformers import BertConfig, BertModel, XLMRobertaConfig, XLMRobertaModel

    torch.manual_seed(seed)
    tokenizer = _tiny_tokenizer(kind)
    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        pad_token_id=tokenizer.pad_token_id,
    )
    if kind == "bert":
        model = BertModel(BertConfig(max_position_embeddings=62, **common))
    else:
        model = XLMRobertaModel(XLMRobertaConfig(max_position_embeddings=64, **common))
    model.eval()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def run(*args: str) -> tuple[int, str]:
    """`bitextmine ARGS...` in this process: (exit code, output)."""
    from bitextmine.cli import app

    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def sentences(n: int, seed: int) -> list[str]:
    """n distinct made-up sentences over the training vocabulary."""
    rng = np.random.default_rng(seed)
    words = " ".join(TRAINING_TEXT).split()
    return [" ".join(rng.choice(words, size=rng.integers(4, 12))) + f" n{seed}x{i}" for i in range(n)]


def read_mined(path: Path) -> list[list[str]]:
    """The fields of every line of a mined .tsv.zst file."""
    with open(path, "rb") as fh:
        text = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8").read()
    return [line.split("\t") for line in text.splitlines()]


def padded_reference(model, sequences: list[list[int]]) -> list[torch.Tensor]:
    """Hidden states of each sequence from the plain HF forward over a right-padded batch."""
    import torch

    width = max(len(s) for s in sequences)
    pad = model.config.pad_token_id
    ids = torch.tensor([s + [pad] * (width - len(s)) for s in sequences])
    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in sequences])
    with torch.no_grad():
        hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
    return [hidden[i, : len(s)] for i, s in enumerate(sequences)]


def random_sequences(model, lengths: list[int], seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    vocab = model.config.vocab_size
    pad = model.config.pad_token_id
    return [[rng.choice([t for t in range(5, vocab) if t != pad]) for _ in range(n)] for n in lengths]


def packed_hidden(model, sequences: list[list[int]], attention=None) -> list[torch.Tensor]:
    """Hidden states of each sequence from the packed forward (SDPA unless `attention` is given), on the
    model's device."""
    import torch

    from bitextmine.encoder.attention import BlockDiagonalSDPA
    from bitextmine.encoder.packed import PackedBertForward

    forward = PackedBertForward(model, attention or BlockDiagonalSDPA())
    stream = torch.tensor([t for s in sequences for t in s], device=next(model.parameters()).device)
    with torch.no_grad():
        hidden = forward(stream, [len(s) for s in sequences])
    return list(torch.split(hidden, [len(s) for s in sequences]))


def max_length(model) -> int:
    offset = model.config.pad_token_id + 1 if model.config.model_type == "xlm-roberta" else 0
    return model.config.max_position_embeddings - offset
