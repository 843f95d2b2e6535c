"""The sentence-transformers layout of a model dir: ``modules.json`` and the modules' own configs.

sentence-transformers saves a model as a pipeline: ``modules.json`` lists its modules in the order they
run, each with a type (an import path) and a folder holding its config and weights. bitextmine runs
the pipelines made of Transformer -> Pooling -> Dense... -> Normalize; any other module, or another
order, is refused here rather than skipped, since skipping it would give other vectors than the model's.
Types are recognised under both their old (``sentence_transformers.models.Dense``) and current
(``sentence_transformers.base.modules.dense.Dense``) import paths.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bitextmine.errors import BitextmineError
from bitextmine.files import read_json

MODULES_FILE = "modules.json"
# sentence-transformers' names, in the order of its legacy `pooling_mode_*` flags.
POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
_LEGACY_POOLING_FLAGS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
_PIPELINE = re.compile(r"Transformer Pooling( Dense)*( Normalize)?")


@dataclass(frozen=True)
class StModule:
    kind: str  # Transformer, Pooling, Dense or Normalize
    path: Path  # its folder (the model dir itself for the Transformer)


@dataclass(frozen=True)
class PoolingConfig:
    mode: str  # one of POOLING_MODES
    include_prompt: bool  # False: the prompt's tokens are left out of the pooling


def st_modules(model_dir: Path) -> list[StModule]:
    """The modules of `model_dir`'s sentence-transformers pipeline in order; [] without modules.json."""
    path = model_dir / MODULES_FILE
    if not path.is_file():
        return []
    modules = [_module(model_dir, entry) for entry in read_json(path)]
    kinds = " ".join(m.kind for m in modules)
    if not _PIPELINE.fullmatch(kinds):
        raise BitextmineError(
            f"{path}: pipeline {kinds.replace(' ', ' -> ')} is not supported; "
            "bitextmine runs Transformer -> Pooling -> Dense... -> Normalize"
        )
    if modules[0].path != model_dir:
        raise BitextmineError(f"{path}: the Transformer must be the model dir itself, not {modules[0].path}")
    return modules


def _module(model_dir: Path, entry: dict[str, Any]) -> StModule:
    kind = str(entry.get("type", ""))
    name = kind.rpartition(".")[2]
    if not kind.startswith("sentence_transformers.") or name not in (
        "Transformer",
        "Pooling",
        "Dense",
        "Normalize",
    ):
        raise BitextmineError(
            f"{model_dir}: sentence-transformers module {kind!r} is not supported "
            "(bitextmine runs Transformer, Pooling, Dense and Normalize)"
        )
    return StModule(name, model_dir / entry.get("path", ""))


def pooling_config(module: StModule) -> PoolingConfig:
    """A Pooling module's mode and prompt handling, from its current or legacy config format."""
    path = module.path / "config.json"
    config = read_json(path) if path.is_file() else {}
    modes = config.get("pooling_mode")
    if modes is None:
        modes = [mode for flag, mode in _LEGACY_POOLING_FLAGS.items() if config.get(flag)] or ["mean"]
    modes = [modes] if isinstance(modes, str) else list(modes)
    if len(modes) != 1:
        raise BitextmineError(
            f"{path}: pooling modes {' + '.join(map(str, modes))} combined are not supported"
        )
    if modes[0] not in POOLING_MODES:
        raise BitextmineError(f"{path}: unknown pooling mode {modes[0]!r}")
    return PoolingConfig(modes[0], bool(config.get("include_prompt", True)))
