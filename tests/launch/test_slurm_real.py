"""The Slurm launcher against a real Slurm cluster (`make test-slurm` sets up a one-node one with
.ci/slurm-one-node.sh): encode, index and mine as Slurm job arrays write the local launcher's bytes, a
job cancelled with scancel mid-run is run again, a job past its time limit is reported in one line.

Skipped unless `sinfo` answers; BITEXTMINE_REQUIRE_SLURM=1 (set by `make test-slurm`) fails instead.
The last test needs no cluster: how a job that submitit stopped before its time limit is reported."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from bitextmine.launch.jobs import Job
from bitextmine.launch.submitit_runner import _describe_failure
from tests.helpers import outputs, run, sentences

# One CPU and 1 GB a job, so that a small CI machine runs several at once; job states checked every second.
LAUNCHER_TOML = "[launcher]\ncpus_per_job = 1\nmem_gb = 1\npoll_seconds = 1\n"
SHARD_ROWS = "15"  # 30 de and 26 en sentences: two encode jobs a language
INDEX_MEMORY_GB = "0.0000022"  # 32-d IVF1,Flat vectors of 136 B: two index shard jobs a language
JOB_ROWS = "20"  # two mine jobs a direction, four in all


def ask_slurm(*command: str) -> tuple[bool, str]:
    """(whether the command succeeded, the first line of its answer or of why not)."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    answer = done.stdout if done.returncode == 0 else done.stderr + done.stdout
    return done.returncode == 0, answer.strip()


@pytest.fixture(scope="module")
def partition() -> str:
    """The cluster's default partition; skip (or fail) unless Slurm answers with a node that takes jobs."""
    ok, answer = ask_slurm("scontrol", "ping")  # fails at once where sinfo would retry for seconds
    if ok:
        ok, answer = ask_slurm("sinfo", "--noheader", "--format=%P %t")
    rows = [line.split() for line in answer.splitlines() if ok and len(line.split()) == 2]
    usable = [name for name, state in rows if state in ("idle", "mix", "alloc")]  # "idle*": not responding
    default = [name.rstrip("*") for name in usable if name.endswith("*")]
    if not usable:
        why = answer.splitlines()[0] if answer else "no node up"
        reason = f"no Slurm cluster here ({why}); see make test-slurm"
        if os.environ.get("BITEXTMINE_REQUIRE_SLURM") == "1":
            pytest.fail(f"BITEXTMINE_REQUIRE_SLURM=1 but {reason}")
        pytest.skip(reason)
    return (default or usable)[0]


def bitextmine(*args: str) -> subprocess.Popen:
    """`bitextmine ARGS...` in its own process (Slurm's jobs then load the same installed package)."""
    command = [sys.executable, "-m", "bitextmine", *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def slurm_flags(partition: str, config: Path) -> list[str]:
    return ["--launcher", "slurm", "--partition", partition, "--launcher-config", str(config)]


def finish(*processes: subprocess.Popen) -> list[tuple[int, str]]:
    """Wait for each command: (exit status, stdout and stderr)."""
    streams = [process.communicate(timeout=300) for process in processes]
    return [(p.returncode, out + err) for p, (out, err) in zip(processes, streams, strict=True)]


def cancel_a_running_job(logs: Path, function: str, deadline: float) -> str:
    """scancel the first job of `logs` that runs `function` and whose process has started (its log says
    so); its Slurm id.

    Slurm's SIGTERM then reaches the process while it imports torch to load the encode job, before
    submitit ignores SIGTERM (it would run on until SIGKILL, KillWait later): it dies without a result."""
    while time.monotonic() < deadline:
        for log in sorted(logs.glob("*_log.out")):
            job_id = log.name.removesuffix("_0_log.out")
            submitted = logs / f"{job_id}_submitted.pkl"  # the job's function, pickled by name
            if (
                "Starting with JobEnvironment" in log.read_text()
                and function.encode() in submitted.read_bytes()
            ):
                subprocess.run(["scancel", job_id], check=True)
                return job_id
        time.sleep(0.2)
    raise AssertionError(f"no job started in {logs}")


@pytest.fixture(scope="module")
def corpora(tmp_path_factory, tiny_model_dir) -> tuple[Path, Path, dict[str, Path]]:
    """The tiny BERT, a launcher config and a de and an en corpus sharing 10 sentences (word salad: encoded
    with --lid off)."""
    root = tmp_path_factory.mktemp("slurm")
    shared = sentences(10, seed=0)
    files = {"de": root / "de.txt", "en": root / "en.txt"}
    files["de"].write_text("\n".join(shared + sentences(20, seed=1)) + "\n")
    files["en"].write_text("\n".join(sentences(16, seed=2) + shared) + "\n")
    (root / "launcher.toml").write_text(LAUNCHER_TOML)
    return root, tiny_model_dir("bert"), files


def steps(files: dict[str, Path], model: Path, work: Path) -> list[list[list[str]]]:
    """The commands of the pipeline, step by step (each step's commands may run at once)."""
    w = ["-w", str(work)]
    return [
        [
            [
                "encode",
                str(files[lang]),
                "-l",
                lang,
                "--lid",
                "off",
                "-m",
                str(model),
                "--shard-size",
                SHARD_ROWS,
                *w,
            ]
            for lang in files
        ],
        [["index", lang, "--max-memory", INDEX_MEMORY_GB, "--factory", "IVF1,Flat", *w] for lang in files],
        [["mine", "de", "en", "--job-rows", JOB_ROWS, *w]],
    ]


@pytest.fixture(scope="module")
def past_time_limit(corpora, partition) -> Iterator[tuple[subprocess.Popen, Path]]:
    """`encode` whose one job sleeps in its batch script past --timeout-min 1, so that Slurm kills it
    (TIMEOUT, after 60 to 90 s); started before `slurm_run`, which goes on meanwhile."""
    root, model, files = corpora
    config, work = root / "slow.toml", root / "slow"
    config.write_text(LAUNCHER_TOML + '[launcher.extra]\nsetup = ["sleep 300"]\n')
    args = ["encode", str(files["de"]), "-l", "de", "--lid", "off", "-m", str(model), "-w", str(work)]
    slurm = [*slurm_flags(partition, config), "--timeout-min", "1", "--retries", "0"]
    process = bitextmine(*args, *slurm)
    yield process, work
    if process.poll() is None:  # a test failed first: Ctrl-C, which cancels the job
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)


