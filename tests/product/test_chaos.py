"""Chaos test: the pipeline encode, index, mine run again and again while SIGKILL lands at
random moments, not only at the named crash points of test_faults.py; every step is rerun until it
completes, and each step's outputs must then be byte-identical to an uninterrupted run's (JSON without
timings), with no temporary file left behind.

Each command runs in a process of its own, forked from a server that has imported torch, transformers
and FAISS once (multiprocessing's forkserver), so that a round costs the work and not the imports;
the kill is a real SIGKILL of that process. Kill delays are drawn from when each uninterrupted step
first wrote to the workspace through the first half of its writes, so that most kills land while the
step writes.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import random
import shutil
import signal
import time
from pathlib import Path

import pytest

from bitextmine.faults import FAULT_ENV
from tests.helpers import SKIPPED, outputs, sentences

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SEED = 22
ROUNDS = int(os.environ.get("BITEXTMINE_CHAOS_ROUNDS", "6"))
KILL_CHANCE = 0.75  # of each attempt at a step being killed (so 0, 1, 2... kills before it completes)
# what the commands import (torch, transformers' model code, FAISS): imported once by the fork server
PRELOAD = [
    "transformers.activations",
    "transformers.modeling_layers",
    "faiss",
    "typer._adapters",
    "bitextmine.cli",
    "bitextmine.steps.encode",
    "bitextmine.steps.index",
    "bitextmine.steps.mine",
    "tests.product.test_chaos",
]


def _cli(args: list[str], log: str) -> None:
    """Child process: `bitextmine ARGS...`, stdout and stderr to `log`; exits with the CLI's status."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.environ.pop(FAULT_ENV, None)
    from bitextmine.cli import app

    app(args, prog_name="bitextmine")


class Runner:
    """Starts CLI commands in forked processes; kills them on request."""

    def __init__(self, logs: Path) -> None:
        self.context = multiprocessing.get_context("forkserver")
        self.context.set_forkserver_preload(PRELOAD)
        self.logs = logs
        self.count = 0

    def run(self, args: list[str], kill_after: float | None = None) -> tuple[int, float, str]:
        """(exit code, seconds, output) of one command; SIGKILLed after `kill_after` seconds if given
        and still running (exit code -9)."""
        process, log = self._process(args)
        started = time.perf_counter()
        process.start()
        process.join(kill_after)
        if process.exitcode is None:
            process.kill()  # SIGKILL; unlike os.kill, no error if it ended since the join
            process.join()
        seconds = time.perf_counter() - started
        return process.exitcode, seconds, log.read_text(errors="replace")

    def run_watching(self, args: list[str], work: Path) -> tuple[int, float, float, str]:
        """(exit code, seconds until the command first changed `work`'s outputs, seconds, output)."""
        process, log = self._process(args)
        before = _written(work)
        started = time.perf_counter()
        process.start()
        first_write = None
        while process.is_alive():
            if first_write is None and _written(work) != before:
                first_write = time.perf_counter() - started
            time.sleep(0.005)
        process.join()
        seconds = time.perf_counter() - started
        first_write = seconds if first_write is None else first_write
        return process.exitcode, first_write, seconds, log.read_text(errors="replace")

    def _process(self, args: list[str]) -> tuple[multiprocessing.process.BaseProcess, Path]:
        self.count += 1
        log = self.logs / f"{self.count:04d}.log"
        return self.context.Process(target=_cli, args=(args, str(log))), log


def _written(work: Path) -> set[tuple[str, int]]:
    """The workspace's output files (not locks or logs) and their sizes, as far as a step has got."""
    found = set()
    for path in work.rglob("*") if work.exists() else []:
        relative = path.relative_to(work)
        with contextlib.suppress(FileNotFoundError):  # a temporary renamed meanwhile
            if relative.parts[0] not in SKIPPED and path.is_file():
                found.add((str(relative), path.stat().st_size))
    return found


def _steps(root: Path, model: str) -> list[tuple[str, list[str]]]:
    """A small pipeline with many output files: 20-row text and embedding shards, a 6-shard index, and
    mine's neighbour lists in blocks of 40 queries."""
    shared = sentences(80, seed=0)
    inputs = {"de": shared + sentences(160, seed=1), "en": sentences(120, seed=2) + shared}
    steps = []
    for lang, lines in inputs.items():
        path = root / f"{lang}.txt"
        path.write_text("\n".join(lines) + "\n")
        encode = ["encode", str(path), "-l", lang, "-m", model, "--shard-size", "20", "--precision", "fp32"]
        steps.append((f"encode-{lang}", [*encode, "--threads", "1"]))
    return [
        *steps,
        ("index-de", ["index", "de", "--max-memory", "0.000005", "--factory", "IVF1,Flat"]),  # FAISS shards
        ("index-en", ["index", "en"]),
        ("mine", ["mine", "de", "en", "--job-rows", "40"]),
    ]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tiny_model_dir):
    """The pipeline, its outputs after each uninterrupted step, and when each step writes: from its
    first write to the workspace (before it, a step starts, loads and computes) on."""
    root = tmp_path_factory.mktemp("chaos")
    (root / "logs").mkdir()
    runner = Runner(root / "logs")
    steps = _steps(root, str(tiny_model_dir("bert")))
    runner.run(["--version"])  # starts the fork server: its imports are no step's duration
    work = root / "reference"
    after, window = {}, {}
    for name, args in steps:
        code, first_write, seconds, output = runner.run_watching([*args, "--workdir", str(work)], work)
        assert code == 0, output
        after[name] = outputs(work)
        code, _, output = runner.run([*args, "--workdir", str(work)])
        assert code == 0 and outputs(work) == after[name], (
            f"a rerun of a finished {name} changed it: {output}"
        )
        # the first half of its writes: watching slowed this run, so a later kill may find the step done
        window[name] = (first_write, (first_write + seconds) / 2)
    return root, runner, steps, after, window


def test_random_kills_across_the_pipeline_resume_to_identical_outputs(reference):
    root, runner, steps, after, window = reference
    rng = random.Random(SEED)
    kills = {name: 0 for name, _ in steps}
    midway = dict(kills)  # kills that left the step's outputs neither as before nor as after
    for round_number in range(ROUNDS):
        work = root / f"round-{round_number}"
        for name, args in steps:
            before = outputs(work) if work.exists() else {}
            while rng.random() < KILL_CHANCE:
                code, _, output = runner.run([*args, "--workdir", str(work)], rng.uniform(*window[name]))
                if code == 0:
                    break  # done before the kill
                assert code == -signal.SIGKILL, f"{name}: {output}"
                kills[name] += 1
                midway[name] += outputs(work) not in (before, after[name])
            code, _, output = runner.run([*args, "--workdir", str(work)])
            assert code == 0, f"round {round_number}, {name}: {output}"
            got = outputs(work)
            assert sorted(got) == sorted(after[name]), f"round {round_number}, {name}"
            for file, content in after[name].items():
                assert got[file] == content, f"round {round_number}, {name}: {file}"
            assert not list(work.rglob(".*.tmp-*")), f"round {round_number}, {name}: a temporary was left"
        shutil.rmtree(work)
    print(f"kills per step: {kills}; of which midway: {midway}; windows (s): {window}")
    assert sum(midway.values()) >= sum(kills.values()) // 3, f"kills mostly missed the work: {midway}"
