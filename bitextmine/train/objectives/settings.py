"""Each objective's settings: a frozen dataclass per objective whose fields are `train` options, their
defaults the only ones. No torch here: the command line reads the defaults, and the objectives' names,
before any work.

A settings class names its objective (`class ToySettings(ObjectiveSettings, objective="toy")`) and is
registered by that name when it is defined. Its field names are `train`'s option names, one namespace over
every objective, hence the prefixes (`vmsst_lambda`). `ObjectiveOptions` holds all objectives' settings,
made from option names and values and stored as them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from bitextmine.errors import BitextmineError

if TYPE_CHECKING:
    from bitextmine.train.loop import TrainConfig

_SETTINGS: dict[str, type[ObjectiveSettings]] = {}  # objective name -> settings class, as defined


class ObjectiveSettings:
    """Base of an objective's settings dataclass."""

    objective: ClassVar[str]

    def __init_subclass__(cls, objective: str, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.objective = objective
        _SETTINGS[objective] = cls

    def check(self, config: TrainConfig) -> None:
        """Refuse a training run these settings do not fit (called whether or not the objective is used)."""


def objective_names() -> tuple[str, ...]:
    """The objectives `train --objectives` knows, the built-in ones first."""
    return tuple(_SETTINGS)


def settings_class(objective: str) -> type[ObjectiveSettings]:
    if objective not in _SETTINGS:
        raise BitextmineError(f"unknown objective {objective!r}: choose from {', '.join(_SETTINGS)}")
    return _SETTINGS[objective]


def _field_names(cls: type[ObjectiveSettings]) -> list[str]:
    return [field.name for field in dataclasses.fields(cls)]


class ObjectiveOptions(Mapping[str, Any]):
    """Every objective's settings, typed (`of("contrastive")`), made from the `train` options given
    (option name -> value; the others keep their defaults). As a mapping it is the options given, in their
    order: what checkpoints (whose settings must match to resume) and bitextmine.json record, as they did
    before the settings were typed."""

    def __init__(self, given: Mapping[str, Any] | None = None) -> None:
        self._given = dict(given or {})
        known = [name for cls in _SETTINGS.values() for name in _field_names(cls)]
        unknown = [name for name in self._given if name not in known]
        if unknown:
            raise BitextmineError(
                f"unknown objective setting {', '.join(unknown)}: the settings are {', '.join(known)}"
            )

    def of(self, objective: str) -> ObjectiveSettings:
        """The settings of `objective`: the options given for it, defaults for the rest."""
        cls = settings_class(objective)
        mine = _field_names(cls)
        return cls(**{name: value for name, value in self._given.items() if name in mine})

    def check(self, config: TrainConfig) -> None:
        """Let every objective's settings refuse `config`."""
        for objective in _SETTINGS:
            self.of(objective).check(config)

    def __getitem__(self, name: str) -> Any:
        return self._given[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._given)

    def __len__(self) -> int:
        return len(self._given)

    def __repr__(self) -> str:
        return f"ObjectiveOptions({self._given!r})"


@dataclass(frozen=True)
class ContrastiveSettings(ObjectiveSettings, objective="contrastive"):
    temperature: float = 0.05
    margin: float = 0.0  # LaBSE's additive margin
    projection: bool = False  # EMS's MLP before the cosine


@dataclass(frozen=True)
class MexmaSettings(ObjectiveSettings, objective="mexma"):
    mask_ratio: float = 0.4
    token_gradients: bool = True  # False: the paper's §5.1 ablation
    mexma_alignment: str = "mse"  # or "contrastive" (§5.2)

    def __post_init__(self) -> None:
        if self.mexma_alignment not in ("mse", "contrastive"):
            raise ValueError(f"alignment must be 'mse' or 'contrastive', not {self.mexma_alignment!r}")


@dataclass(frozen=True)
class RtlSettings(ObjectiveSettings, objective="rtl"):
    rtl_layers: int = 2  # the head's transformer blocks, copies of the encoder's last ones


@dataclass(frozen=True)
class VmsstSettings(ObjectiveSettings, objective="vmsst"):
    vmsst_lambda: float = 0.025  # weight of the ELBO; the paper's fine-tuning value (0.1 from scratch)
    vmsst_kl_steps: int = 1_000_000  # batches over which the KL weight rises from 0 to 1
    vmsst_latent_dim: int | None = None  # None: the encoder's hidden size
    vmsst_language_layers: int = 2
    vmsst_decoder_layers: int = 1


@dataclass(frozen=True)
class XtrSettings(ObjectiveSettings, objective="xtr"):
    pass


@dataclass(frozen=True)
class DistillSettings(ObjectiveSettings, objective="distill"):
    teacher: str | None = None  # None: the --base model

    def check(self, config: TrainConfig) -> None:
        if self.teacher and "distill" not in config.objectives:
            raise BitextmineError("--teacher is the distill objective's teacher: add distill to --objectives")
        if "distill" in config.objectives and config.from_scratch and not self.teacher:
            raise BitextmineError(
                "distill from scratch needs --teacher MODEL (its default is the --base model)"
            )
