"""Module-level job functions for tests/test_launcher.py: submitit pickles them by reference, so the job
processes import this module."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from bitextmine.errors import BitextmineError


def write_value(path: Path, value: int) -> int:
    """Record a call (one line per call) and return `value`."""
    with path.open("a") as f:
        f.write(f"{value}\n")
    return value


def fail_first_time(path: Path, value: int) -> int:
    """Fails on the first call only (a marker file remembers it)."""
    if not path.exists():
        path.write_text("failed once\n")
        raise RuntimeError("transient failure")
    return value


def always_fail(path: Path) -> None:
    write_value(path, 0)
    print("about to fail", file=sys.stderr)
    raise RuntimeError("this shard is cursed")


def user_error(path: Path) -> None:
    write_value(path, 0)
    raise BitextmineError("corpus.txt line 3: not UTF-8")


def timed(path: Path, seconds: float) -> None:
    """Write the start and end times of the call."""
    start = time.time()
    time.sleep(seconds)
    path.write_text(f"{start} {time.time()}")


def sleep_long(pid_file: Path) -> None:
    """Write this process's id and its parent's (submitit's controller), then sleep."""
    pid_file.with_suffix(".tmp").write_text(f"{os.getpid()} {os.getppid()}")
    pid_file.with_suffix(".tmp").rename(pid_file)
    time.sleep(60)
