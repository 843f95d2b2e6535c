"""Training recipes: named sets of `train` settings, each the one measured best for a purpose here.

A recipe fills in the settings a user did not give; an option given on the command line (or to
`with_recipe`) always wins. The budget (`max_steps` / `max_minutes`), the data and the base model stay
the user's. docs/training.md ("Recipes") links the measurements behind each recipe.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from bitextmine.errors import BitextmineError
from bitextmine.train.objectives.names import parse_objectives

# The fine-tuning settings of bench_train's rows (examples/benchmarks/bench_train.py, through `mining`):
# a short warm-up for budgets of ~100 steps, batches that fit 2 CPU cores and news-length sentences.
FINE_TUNE: dict[str, Any] = {
    "lr": 2e-5,
    "warmup_steps": 20,
    "max_tokens": 6144,
    "max_pairs": 128,
    "max_length": 96,
}


@dataclass(frozen=True)
class Recipe:
    name: str
    settings: dict[str, Any]  # `train` parameter name -> value

    def config_settings(self) -> dict[str, Any]:
        """The settings as `TrainConfig` keyword arguments: TrainConfig(data=.., out=.., base=..,
        max_minutes=10, **RECIPES["mining"].config_settings()); objective settings (`margin`) go into
        its `options`."""
        from bitextmine.train.loop import TrainConfig  # torch: only for a config about to be built

        fields = {field.name for field in dataclasses.fields(TrainConfig)}
        options = {key: value for key, value in self.settings.items() if key not in fields}
        settings = {key: value for key, value in self.settings.items() if key in fields}
        return {**settings, "objectives": parse_objectives(settings["objectives"]), "options": options}


RECIPES = {
    recipe.name: recipe
    for recipe in (
        # mining between languages with parallel data: the objective that gained most per CPU minute, with
        # the settings that no tried change beat (examples/benchmarks/results/bench_train.md)
        Recipe("mining", {"objectives": "contrastive", **FINE_TUNE}),
        # languages the model encodes badly: LaBSE's additive margin cut held-out xsim error where more
        # steps, hard negatives, a higher lr or distillation did not
        # (examples/benchmarks/results/training_runs.md)
        Recipe("weak-languages", {"objectives": "contrastive", "margin": 0.3, **FINE_TUNE}),
    )
}


def recipe_named(name: str) -> Recipe:
    """The recipe called `name`; a one-line error naming the recipes if there is none."""
    if name not in RECIPES:
        raise BitextmineError(f"unknown recipe {name!r}; recipes: {', '.join(RECIPES)}")
    return RECIPES[name]


def with_recipe(name: str, values: dict[str, Any], given: set[str]) -> dict[str, Any]:
    """`values` (train's parameters) with the recipe's settings in place of every one not in `given`."""
    settings = recipe_named(name).settings
    return {**values, **{key: value for key, value in settings.items() if key not in given}}