@pytest.fixture(scope="module")
def slurm_run(corpora, partition, past_time_limit) -> dict[str, Path | str]:
    """The pipeline with the local launcher, then through Slurm with one encode job cancelled mid-run."""
    root, model, files = corpora
    local, cluster = root / "local", root / "cluster"
    for step in steps(files, model, local):
        for args in step:
            code, output = run(*args, "--precision", "fp32") if args[0] == "encode" else run(*args)
            assert code == 0, output
    slurm = slurm_flags(partition, root / "launcher.toml")
    cancelled = ""
    for step in steps(files, model, cluster):
        extra = ["--precision", "fp32"] if step[0][0] == "encode" else []
        processes = [bitextmine(*args, *extra, *slurm, "--retries", "1") for args in step]
        if step[0][0] == "encode":
            logs = cluster / "logs" / "encode"
            cancelled = cancel_a_running_job(logs, "encode_shard_job", time.monotonic() + 120)
        for code, output in finish(*processes):
            assert code == 0, output
    return {"local": local, "cluster": cluster, "cancelled": cancelled}


@pytest.mark.slurm
@pytest.mark.integration
def test_encode_index_and_mine_as_slurm_jobs_write_the_local_runs_bytes(slurm_run):
    local, cluster = slurm_run["local"], slurm_run["cluster"]
    expected = outputs(local)
    assert any(name.startswith("index/") for name in expected) and "mined/de-en.tsv.zst" in expected
    assert outputs(cluster) == expected
    # four jobs each wrote a result, and encode's two corpus part jobs (one an input file)
    for step, jobs in (("encode", 6), ("index", 4), ("mine", 4)):
        assert len(list((cluster / "logs" / step).glob("*_result.pkl"))) == jobs, step


@pytest.mark.slurm
@pytest.mark.integration
def test_a_job_cancelled_mid_run_is_run_again(slurm_run):
    logs = slurm_run["cluster"] / "logs" / "encode"
    cancelled = slurm_run["cancelled"]
    assert (logs / f"{cancelled}_0_log.out").is_file()
    assert not (logs / f"{cancelled}_0_result.pkl").exists()  # killed before its job returned
    assert len(list(logs.glob("*_log.out"))) == 7  # two corpus parts, four shards, one of them twice


@pytest.mark.slurm
@pytest.mark.integration
def test_a_job_past_its_time_limit_is_stopped_and_reported_in_one_line(past_time_limit):
    """Slurm killed the job at its time limit, without a result: the command ends with one error line
    and one line for the job that says what to change, no traceback. (The first job, the input file's
    corpus part, is the one that sleeps past the limit.)"""
    process, work = past_time_limit
    [(code, output)] = finish(process)
    assert code == 1, output
    failure = [line for line in output.splitlines() if line.startswith(("error:", "  corpus"))]
    assert failure[0] == "error: 1 of 1 corpus jobs failed:", output
    assert "stopped at its time limit (--timeout-min 1: raise it" in failure[1], output
    assert "Traceback" not in output
    assert not list((work / "emb" / "de").glob("*.npy"))


def test_a_job_that_submitit_stopped_before_its_time_limit_is_named_so(tmp_path):
    """submitit signals a job 90 s before its time limit (Slurm: up to 60 s earlier) and fails one that
    cannot checkpoint, in these words (submitit 1.5; seen on the one-node cluster, where when the signal
    comes is too uncertain for a test): the failure line says what to change, not submitit's traceback."""
    paths = SimpleNamespace(stderr=tmp_path / "7_0_log.err", stdout=tmp_path / "7_0_log.out")
    error = (
        "Job (task=0) failed during processing with trace:\n----------------------\nTraceback (most recent "
        "call last):\n...\nsubmitit.core.utils.UncompletedJobError: Job not requeued because: timed-out "
        "and not checkpointable.\n"
    )
    line = _describe_failure(Job("mine block 3", print), SimpleNamespace(paths=paths), error, 2, 30)
    assert line == (
        "  mine block 3 (2 attempts): stopped at its time limit (--timeout-min 30: raise it, or make the "
        f"jobs smaller); stderr {paths.stderr}, stdout {paths.stdout}"
    )
