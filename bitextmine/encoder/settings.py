"""How a model turns a sentence into a vector: pooling, prefix, max length, normalization.

Resolution order for each field: an explicit override (CLI flag), then the model dir's
``bitextmine.json``, then the sentence-transformers files (``modules.json``, ``1_Pooling/config.json``,
``sentence_bert_config.json``, ``config_sentence_transformers.json``), then built-in defaults.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from bitextmine.errors import BitextmineError

BITEXTMINE_CONFIG = "bitextmine.json"
POOLINGS = ("mean", "cls")


@dataclass(frozen=True)
class EncoderSettings:
    pooling: str = "mean"
    prefix: str = ""
    max_length: int = 512
    normalize: bool = True

    def __post_init__(self) -> None:
        if self.pooling not in POOLINGS:
            raise BitextmineError(f"unknown pooling {self.pooling!r}; choose one of {', '.join(POOLINGS)}")
        if self.max_length < 2:
            raise BitextmineError(f"max length must be at least 2 tokens, got {self.max_length}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def resolve_settings(model_dir: Path | None, overrides: dict[str, Any] | None = None) -> EncoderSettings:
    """Merge built-in defaults < sentence-transformers files < bitextmine.json < overrides."""
    values: dict[str, Any] = {}
    if model_dir is not None:
        values.update(_from_sentence_transformers(model_dir))
        values.update(_from_bitextmine_json(model_dir))
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    known = {f.name for f in fields(EncoderSettings)}
    return EncoderSettings(**{k: v for k, v in values.items() if k in known})


def _read(path: Path) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except json.JSONDecodeError as exc:
        raise BitextmineError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None


def _from_bitextmine_json(model_dir: Path) -> dict[str, Any]:
    path = model_dir / BITEXTMINE_CONFIG
    return _read(path).get("encoder", {}) if path.is_file() else {}


def _from_sentence_transformers(model_dir: Path) -> dict[str, Any]:
    values: dict[str, Any] = {}
    modules_path = model_dir / "modules.json"
    if not modules_path.is_file():
        return values
    modules = _read(modules_path)
    for module in modules:
        kind = module.get("type", "")
        if kind.endswith("models.Pooling"):
            values.update(_st_pooling(model_dir / module.get("path", "") / "config.json"))
    values["normalize"] = any(m.get("type", "").endswith("models.Normalize") for m in modules)
    bert_config = model_dir / "sentence_bert_config.json"
    if bert_config.is_file() and "max_seq_length" in (cfg := _read(bert_config)):
        values["max_length"] = int(cfg["max_seq_length"])
    prompts_path = model_dir / "config_sentence_transformers.json"
    if prompts_path.is_file():
        cfg = _read(prompts_path)
        default = cfg.get("default_prompt_name")
        if default and default in cfg.get("prompts", {}):
            values["prefix"] = cfg["prompts"][default]
    return values


def _st_pooling(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    cfg = _read(path)
    if cfg.get("pooling_mode_cls_token"):
        return {"pooling": "cls"}
    if cfg.get("pooling_mode_mean_tokens"):
        return {"pooling": "mean"}
    modes = [k for k, v in cfg.items() if k.startswith("pooling_mode") and v]
    raise BitextmineError(f"{path}: pooling {modes} is not supported (mean or cls only)")
