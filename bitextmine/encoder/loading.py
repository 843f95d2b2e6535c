"""Load a model and tokenizer from a local Hugging Face dir or a hub id, and fingerprint them."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from tokenizers import normalizers
from transformers import AutoModel, AutoTokenizer, PreTrainedTokenizerBase
from transformers.utils import logging as transformers_logging

from bitextmine.encoder.settings import EncoderSettings
from bitextmine.errors import BitextmineError

_FINGERPRINT_FILES = ("config.json", "tokenizer.json", "sentencepiece.bpe.model", "spiece.model", "vocab.txt")
_WEIGHT_PATTERNS = ("*.safetensors", "*.bin")
# What a tokenizer is loaded from; with none of them, transformers builds an empty one that maps every word
# to [UNK] without a word of warning.
_TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "*.model", "source.spm")


@dataclass
class LoadedModel:
    model: torch.nn.Module
    tokenizer: PreTrainedTokenizerBase
    model_dir: Path
    name: str


def resolve_model_dir(name_or_path: str) -> Path:
    """A local directory as it is; anything else is taken as a hub id and fetched to the HF cache."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path.resolve()
    if path.exists():
        raise BitextmineError(f"{name_or_path}: not a model directory")
    if name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1:
        raise BitextmineError(f"{name_or_path}: no such model directory")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name_or_path))
    except (OSError, ValueError) as exc:  # the hub's errors (no network, unknown or gated repo, bad id)
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BitextmineError(
            f"{name_or_path}: not a local directory and not loadable from the Hugging Face hub ({reason})"
        ) from None


def load_model(name_or_path: str, device: torch.device) -> LoadedModel:
    """Model in float32 eval mode on `device`, with its tokenizer."""
    model_dir = resolve_model_dir(name_or_path)
    if not (model_dir / "config.json").is_file():
        raise BitextmineError(f"{model_dir}: no config.json, not a Hugging Face model directory")
    if not any(any(model_dir.glob(pattern)) for pattern in _TOKENIZER_FILES):
        raise BitextmineError(
            f"{model_dir}: no tokenizer (tokenizer.json, vocab.txt, vocab.json or a sentencepiece .model)"
        )
    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModel.from_pretrained(model_dir, dtype=torch.float32)
    except (OSError, ValueError) as exc:
        raise BitextmineError(f"{model_dir}: cannot load model ({str(exc).splitlines()[0]})") from None
    except SafetensorError as exc:
        damaged = next((f for f in sorted(model_dir.glob("*.safetensors")) if not _readable(f)), model_dir)
        raise unreadable_weights(damaged, exc) from None
    return LoadedModel(model.to(device).eval(), tokenizer, model_dir, name_or_path)


def unreadable_weights(path: Path, exc: SafetensorError) -> BitextmineError:
    """The one-line error for a safetensors file that cannot be read (cut short by a download, damaged)."""
    return BitextmineError(f"{path}: cannot read the weights ({exc}); download the model again")


def _readable(path: Path) -> bool:
    """Whether a safetensors file's header can be read: it lists every tensor's bytes, so a file cut short
    fails here."""
    try:
        with safe_open(path, framework="pt"):
            return True
    except SafetensorError:
        return False


def lowercase_inputs(tokenizer: PreTrainedTokenizerBase, model_dir: Path) -> None:
    """Lowercase every text before it is tokenized, as sentence-transformers 6 runs `do_lower_case`: a
    Lowercase normalizer ahead of the tokenizer's own, so that prompts, both forwards and training all
    see it, and a tokenizer saved from here keeps it. Adds it once: calling this again changes nothing."""
    if not tokenizer.is_fast:
        raise BitextmineError(f"{model_dir}: do_lower_case needs a fast tokenizer (tokenizer.json)")
    backend = tokenizer.backend_tokenizer
    current = backend.normalizer
    steps = list(current) if isinstance(current, normalizers.Sequence) else [current]
    if any(isinstance(step, normalizers.Lowercase) for step in steps):
        return
    backend.normalizer = normalizers.Sequence(
        [normalizers.Lowercase(), *(step for step in steps if step is not None)]
    )


def model_fingerprint(model_dir: Path, settings: EncoderSettings, head: bytes = b"") -> str:
    """Hash of the config, tokenizer, weights, encoder settings and `head` (what the sentence head adds
    to the settings, see head.py): equal fingerprints, equal vectors."""
    digest = hashlib.sha256()
    digest.update(json.dumps(settings.as_dict(), sort_keys=True).encode())
    digest.update(head)
    files = [model_dir / name for name in _FINGERPRINT_FILES]
    files += sorted(p for pattern in _WEIGHT_PATTERNS for p in model_dir.glob(pattern))
    for path in files:
        if path.is_file():
            digest.update(path.name.encode())
            with open(path, "rb") as fh:
                while chunk := fh.read(1 << 22):
                    digest.update(chunk)
    return digest.hexdigest()[:16]
