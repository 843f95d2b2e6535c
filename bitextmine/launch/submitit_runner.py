"""Jobs on Slurm (one job array) or as local submitit processes: submit, poll, retry, cancel on exit.

Imported only when such a launcher is asked for (`run_jobs`), so submitit stays an optional dependency.
submitit learns that a Slurm job ended from its result file, else from `sacct`; a job that ended
without one (cancelled, killed at its time limit, its node lost) on a cluster without accounting
would be waited for forever, so on Slurm `squeue` is asked too.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bitextmine.errors import BitextmineError
from bitextmine.launch.config import LauncherConfig
from bitextmine.launch.job import Job, count_attempts
from bitextmine.progress import Advance

_DEFAULT_POLL_SECONDS = {"slurm": 5.0, "submitit-local": 0.5}
_STDERR_TAIL_LINES = 5
# squeue states of a job that may still write its result (anything else, or no longer listed: it ended)
_ACTIVE_STATES = frozenset(
    {
        *("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING"),
        *("REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING", "STAGE_OUT", "PREEMPTED", "RESV_DEL_HOLD"),
    }
)
_RESULT_GRACE_SECONDS = 15.0  # as submitit waits for an ended job's result file (shared file systems lag)
# A job stopped at its time limit: submitit's SIGUSR2 handler 90 s before it, or Slurm's kill (sacct, squeue)
_TIME_LIMIT = re.compile(r"because: timed-out|\(state: TIMEOUT\)|^ended by Slurm \(TIMEOUT\)")


@dataclass(frozen=True)
class _UserError:
    """What a submitit job returns instead of raising BitextmineError, so that it is not retried."""

    message: str


def _call_job(fn: Callable[..., Any], args: tuple) -> Any:
    """What submitit runs: the job's function, with BitextmineError turned into a _UserError result."""
    try:
        return fn(*args)
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


class SubmititRun:
    """Submits queued jobs (Slurm: all at once, as one array; submitit-local: up to array_parallelism
    processes), polls them, requeues failures while retries remain and reports the rest at the end.
    Leaving early (Ctrl-C, a failed submission) cancels the jobs still running."""

    def __init__(
        self,
        jobs: Sequence[Job],
        config: LauncherConfig,
        step: str,
        progress: Advance,
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
        self.ended: dict[int, float] = {}  # running jobs Slurm ended, without a result yet: since when

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
                handles = self.executor.map_array(_call_job, [j.fn for j in batch], [j.args for j in batch])
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
        if self.config.launcher == "slurm" and self.running:
            self._collect_ended()

    def _collect_ended(self) -> None:
        """Jobs that Slurm no longer runs and that left no result within the grace time failed."""
        states = _slurm_states([handle.job_id for handle in self.running.values()])
        if states is None:  # squeue did not answer: ask again at the next poll
            return
        now = time.monotonic()
        for i, handle in list(self.running.items()):
            state = states.get(handle.job_id, "no longer listed by squeue")
            if state in _ACTIVE_STATES:
                self.ended.pop(i, None)  # still running, or requeued
            elif now - self.ended.setdefault(i, now) >= _RESULT_GRACE_SECONDS:
                del self.running[i], self.ended[i]
                self._failed(i, handle, f"ended by Slurm ({state}) without a result")

    def _finish(self, i: int, handle: Any) -> None:
        job = self.jobs[i]
        self.ended.pop(i, None)
        try:
            value = handle.result()
        except self.errors.UncompletedJobError as exc:  # the job raised, was killed or never ran
            self._failed(i, handle, str(exc))
            return
        if isinstance(value, _UserError):
            self.failures[i] = f"  {job.name}: {value.message} (not retried)"
            return
        self.results[i] = value
        self.progress(job.work)

    def _failed(self, i: int, handle: Any, error: str) -> None:
        """Run job i again while retries remain, else record why it failed."""
        if self.attempts[i] <= self.config.retries:
            self.queue.append(i)
        else:
            attempts, limit = self.attempts[i], self.config.timeout_min
            self.failures[i] = _describe_failure(self.jobs[i], handle, error, attempts, limit)


def _slurm_states(job_ids: Sequence[str]) -> dict[str, str] | None:
    """Slurm's state of each job that squeue lists (an ended job stays listed for MinJobAge, 300 s by
    default); None when squeue cannot answer."""
    arrays = sorted({job_id.split("_")[0] for job_id in job_ids})
    command = ["squeue", "--noheader", "--array", "--states=all", "--format=%i %T"]
    try:
        listed = subprocess.run(
            [*command, "--jobs", ",".join(arrays)], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if listed.returncode != 0:  # every job no longer listed, or the controller did not answer
        return {} if "Invalid job id" in listed.stderr else None
    return dict(line.split()[:2] for line in listed.stdout.splitlines() if len(line.split()) >= 2)


def _describe_failure(job: Job, handle: Any, error: str, attempts: int, timeout_min: int) -> str:
    """The job's name, attempt count, why it failed when known, log paths and the end of its stderr
    (else the error's start); at the time limit, only what to change (its stderr is submitit's)."""
    paths = handle.paths
    logs = f"stderr {paths.stderr}, stdout {paths.stdout}"
    head = f"  {job.name} ({count_attempts(attempts)}): "
    if _TIME_LIMIT.search(error):
        hint = f"--timeout-min {timeout_min}: raise it, or make the jobs smaller"
        return f"{head}stopped at its time limit ({hint}); {logs}"
    if error.startswith("ended by Slurm"):
        head += f"{error}; "
    tail = _tail(paths.stderr) or [line for line in error.splitlines() if line.strip()][:2]
    return "\n".join([head + logs, *(f"    | {line}" for line in tail)])


def _tail(path: Path) -> list[str]:
    """The last non-blank lines of a log file ([] when it is absent)."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, 2) - 8192))
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-_STDERR_TAIL_LINES:]
