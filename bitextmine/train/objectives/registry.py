"""The objectives by name: a table of the `Objective` classes, each entered when its class is defined.
A built-in objective's module is named after it and imported when the objective is first asked for."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from torch import nn

from bitextmine.errors import BitextmineError
from bitextmine.train.objectives.settings import ObjectiveOptions, objective_names, settings_class

if TYPE_CHECKING:
    from bitextmine.train.objectives.base import Objective, ObjectiveSetup

_CLASSES: dict[str, type[Objective]] = {}


def register(cls: type[Objective]) -> None:
    _CLASSES[cls.name] = cls


def objective_class(name: str) -> type[Objective]:
    """The class of objective `name`; a one-line error naming the objectives if there is none."""
    if name not in _CLASSES:
        settings_class(name)  # refuses an unknown name
        importlib.import_module(f"{__package__}.{name}")
    return _CLASSES[name]


def _names_with(capability: str) -> list[str]:
    return [name for name in objective_names() if getattr(objective_class(name), capability)]


def check_capabilities(weights: Mapping[str, float], pair_weights: bool, negatives: bool) -> None:
    """Refuse --weight-by-score with an objective that has no per-pair term to weight, and
    --hard-negatives without an objective that takes them."""
    classes = [objective_class(name) for name in weights]
    unweighted = [cls.name for cls in classes if not cls.weighs_pairs]
    if pair_weights and unweighted:
        raise BitextmineError(
            f"--weight-by-score weights the pairs of {', '.join(_names_with('weighs_pairs'))} only; "
            f"drop {', '.join(unweighted)} from --objectives or drop --weight-by-score"
        )
    if negatives and not any(cls.takes_negatives for cls in classes):
        takers = _names_with("takes_negatives")
        raise BitextmineError(
            f"--hard-negatives feeds the {', '.join(takers)} loss: add {takers[0]} to --objectives"
        )


def build_objectives(
    weights: Mapping[str, float], setup: ObjectiveSetup, options: Mapping[str, Any] | None = None
) -> nn.ModuleDict:
    """The objectives of `weights`, in its order, with the settings of `options` (option name -> value)."""
    settings = ObjectiveOptions(options)
    return nn.ModuleDict({name: _build(name, settings, setup) for name in weights})


def _build(name: str, options: ObjectiveOptions, setup: ObjectiveSetup) -> nn.Module:
    cls = objective_class(name)
    if cls.needs_bert_heads and setup.encoder.packer is None:
        others = ", ".join(n for n in objective_names() if not objective_class(n).needs_bert_heads)
        raise BitextmineError(
            f"objective {name} needs a BERT-family encoder (its heads are BERT layers), not a "
            f"{setup.encoder.config.model_type!r} model: use {others}"
        )
    return cls.build(options.of(name), setup)
