"""Run shard-level jobs (encode a shard, populate an index shard, mine a query block) in this process,
as a Slurm job array, or as local submitit processes.

A job's function writes its own output atomically and is idempotent, so a failed job is simply run again
(up to `retries` times); deciding which shards still need a job is the caller's business. Resources come
from a TOML file's `[launcher]` table, overridden per step by `[launcher.<step>]` and then by flags.
With submitit, jobs run through a module-level wrapper, so a job's function must be picklable and
importable where the job runs.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
import tomllib
import traceback
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
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
_DEFAULT_POLL_SECONDS = {"slurm": 5.0, "submitit-local": 0.5}
_STDERR_TAIL_LINES = 5


@dataclass(frozen=True)
class ShardJob:
    """One unit of work: `fn(*args, **kwargs)`; with submitit, `fn` must be a module-level function."""

    name: str
    fn: Callable[..., Any]
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


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


def run_jobs(
    jobs: Sequence[ShardJob],
    config: LauncherConfig,
    step: str,
    progress: Callable[[ShardJob], None] | None = None,
) -> list[Any]:
    """Run every job and return their results in job order; `progress(job)` is called once per job as it
    completes. A job that raises is run again up to `config.retries` times, except on BitextmineError
    (bad input: rerunning cannot help). Raises BitextmineError naming the jobs that still failed."""
    if config.launcher == "local":
        return _run_local(jobs, config.retries, progress)
    if not jobs:
        return []
    return _SubmititRun(jobs, config, step, progress).run()


def _run_local(
    jobs: Sequence[ShardJob], retries: int, progress: Callable[[ShardJob], None] | None
) -> list[Any]:
    results = []
    for job in jobs:
        results.append(_run_in_process(job, retries))
        if progress is not None:
            progress(job)
    return results


def _run_in_process(job: ShardJob, retries: int) -> Any:
    attempt = 1
    while True:
        try:
            return job.fn(*job.args, **job.kwargs)
        except BitextmineError:
            raise
        except Exception as exc:
            if attempt > retries:
                where = traceback.extract_tb(exc.__traceback__)[-1]
                raise BitextmineError(
                    f"{job.name} failed ({_attempts(attempt)}): {type(exc).__name__}: {exc} "
                    f"(at {where.filename}:{where.lineno})"
                ) from exc
            attempt += 1


def _attempts(count: int) -> str:
    return "1 attempt" if count == 1 else f"{count} attempts"


@dataclass(frozen=True)
class _UserError:
    """What a submitit job returns instead of raising BitextmineError, so that it is not retried."""

    message: str


def _call_job(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> Any:
    """What submitit runs: the job's function, with BitextmineError turned into a _UserError result."""
    try:
        return fn(*args, **kwargs)
    except BitextmineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return _UserError(str(exc))


@contextmanager
def _interruptible_children(local: bool) -> Iterator[None]:
    """submitit-local cancels a job by sending SIGINT to its controller process, which inherits an
    ignored SIGINT from us: a command started with `cmd &` by a non-interactive shell ignores SIGINT,
    and its cancelled jobs would then run on. While local jobs start, SIGINT raises KeyboardInterrupt
    here instead (an ignored signal stays ignored across exec, a handled one is reset to default)."""
    ignored = (
        local
        and threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    )
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def _import_submitit(launcher: str) -> Any:
    try:
        import submitit
    except ImportError:
        message = f"--launcher {launcher} needs submitit: pip install 'bitextmine[slurm]'"
        raise BitextmineError(message) from None
    return submitit


def _executor(submitit: Any, config: LauncherConfig, step: str) -> Any:
    """A submitit AutoExecutor with the config's resources (Slurm-only ones are ignored by local runs)."""
    cluster = "slurm" if config.launcher == "slurm" else "local"
    try:
        executor = submitit.AutoExecutor(folder=config.log_dir, cluster=cluster)
    except RuntimeError as exc:  # no srun on PATH
        raise BitextmineError(f"--launcher slurm: {exc}") from exc
    parameters: dict[str, Any] = {
        "name": f"bitextmine-{step}",
        "timeout_min": config.timeout_min,
        "mem_gb": config.mem_gb,
        "cpus_per_task": config.cpus_per_job,
        "slurm_partition": config.partition,
        "slurm_array_parallelism": config.array_parallelism,
    }
    if config.gpus_per_job:
        parameters["gpus_per_node"] = config.gpus_per_job
    parameters |= {f"slurm_{key}": value for key, value in config.extra.items()}
    try:
        executor.update_parameters(**parameters)
    except NameError as exc:
        raise BitextmineError(f"launcher extra settings: {str(exc).splitlines()[0]}") from exc
    return executor


