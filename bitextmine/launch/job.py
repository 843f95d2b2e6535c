"""A job: a function, its arguments and the outputs it declares (done once they all exist), as both
runners (launch/jobs.py in this process, launch/submitit_runner.py on a cluster) take it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Job:
    """`fn(*args, progress=...)` writes `outputs`; it reports exactly `work` units through `progress`
    (rows, queries) when run in this process. A job run elsewhere is counted as `work` once it ends."""

    name: str
    fn: Callable[..., Any]
    args: tuple = ()
    outputs: tuple[Path, ...] = ()
    work: int = 1

    def done(self) -> bool:
        """Whether an earlier run left every output (a job that declares none is never done)."""
        return bool(self.outputs) and all(Path(path).is_file() for path in self.outputs)


def count_attempts(count: int) -> str:
    """How many times a job ran, in words, for the runners' failure messages."""
    return "1 attempt" if count == 1 else f"{count} attempts"
