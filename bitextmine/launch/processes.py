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
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from bitextmine.errors import BitextmineError


def run_in_processes(
    calls: Sequence[Callable[[], Any]], names: Sequence[str], workers: int, ended: Callable[[int], None]
) -> list[Any]:
    """The results of `calls` (picklable; `names` say what each does) run in up to `workers` processes,
    in call order; `ended(i)` as soon as call i has returned. At the first failure the calls not started
    are cancelled, and once the running ones end, the first failure in call order is raised (a worker
    that died, killed or out of memory, as a one-line error naming its call)."""
    pool = ProcessPoolExecutor(
        min(workers, len(calls)),
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_exit_with_parent,
        initargs=(os.getpid(),),
    )
    futures = [pool.submit(_call, call) for call in calls]
    number = {future: i for i, future in enumerate(futures)}
    try:
        pending, failed = set(futures), False
        while pending and not failed:
            done, pending = wait(pending, return_when=FIRST_EXCEPTION)
            for future in done:
                failed = failed or future.exception() is not None
                if future.exception() is None:
                    ended(number[future])
    finally:
        pool.shutdown(cancel_futures=True)
    for i, future in enumerate(futures):
        if not future.cancelled() and future.exception() is not None:
            raise _failure(future.exception(), names[i])
    return [future.result() for future in futures]


def _failure(exc: BaseException, name: str) -> BaseException:
    if isinstance(exc, BrokenProcessPool):
        return BitextmineError(f"{name}: its worker process died (killed, or out of memory?); run it again")
    return exc


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
