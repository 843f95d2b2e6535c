"""Command-line options for running shard jobs on a cluster (see bitextmine.launch).

Every option defaults to None, so that a value from --launcher-config is kept unless a flag is given.
Commands take them all with the `with_launcher_options` decorator.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Literal

import typer

from bitextmine.launch.config import LAUNCHERS, LauncherConfig, load_launcher_config

_PANEL = "Cluster execution"

LauncherOption = Annotated[
    Literal[LAUNCHERS] | None,
    typer.Option(
        "--launcher",
        envvar="BITEXTMINE_LAUNCHER",
        metavar="LAUNCHER",
        rich_help_panel=_PANEL,
        help=f"Where shard jobs run: {', '.join(LAUNCHERS)} (default local: in this process; "
        "slurm and submitit-local need pip install 'bitextmine\\[slurm]').",
    ),
]
LauncherConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--launcher-config",
        envvar="BITEXTMINE_LAUNCHER_CONFIG",
        metavar="FILE",
        rich_help_panel=_PANEL,
        help="TOML file with a \\[launcher] table and optional \\[launcher.STEP] tables (STEP: encode, "
        "index or mine); flags win over it.",
    ),
]
PartitionOption = Annotated[
    str | None, typer.Option("--partition", rich_help_panel=_PANEL, help="Slurm partition.")
]
GpusOption = Annotated[
    int | None,
    typer.Option("--gpus-per-job", min=0, rich_help_panel=_PANEL, help="GPUs per job \\[default: 0]."),
]
CpusOption = Annotated[
    int | None,
    typer.Option("--cpus-per-job", min=1, rich_help_panel=_PANEL, help="CPU cores per job \\[default: 4]."),
]
MemOption = Annotated[
    float | None,
    typer.Option("--mem-gb", min=0, rich_help_panel=_PANEL, help="Memory per job in GB \\[default: 16]."),
]
TimeOption = Annotated[
    int | None,
    typer.Option(
        "--timeout-min", min=1, rich_help_panel=_PANEL, help="Time limit per job in minutes \\[default: 240]."
    ),
]
RetriesOption = Annotated[
    int | None,
    typer.Option(
        "--retries",
        min=0,
        rich_help_panel=_PANEL,
        help="Times a failed job is run again before the step fails \\[default: 2].",
    ),
]
ArrayParallelismOption = Annotated[
    int | None,
    typer.Option(
        "--array-parallelism",
        min=1,
        rich_help_panel=_PANEL,
        help="Jobs running at once (Slurm array throttle; processes with submitit-local) \\[default: 64].",
    ),
]


@dataclass(frozen=True)
class LauncherFlags:
    """The cluster-execution flags of one command line (None: not given)."""

    launcher: str | None = None
    launcher_config: Path | None = None
    partition: str | None = None
    gpus_per_job: int | None = None
    cpus_per_job: int | None = None
    mem_gb: float | None = None
    timeout_min: int | None = None
    retries: int | None = None
    array_parallelism: int | None = None

    def config(self, step: str, log_dir: Path) -> LauncherConfig:
        """The launcher settings for `step` (encode, index, mine): the config file, then the flags given."""
        flags = asdict(self)
        return load_launcher_config(flags.pop("launcher_config"), step, log_dir, flags)


NO_FLAGS = LauncherFlags()

_OPTIONS = {
    "launcher": LauncherOption,
    "launcher_config": LauncherConfigOption,
    "partition": PartitionOption,
    "gpus_per_job": GpusOption,
    "cpus_per_job": CpusOption,
    "mem_gb": MemOption,
    "timeout_min": TimeOption,
    "retries": RetriesOption,
    "array_parallelism": ArrayParallelismOption,
}


def with_launcher_options(command: Callable[..., None]) -> Callable[..., None]:
    """Give a Typer command the cluster-execution options, handed to it as one `cluster: LauncherFlags`.

    Typer reads a command's options from its signature, so the wrapper shows the command's own
    parameters (without `cluster`) followed by the launcher options, and gathers those back.
    """
    signature = inspect.signature(command, eval_str=True)
    own = [param for name, param in signature.parameters.items() if name != "cluster"]
    added = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=option)
        for name, option in _OPTIONS.items()
    ]

    @functools.wraps(command)
    def run(*args: object, **kwargs: object) -> None:
        flags = LauncherFlags(**{name: kwargs.pop(name, None) for name in _OPTIONS})
        command(*args, cluster=flags, **kwargs)

    run.__signature__ = signature.replace(parameters=own + added)  # type: ignore[attr-defined]
    return run
