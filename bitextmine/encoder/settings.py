"""How a model turns a sentence into a vector: pooling, prefix, max length, normalization, lowercasing.

Resolution order for each field: an explicit override (CLI flag), then the model dir's
``bitextmine.json``, then the sentence-transformers files (``modules.json``, the Pooling module's
``config.json``, ``sentence_bert_config.json``, ``config_sentence_transformers.json``), then built-in
defaults. What else a sentence-transformers pipeline runs (Dense layers, prompt tokens left out of the
pooling) is the head's (head.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from bitextmine.encoder.st_files import POOLING_MODES, pooling_config, st_modules
from bitextmine.errors import BitextmineError
from bitextmine.files import read_json

BITEXTMINE_CONFIG = "bitextmine.json"
# Tokenizers with no length limit of their own say so with a huge model_max_length.
_NO_TOKENIZER_LIMIT = 1 << 24


@dataclass(frozen=True)
class EncoderSettings:
    pooling: str = "mean"
    prefix: str = ""
    max_length: int = 512
    normalize: bool = True
    lowercase: bool = False  # sentence-transformers' do_lower_case: texts lowercased before tokenizing

    def __post_init__(self) -> None:
        if self.pooling not in POOLING_MODES:
            choices = ", ".join(POOLING_MODES)
            raise BitextmineError(f"unknown pooling {self.pooling!r}; choose one of {choices}")
        if self.max_length < 2:
            raise BitextmineError(f"max length must be at least 2 tokens, got {self.max_length}")

    def as_dict(self) -> dict[str, Any]:
        """The settings (what fingerprints hash); `lowercase` only when set, so that the models it does
        not concern keep the fingerprints they had before it existed."""
        values = asdict(self)
        if not self.lowercase:
            del values["lowercase"]
        return values


def resolve_settings(model_dir: Path | None, overrides: dict[str, Any] | None = None) -> EncoderSettings:
    """Merge built-in defaults < sentence-transformers files < bitextmine.json < overrides."""
    values: dict[str, Any] = {}
    if model_dir is not None:
        values.update(_from_sentence_transformers(model_dir))
        values.update(_from_bitextmine_json(model_dir))
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    known = {f.name for f in fields(EncoderSettings)}
    return EncoderSettings(**{k: v for k, v in values.items() if k in known})


def trained_by_bitextmine(model_dir: Path | None) -> bool:
    """Whether `bitextmine train` made the model dir (its bitextmine.json records the training)."""
    path = None if model_dir is None else model_dir / BITEXTMINE_CONFIG
    return path is not None and path.is_file() and "training" in read_json(path)


def _from_bitextmine_json(model_dir: Path) -> dict[str, Any]:
    path = model_dir / BITEXTMINE_CONFIG
    return read_json(path).get("encoder", {}) if path.is_file() else {}


def _from_sentence_transformers(model_dir: Path) -> dict[str, Any]:
    modules = st_modules(model_dir)
    if not modules:
        return {}
    values: dict[str, Any] = {
        "pooling": pooling_config(modules[1]).mode,
        "normalize": modules[-1].kind == "Normalize",
    }
    if (max_length := _st_max_length(model_dir)) is not None:
        values["max_length"] = max_length
    if _st_transformer_config(model_dir).get("do_lower_case"):
        values["lowercase"] = True
    prompts_path = model_dir / "config_sentence_transformers.json"
    if prompts_path.is_file():
        cfg = read_json(prompts_path)
        default = cfg.get("default_prompt_name")
        if default and default in cfg.get("prompts", {}):
            values["prefix"] = cfg["prompts"][default]
    return values


def _st_max_length(model_dir: Path) -> int | None:
    """sentence_bert_config.json's max_seq_length, else the tokenizer's model_max_length (where
    sentence-transformers 6 keeps it)."""
    if "max_seq_length" in (cfg := _st_transformer_config(model_dir)):
        return int(cfg["max_seq_length"])
    tokenizer_config = model_dir / "tokenizer_config.json"
    limit = read_json(tokenizer_config).get("model_max_length") if tokenizer_config.is_file() else None
    return int(limit) if isinstance(limit, int) and limit < _NO_TOKENIZER_LIMIT else None


def _st_transformer_config(model_dir: Path) -> dict[str, Any]:
    """The Transformer module's sentence_bert_config.json ({} without one)."""
    path = model_dir / "sentence_bert_config.json"
    return read_json(path) if path.is_file() else {}
