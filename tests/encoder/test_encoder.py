"""SentenceEncoder (packed and padded) vs an independent Hugging Face reference; settings resolution."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModel, AutoTokenizer

from bitextmine.encoder.encoder import SentenceEncoder
from bitextmine.encoder.settings import EncoderSettings, resolve_settings
from bitextmine.errors import BitextmineError
from tests.helpers import TRAINING_TEXT, require_shared


def reference_embeddings(model_dir, sentences, *, prefix="", pooling="mean", max_length=512) -> np.ndarray:
    """The model card's recipe: padded batch, truncation, masked mean (or CLS), L2 normalization."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir, dtype=torch.float32).eval()
    batch = tokenizer(
        [prefix + s for s in sentences],
        padding=True,
        truncation=True,
        max_length=max_length,
        return_tensors="pt",
    )
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    if pooling == "cls":
        pooled = hidden[:, 0]
    else:
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1)
    return F.normalize(pooled, dim=-1).numpy()


def assert_cosines(got: np.ndarray, want: np.ndarray, floor: float = 0.9999) -> None:
    cos = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cos.min() >= floor, f"min cosine {cos.min():.6f} at row {cos.argmin()}"


SENTENCES = [*TRAINING_TEXT, "Hund", "a", "the the the the " * 30, "unknown ÿ words ✓ here"]


@pytest.mark.integration  # tiny models run both ways over the grid: seconds
@pytest.mark.parametrize("kind", ["bert", "xlm-roberta"])
@pytest.mark.parametrize("pooling", ["mean", "cls"])
@pytest.mark.parametrize("packed", [True, False])
def test_encoder_matches_reference_on_tiny_models(tiny_model_dir, kind, pooling, packed):
    model_dir = tiny_model_dir(kind)
    encoder = SentenceEncoder.load(
        str(model_dir), device="cpu", overrides={"pooling": pooling}, max_tokens=50, packed=packed
    )
    assert encoder.packed is packed
    encoded = encoder.encode(SENTENCES, window=5)
    want = reference_embeddings(model_dir, SENTENCES, pooling=pooling, max_length=encoder.max_length)
    assert_cosines(encoded.vectors, want)
    assert encoded.truncated == 1  # only the 120-word line exceeds the tiny models' length limit
    assert np.allclose(np.linalg.norm(encoded.vectors, axis=1), 1.0, atol=1e-5)


def test_encoder_keeps_input_order_and_handles_a_single_sentence(tiny_model_dir):
    encoder = SentenceEncoder.load(str(tiny_model_dir("bert")), device="cpu", max_tokens=30)
    both = encoder.encode(["a long sentence about the dog and the sofa", "Hund"]).vectors
    swapped = encoder.encode(["Hund", "a long sentence about the dog and the sofa"]).vectors
    assert np.allclose(both, swapped[::-1], atol=1e-6)
    assert encoder.encode(["Hund"]).vectors.shape == (1, 32)


@pytest.mark.integration
def test_packed_e5_matches_model_card_reference(e5_dir):
    lines = (require_shared("data/bucc-like/de-en") / "de-en.dev.de").read_text().splitlines()[:40]
    sentences = [line.split("\t", 1)[1] for line in lines]
    sentences += ["Ja.", "x", " ".join(sentences[:25])]  # very short ones and one beyond 512 tokens
    encoder = SentenceEncoder.load(str(e5_dir), device="cpu", max_tokens=2048)
    assert encoder.packed and encoder.settings.prefix == "query: " and encoder.settings.pooling == "mean"
    encoded = encoder.encode(sentences)
    assert encoded.truncated == 1
    assert_cosines(encoded.vectors, reference_embeddings(e5_dir, sentences, prefix="query: "))


def test_settings_from_sentence_transformers_files(e5_dir):
    assert resolve_settings(e5_dir) == EncoderSettings(pooling="mean", prefix="query: ", max_length=512)


def test_settings_precedence(tmp_path):
    (tmp_path / "modules.json").write_text(
        json.dumps(
            [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            ]
        )
    )
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    st = resolve_settings(tmp_path)
    assert (st.pooling, st.normalize, st.prefix) == ("cls", False, "")
    (tmp_path / "bitextmine.json").write_text(json.dumps({"encoder": {"pooling": "mean", "prefix": "q: "}}))
    assert resolve_settings(tmp_path) == EncoderSettings(pooling="mean", prefix="q: ", normalize=False)
    assert resolve_settings(tmp_path, {"pooling": "cls", "prefix": None}).pooling == "cls"
    assert resolve_settings(None) == EncoderSettings()


def test_bad_settings_and_models_are_one_line_errors(tmp_path):
    with pytest.raises(BitextmineError, match="unknown pooling 'median'"):
        resolve_settings(None, {"pooling": "median"})
    (tmp_path / "bitextmine.json").write_text("{oops")
    with pytest.raises(BitextmineError, match=r"bitextmine.json:1: invalid JSON"):
        resolve_settings(tmp_path)
    with pytest.raises(BitextmineError, match="no such model directory"):
        SentenceEncoder.load(str(tmp_path / "missing"), device="cpu")
    with pytest.raises(BitextmineError, match=r"no config\.json"):
        SentenceEncoder.load(str(tmp_path), device="cpu")


def test_a_weights_file_cut_short_is_a_one_line_error_naming_it(tiny_model_dir, tmp_path):
    model_dir = shutil.copytree(tiny_model_dir("bert"), tmp_path / "model")
    weights = model_dir / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(BitextmineError, match="cannot read the weights") as error:
        SentenceEncoder.load(str(model_dir), device="cpu")
    assert str(error.value).startswith(f"{weights}: ") and "\n" not in str(error.value)


def test_unavailable_device_and_unreachable_hub_id_are_clear_errors(monkeypatch):
    from bitextmine.encoder.encoder import pick_device

    with pytest.raises(BitextmineError, match="unknown device 'gpu0'"):
        pick_device("gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(BitextmineError, match="no CUDA device"):
            pick_device("cuda")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(BitextmineError, match="not loadable from the Hugging Face hub"):
        SentenceEncoder.load("bitextmine-test/no-such-model", device="cpu")


def test_hub_failures_are_one_line_errors_and_other_failures_are_not_disguised(monkeypatch):
    """`except Exception` turned every failure, bugs included, into 'not loadable from the hub'."""
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    from bitextmine.encoder.loading import resolve_model_dir

    def offline(repo_id: str) -> str:
        raise LocalEntryNotFoundError("Got: ConnectError: [Errno -2] Name or service not known")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(BitextmineError, match=r"^org/model: not a local directory and not loadable from the"):
        resolve_model_dir("org/model")

    def broken(repo_id: str) -> str:
        raise TypeError("a bug, not a missing model")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", broken)
    with pytest.raises(TypeError, match="a bug"):
        resolve_model_dir("org/model")