class _SubmititRun:
    """Submits queued jobs (Slurm: all at once, as one array; submitit-local: up to array_parallelism
    processes), polls them, requeues failures while retries remain and reports the rest at the end.
    Leaving early (Ctrl-C, a failed submission) cancels the jobs still running."""

    def __init__(
        self,
        jobs: Sequence[ShardJob],
        config: LauncherConfig,
        step: str,
        progress: Callable[[ShardJob], None] | None,
    ) -> None:
        self.jobs, self.config, self.step, self.progress = jobs, config, step, progress
        submitit = _import_submitit(config.launcher)
        self.executor = _executor(submitit, config, step)
        self.errors = submitit.core.utils
        self.capacity = len(jobs) if config.launcher == "slurm" else config.array_parallelism
        self.poll_seconds = (
            _DEFAULT_POLL_SECONDS[config.launcher] if config.poll_seconds is None else config.poll_seconds
        )
        self.queue = deque(range(len(jobs)))
        self.running: dict[int, Any] = {}
        self.attempts = [0] * len(jobs)
        self.results: list[Any] = [None] * len(jobs)
        self.failures: dict[int, str] = {}

    def run(self) -> list[Any]:
        try:
            while self.queue or self.running:
                self._submit_queued()
                time.sleep(self.poll_seconds)
                self._collect_finished()
        except BaseException:
            for handle in self.running.values():
                handle.cancel(check=False)
            raise
        if self.failures:
            failed = [self.failures[i] for i in sorted(self.failures)]
            raise BitextmineError(
                "\n".join([f"{len(failed)} of {len(self.jobs)} {self.step} jobs failed:", *failed])
            )
        return self.results

    def _submit_queued(self) -> None:
        count = min(len(self.queue), self.capacity - len(self.running))
        if count <= 0:
            return
        indices = [self.queue.popleft() for _ in range(count)]
        batch = [self.jobs[i] for i in indices]
        try:
            with _interruptible_children(self.config.launcher != "slurm"):
                handles = self.executor.map_array(
                    _call_job, [j.fn for j in batch], [j.args for j in batch], [j.kwargs for j in batch]
                )
        except (self.errors.UncompletedJobError, self.errors.FailedSubmissionError) as exc:
            message = f"submitting {count} {self.step} job(s) failed: {str(exc).strip()}"
            raise BitextmineError(message) from exc
        for i, handle in zip(indices, handles, strict=True):
            self.attempts[i] += 1
            self.running[i] = handle

    def _collect_finished(self) -> None:
        for i, handle in list(self.running.items()):
            if handle.done():
                del self.running[i]
                self._finish(i, handle)

    def _finish(self, i: int, handle: Any) -> None:
        job = self.jobs[i]
        try:
            value = handle.result()
        except self.errors.UncompletedJobError as exc:  # the job raised, was killed or never ran
            if self.attempts[i] <= self.config.retries:
                self.queue.append(i)
            else:
                self.failures[i] = _describe_failure(job, handle, exc, self.attempts[i])
            return
        if isinstance(value, _UserError):
            self.failures[i] = f"  {job.name}: {value.message} (not retried)"
            return
        self.results[i] = value
        if self.progress is not None:
            self.progress(job)


def _describe_failure(job: ShardJob, handle: Any, exc: Exception, attempts: int) -> str:
    """The job's name, attempt count, log paths and the end of its stderr (else the error's start)."""
    paths = handle.paths
    tail = _tail(paths.stderr) or [line for line in str(exc).splitlines() if line.strip()][:2]
    head = f"  {job.name} ({_attempts(attempts)}): stderr {paths.stderr}, stdout {paths.stdout}"
    return "\n".join([head, *(f"    | {line}" for line in tail)])


def _tail(path: Path) -> list[str]:
    """The last non-blank lines of a log file ([] when it is absent)."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, 2) - 8192))
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-_STDERR_TAIL_LINES:]
