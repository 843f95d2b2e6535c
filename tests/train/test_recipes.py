"""`train --recipe`: a recipe fills in the settings the command line left at their defaults, never the
ones it gave."""

from __future__ import annotations

import pytest

import bitextmine.train.loop as loop
from bitextmine.cli.app import app
from bitextmine.train.loop import TrainSummary
from bitextmine.train.recipes import FINE_TUNE, RECIPES, with_recipe
from tests.helpers import run


@pytest.fixture
def configs(monkeypatch, tmp_path) -> list[loop.TrainConfig]:
    """The TrainConfig each `bitextmine train` builds; no training runs."""
    seen: list[loop.TrainConfig] = []

    def fake_train(config: loop.TrainConfig, reporter=None) -> TrainSummary:
        seen.append(config)
        return TrainSummary(0, 0, 0, 0.0, 0, 0.0, {}, config.out)

    monkeypatch.setattr(loop, "train", fake_train)
    (tmp_path / "toy.de").write_text("hallo\n")
    (tmp_path / "toy.en").write_text("hello\n")
    return seen


def _train(tmp_path, *extra: str) -> tuple[int, str]:
    common = ["--data", str(tmp_path / "toy.de"), "--base", "m", "--out", str(tmp_path / "out")]
    return run("train", *common, "--max-steps", "5", *extra)


def test_without_a_recipe_the_defaults_are_trains_own(configs, tmp_path):
    code, output = _train(tmp_path)
    assert code == 0, output
    assert (configs[0].lr, configs[0].warmup_steps, configs[0].max_tokens) == (2e-5, 100, 8192)


def test_the_mining_recipe_sets_the_benchmarked_fine_tuning_settings(configs, tmp_path):
    code, output = _train(tmp_path, "--recipe", "mining")
    assert code == 0, output
    config = configs[0]
    assert config.objectives == {"contrastive": 1.0}
    assert {key: getattr(config, key) for key in FINE_TUNE} == FINE_TUNE
    assert config.max_steps == 5 and config.base == "m"


def test_options_given_on_the_command_line_override_the_recipe(configs, tmp_path):
    code, output = _train(tmp_path, "--recipe", "weak-languages", "--lr", "1e-4", "--objectives", "distill")
    assert code == 0, output
    config = configs[0]
    assert (config.lr, config.objectives) == (1e-4, {"distill": 1.0})
    assert (config.warmup_steps, config.max_pairs) == (20, 128)


def test_a_value_given_equal_to_the_default_still_overrides_the_recipe(configs, tmp_path):
    code, output = _train(tmp_path, "--recipe", "mining", "--warmup-steps", "100")
    assert code == 0, output
    assert configs[0].warmup_steps == 100


def test_the_weak_languages_recipe_adds_labses_margin(configs, tmp_path):
    code, output = _train(tmp_path, "--recipe", "weak-languages")
    assert code == 0, output
    assert configs[0].objectives == {"contrastive": 1.0}
    assert (configs[0].teacher, configs[0].options["margin"]) == (None, 0.3)
    assert {key: getattr(configs[0], key) for key in FINE_TUNE} == FINE_TUNE


def test_the_mining_recipe_keeps_trains_margin(configs, tmp_path):
    code, output = _train(tmp_path, "--recipe", "mining")
    assert code == 0, output
    assert configs[0].options["margin"] == 0.0


def test_an_unknown_recipe_is_a_usage_error_naming_the_recipes(configs, tmp_path):
    code, output = _train(tmp_path, "--recipe", "fastest")
    assert code == 2 and not configs
    assert "unknown recipe 'fastest'" in output and "mining" in output and "Traceback" not in output


def test_every_recipe_setting_is_a_train_option():
    import typer.main

    command = typer.main.get_command(app).commands["train"]
    names = {param.name for param in command.params}
    for recipe in RECIPES.values():
        assert set(recipe.settings) <= names, recipe.name
        assert with_recipe(recipe.name, {}, set()) == recipe.settings


def test_a_recipe_gives_python_users_train_config_arguments(tmp_path):
    config = loop.TrainConfig(
        data=["x"], out=tmp_path, base="m", max_minutes=10, **RECIPES["weak-languages"].config_settings()
    )
    assert config.objectives == {"contrastive": 1.0}
    assert (config.lr, config.max_length) == (FINE_TUNE["lr"], FINE_TUNE["max_length"])
    assert config.options == {"margin": 0.3}
