"""Jobs: the units of a step's work (encode a text shard, populate an index shard, search a block of
queries), and the one function that runs them, here or on a cluster.

A step makes its jobs; it does not run them. A job's function writes its outputs atomically and is
idempotent, and the job is done once every output it declares exists, so a rerun runs only the jobs
that are not done and a failed job is simply run again (up to `retries` times, never on a
BitextmineError: rerunning cannot fix bad input). Where the jobs run is the launcher's business: in
this process one after another (`local`), or in a pool of local processes (`local` with `workers`,
launch/processes.py), as a Slurm job array, or as local submitit processes. Outside this process a job's
function must be picklable: a module-level function, importable where the job runs.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Sequence
from functools import partial
from typing import Any

from bitextmine.errors import BitextmineError, is_out_of_memory
from bitextmine.launch.config import LauncherConfig
from bitextmine.launch.job import Job, count_attempts
from bitextmine.launch.processes import run_in_processes
from bitextmine.progress import Advance

_log = logging.getLogger(__name__)


def run_jobs(
    jobs: Sequence[Job],
    config: LauncherConfig | None = None,
    step: str = "jobs",
    progress: Advance | None = None,
    workers: int = 1,
) -> list[Any]:
    """Run every job not yet done, here (`config` None or launcher `local`: one after another, or in
    `workers` local processes) or through submitit.

    Returns the results in job order, None for a job done by an earlier run (counted in `progress` at
    once). Raises a BitextmineError naming the jobs that still failed after their retries (run locally:
    the first of them in job order).
    """
    advance = progress or _ignore
    pending = []
    for number, job in enumerate(jobs):
        if job.done():
            advance(job.work)
        else:
            pending.append(number)
    todo = [jobs[number] for number in pending]
    local = config is None or config.launcher == "local"
    where = "in this process" if config is None else f"with launcher {config.launcher}"
    where = f"in {workers} local processes" if local and workers > 1 else where
    done = len(jobs) - len(todo)
    _log.debug(
        "%s: %d job(s), %d done by an earlier run, %d to run %s", step, len(jobs), done, len(todo), where
    )
    if local:
        retries = 0 if config is None else config.retries
        values = _run_locally(todo, retries, workers, advance)
    else:
        from bitextmine.launch.submitit_runner import SubmititRun

        values = SubmititRun(todo, config, step, advance).run() if todo else []
    results: list[Any] = [None] * len(jobs)
    for number, value in zip(pending, values, strict=True):
        results[number] = value
    return results


def _run_locally(jobs: Sequence[Job], retries: int, workers: int, progress: Advance) -> list[Any]:
    """In this process one after another, or with `workers` > 1 in that many local processes (each job
    counted in `progress` once it ends)."""
    if workers > 1 and len(jobs) > 1:
        calls = [partial(_run_here, job, retries, _ignore) for job in jobs]
        names = [job.name for job in jobs]
        return run_in_processes(calls, names, workers, lambda number: progress(jobs[number].work))
    return [_run_here(job, retries, progress) for job in jobs]


def _ignore(*_: object) -> None:
    """The progress callback when none is given."""


def _run_here(job: Job, retries: int, progress: Advance) -> Any:
    attempt = 1
    while True:
        try:
            return job.fn(*job.args, progress=progress)
        except BitextmineError:
            raise
        except Exception as exc:
            if is_out_of_memory(exc):
                raise  # so would another attempt here; the CLI says which option to lower
            if attempt > retries:
                where = traceback.extract_tb(exc.__traceback__)[-1]
                raise BitextmineError(
                    f"{job.name} failed ({count_attempts(attempt)}): {type(exc).__name__}: {exc} "
                    f"(at {where.filename}:{where.lineno})"
                ) from exc
            attempt += 1
