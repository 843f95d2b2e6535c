"""Where and with what resources jobs run: a TOML file's [launcher] table, then its [launcher.STEP]
table, then flags."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bitextmine.errors import BitextmineError

LAUNCHERS = ("local", "slurm", "submitit-local")
STEPS = ("encode", "index", "mine")


_FILE_KEYS: dict[str, tuple[type, ...]] = {
    "launcher": (str,),
    "partition": (str,),
    "gpus_per_job": (int,),
    "cpus_per_job": (int,),
    "mem_gb": (int, float),
    "timeout_min": (int,),
    "array_parallelism": (int,),
    "retries": (int,),
    "poll_seconds": (int, float),
    "extra": (dict,),
}


_MINIMUM = {"gpus_per_job": 0, "cpus_per_job": 1, "timeout_min": 1, "array_parallelism": 1, "retries": 0}


@dataclass(frozen=True)
class LauncherConfig:
    """Where and with what resources shard jobs run. `extra` holds further submitit Slurm parameters
    (account, qos, constraint, setup, additional_parameters...); `poll_seconds` None means 5 s on Slurm
    and 0.5 s with submitit-local."""

    log_dir: Path
    launcher: str = "local"
    partition: str | None = None
    gpus_per_job: int = 0
    cpus_per_job: int = 4
    mem_gb: float = 16
    timeout_min: int = 240
    array_parallelism: int = 64
    retries: int = 2
    poll_seconds: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.launcher not in LAUNCHERS:
            raise BitextmineError(f"unknown launcher {self.launcher!r}: use {', '.join(LAUNCHERS)}")
        for name, minimum in _MINIMUM.items():
            value = getattr(self, name)
            if value < minimum:
                raise BitextmineError(f"launcher {name} must be at least {minimum}, got {value}")


def load_launcher_config(
    path: Path | None, step: str, log_dir: Path, overrides: Mapping[str, Any] | None = None
) -> LauncherConfig:
    """The `[launcher]` table of the TOML file `path`, then its `[launcher.<step>]` table, then the
    overrides that are not None (flags); `extra` tables are merged key by key in the same order."""
    values: dict[str, Any] = {"extra": {}}
    layers = [*_read_file(path, step), {k: v for k, v in (overrides or {}).items() if v is not None}]
    for layer in layers:
        values |= {k: v for k, v in layer.items() if k != "extra"}
        values["extra"] = values["extra"] | layer.get("extra", {})
    return LauncherConfig(log_dir=log_dir, **values)


def _read_file(path: Path | None, step: str) -> list[dict[str, Any]]:
    """The general and the step's settings of a launcher config file (none without a file)."""
    if path is None:
        return []
    try:
        with path.open("rb") as f:
            table = tomllib.load(f).get("launcher")
    except OSError as exc:
        raise BitextmineError(f"cannot read launcher config {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise BitextmineError(f"{path}: invalid TOML: {exc}") from exc
    if not isinstance(table, dict):
        raise BitextmineError(f"{path}: no [launcher] table")
    general = {k: v for k, v in table.items() if k not in STEPS}
    steps = {k: v for k, v in table.items() if k in STEPS}
    for name, settings in steps.items():
        if not isinstance(settings, dict):
            raise BitextmineError(f"{path}: launcher.{name} must be a table ([launcher.{name}])")
        _check_keys(path, f"launcher.{name}", settings)
    _check_keys(path, "launcher", general)
    return [general, steps.get(step, {})]


def _check_keys(path: Path, where: str, settings: dict[str, Any]) -> None:
    for key, value in settings.items():
        if key not in _FILE_KEYS:
            known = ", ".join([*_FILE_KEYS, *(f"[launcher.{s}]" for s in STEPS)])
            raise BitextmineError(f"{path}: unknown key {where}.{key} (known: {known})")
        types = _FILE_KEYS[key]
        if isinstance(value, bool) or not isinstance(value, types):
            kinds = " or ".join("table" if t is dict else t.__name__ for t in types)
            raise BitextmineError(f"{path}: {where}.{key} must be {kinds}, got {value!r}")
