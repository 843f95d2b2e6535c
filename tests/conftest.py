"""Shared fixtures: the ../shared data and model (skip or fail when absent) and tiny random models."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

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


@pytest.fixture(autouse=True, scope="session")
def private_cache(tmp_path_factory) -> None:
    """Precision self-checks are recorded in a per-session cache, never in the user's ~/.cache."""
    os.environ["BITEXTMINE_CACHE"] = str(tmp_path_factory.mktemp("bitextmine-cache"))


@pytest.fixture(scope="session")
def e5_dir() -> Path:
    return require_shared("models/multilingual-e5-small-q4")


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


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Callable[[str], Path]:
    cache: dict[str, Path] = {}

    def make(kind: str) -> Path:
        if kind not in cache:
            cache[kind] = build_tiny_model(kind, tmp_path_factory.mktemp(f"tiny-{kind}"))
        return cache[kind]

    return make
