"""Command-line options for running shard jobs on a cluster (see bitextmine.launcher).

Every option defaults to None, so that a value from --launcher-config is kept unless a flag is given.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from bitextmine.launcher import LAUNCHERS, LauncherConfig, ShardJob, load_launcher_config, run_jobs

_PANEL = "Cluster execution"

LauncherOption = Annotated[
    str | None,
    typer.Option(
        "--launcher",
        envvar="BITEXTMINE_LAUNCHER",
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
        help="TOML file with a \\[launcher] table and optional \\[launcher.encode|index|mine] tables; "
        "flags win over it.",
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


def launcher_config_from_options(
    step: str,
    log_dir: Path,
    *,
    launcher: str | None = None,
    config_file: Path | None = None,
    partition: str | None = None,
    gpus_per_job: int | None = None,
    cpus_per_job: int | None = None,
    mem_gb: float | None = None,
    timeout_min: int | None = None,
    retries: int | None = None,
    array_parallelism: int | None = None,
) -> LauncherConfig:
    """The launcher settings for `step` (encode, index, mine): the config file, then the flags given."""
    flags = {
        "launcher": launcher,
        "partition": partition,
        "gpus_per_job": gpus_per_job,
        "cpus_per_job": cpus_per_job,
        "mem_gb": mem_gb,
        "timeout_min": timeout_min,
        "retries": retries,
        "array_parallelism": array_parallelism,
    }
    return load_launcher_config(config_file, step, log_dir, flags)


def job_runner(
    config: LauncherConfig, step: str, done: Callable[[ShardJob], None] | None = None
) -> Callable[[list[ShardJob]], object] | None:
    """What a step hands its shard jobs to: None for `local` (the step runs them itself, with its
    detailed progress), else the launcher, calling `done` as each job finishes."""
    if config.launcher == "local":
        return None
    return lambda jobs: run_jobs(jobs, config, step, progress=done)
