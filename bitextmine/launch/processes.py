"""The local process pool: `run_jobs(..., workers=N)` runs the jobs of a step in N processes of this
machine (the corpus pass: one input file a job), rather than one after another in this process.

The processes are spawned (nothing of this process's threads is copied) and each exits once this process
is gone (killed), rather than wait forever. A script that runs jobs this way must guard its entry point
with ``if __name__ == "__main__":``, as spawned processes import it.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from bitextmine.errors import BitextmineError


def run_in_processes(
    calls: Sequence[Callable[[], Any]], workers: int, ended: Callable[[int], None]
) -> list[Any]:
    """The results of `calls` (picklable) run in up to `workers` processes, in order; `ended(i)` once
    call i has returned. The first failure, in call order, is raised once the running calls end; the
    calls not started yet are cancelled."""
    pool = ProcessPoolExecutor(
        min(workers, len(calls)),
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_exit_with_parent,
        initargs=(os.getpid(),),
    )
    try:
        results = []
        for number, future in enumerate([pool.submit(_call, call) for call in calls]):
            results.append(future.result())
            ended(number)
        return results
    finally:
        pool.shutdown(cancel_futures=True)


def _call(call: Callable[[], Any]) -> Any:
    """In a worker: the call; its BitextmineError goes back as a plain one (a subclass may not unpickle)."""
    try:
        return call()
    except BitextmineError as exc:
        raise BitextmineError(str(exc)) from None


def _exit_with_parent(parent: int) -> None:
    """In a worker: exit once the process that started it is gone (killed), rather than wait forever."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()
