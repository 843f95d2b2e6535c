"""Module-level job functions for tests/launch/test_launcher.py: submitit and the local process pool pickle
them by reference, so the job processes import this module."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from bitextmine.errors import BitextmineError


def write_value(path: Path, value: int, progress=None) -> int:
    """Record a call (one line per call) and return `value`; one unit of work."""
    with path.open("a") as f:
        f.write(f"{value}\n")
    if progress:
        progress(1)
    return value


def die(progress=None) -> int:
    """The worker process ends at once, as one the kernel killed would."""
    os._exit(9)


def process_id(progress=None) -> int:
    """The id of the process that runs the job."""
    return os.getpid()


def write_output(out: Path, calls: Path, progress=None) -> int:
    """The output a job declares, and a record of the call; ten units of work."""
    write_value(calls, 1)
    out.write_text("written\n")
    if progress:
        progress(10)
    return 1


def fail_first_time(path: Path, value: int, progress=None) -> int:
    """Fails on the first call only (a marker file remembers it)."""
    if not path.exists():
        path.write_text("failed once\n")
        raise RuntimeError("transient failure")
    if progress:
        progress(1)
    return value


def always_fail(path: Path, progress=None) -> None:
    write_value(path, 0)
    print("about to fail", file=sys.stderr)
    raise RuntimeError("this shard is cursed")


def user_error(path: Path, progress=None) -> None:
    write_value(path, 0)
    raise BitextmineError("corpus.txt line 3: not UTF-8")


def timed(path: Path, seconds: float, progress=None) -> None:
    """Write the start and end times of the call."""
    start = time.time()
    time.sleep(seconds)
    path.write_text(f"{start} {time.time()}")


def sleep_long(pid_file: Path, progress=None) -> None:
    """Write this process's id and its parent's (submitit's controller), then sleep."""
    pid_file.with_suffix(".tmp").write_text(f"{os.getpid()} {os.getppid()}")
    pid_file.with_suffix(".tmp").rename(pid_file)
    time.sleep(60)
