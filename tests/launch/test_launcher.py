"""Shard-job launcher: in-process runs, the local process pool and submitit's local executor (real
processes), retries, failure reports with logs, Ctrl-C, the config file and its precedence, the Slurm
parameters."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from bitextmine.cli.launcher_options import NO_FLAGS, LauncherFlags, with_launcher_options
from bitextmine.errors import BitextmineError
from bitextmine.launch.config import LauncherConfig, load_launcher_config
from bitextmine.launch.jobs import Job, run_jobs
from bitextmine.launch.submitit_runner import _executor
from tests.launch import launcher_jobs

REPO = Path(__file__).resolve().parents[2]
BOTH = pytest.mark.parametrize(
    "launcher", ["local", pytest.param("submitit-local", marks=pytest.mark.integration)]
)


@pytest.fixture(autouse=True)
def importable_tests(monkeypatch) -> None:
    """submitit's job processes unpickle tests.launch.launcher_jobs, whatever the working directory."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))


def _config(tmp_path: Path, launcher: str, **settings) -> LauncherConfig:
    return LauncherConfig(log_dir=tmp_path / "logs", launcher=launcher, poll_seconds=0.1, **settings)


def _calls(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@BOTH
def test_results_come_in_job_order_and_progress_once_per_job(tmp_path, launcher):
    jobs = [
        Job(f"encode shard {i}", launcher_jobs.write_value, (tmp_path / f"out{i}", value))
        for i, value in enumerate([30, 10, 20])
    ]
    finished: list[int] = []
    assert run_jobs(jobs, _config(tmp_path, launcher), "encode", finished.append) == [30, 10, 20]
    assert finished == [1, 1, 1]  # each job's one unit of work, reported by it here or by the runner
    assert all(_calls(tmp_path / f"out{i}") == 1 for i in range(3))


@BOTH
def test_jobs_whose_outputs_exist_are_done_and_not_run_again(tmp_path, launcher):
    outputs = [tmp_path / "done.out", tmp_path / "todo.out"]
    outputs[0].write_text("from an earlier run\n")
    calls = tmp_path / "calls"
    jobs = [
        Job(path.name, launcher_jobs.write_output, (path, calls), outputs=(path,), work=10)
        for path in outputs
    ]
    progress: list[int] = []
    assert run_jobs(jobs, _config(tmp_path, launcher), "encode", progress.append) == [None, 1]
    assert progress == [10, 10] and _calls(calls) == 1
    assert outputs[0].read_text() == "from an earlier run\n" and outputs[1].read_text() == "written\n"
    assert not Job("no outputs", launcher_jobs.write_value, (calls, 1)).done()


@BOTH
def test_job_failing_once_succeeds_on_retry(tmp_path, launcher):
    marker = tmp_path / "marker"
    job = Job("index shard 0", launcher_jobs.fail_first_time, (marker, 7))
    assert run_jobs([job], _config(tmp_path, launcher, retries=1), "index") == [7]
    assert marker.exists()


@pytest.mark.integration
def test_job_failing_every_time_is_reported_with_its_logs(tmp_path):
    calls = tmp_path / "calls"
    jobs = [
        Job("encode de shard 00001", launcher_jobs.write_value, (tmp_path / "ok", 1)),
        Job("encode de shard 00003", launcher_jobs.always_fail, (calls,)),
    ]
    with pytest.raises(BitextmineError) as info:
        run_jobs(jobs, _config(tmp_path, "submitit-local", retries=1), "encode")
    message = str(info.value)
    assert message.startswith("1 of 2 encode jobs failed:\n  encode de shard 00003 (2 attempts): stderr ")
    assert "00001" not in message
    stderr = Path(re.search(r"stderr (\S+), stdout (\S+)", message)[1])
    assert stderr.parent == tmp_path / "logs" and stderr.name.endswith("_log.err")
    assert "RuntimeError: this shard is cursed" in stderr.read_text()
    assert message.endswith("| RuntimeError: this shard is cursed")
    assert _calls(calls) == 2
    assert _calls(tmp_path / "ok") == 1  # the other jobs still finish


def test_in_process_failure_names_the_shard_and_the_error(tmp_path):
    calls = tmp_path / "calls"
    job = Job("encode de shard 00003", launcher_jobs.always_fail, (calls,))
    expected = (
        r"^encode de shard 00003 failed \(3 attempts\): RuntimeError: this shard is cursed \(at .+\.py:\d+\)$"
    )
    with pytest.raises(BitextmineError, match=expected):
        run_jobs([job], _config(tmp_path, "local"), "encode")
    assert _calls(calls) == 3


@BOTH
def test_without_retries_a_failure_is_reported_at_once(tmp_path, launcher):
    calls = tmp_path / "calls"
    job = Job("mine block 2", launcher_jobs.always_fail, (calls,))
    with pytest.raises(BitextmineError, match=r"mine block 2 (failed )?\(1 attempt\)"):
        run_jobs([job], _config(tmp_path, launcher, retries=0), "mine")
    assert _calls(calls) == 1


def test_user_error_in_process_passes_through_without_retry(tmp_path):
    calls = tmp_path / "calls"
    job = Job("encode de shard 0", launcher_jobs.user_error, (calls,))
    with pytest.raises(BitextmineError, match=r"^corpus.txt line 3: not UTF-8$"):
        run_jobs([job], _config(tmp_path, "local"), "encode")
    assert _calls(calls) == 1


@pytest.mark.integration
def test_user_error_in_a_submitit_job_is_not_retried(tmp_path):
    calls = tmp_path / "calls"
    job = Job("encode de shard 0", launcher_jobs.user_error, (calls,))
    with pytest.raises(BitextmineError) as info:
        run_jobs([job], _config(tmp_path, "submitit-local"), "encode")
    assert str(info.value) == (
        "1 of 1 encode jobs failed:\n  encode de shard 0: corpus.txt line 3: not UTF-8 (not retried)"
    )
    assert _calls(calls) == 1


@pytest.mark.integration
def test_submitit_local_runs_at_most_array_parallelism_jobs(tmp_path):
    outputs = [tmp_path / "a", tmp_path / "b"]
    jobs = [Job(path.name, launcher_jobs.timed, (path, 0.3)) for path in outputs]
    run_jobs(jobs, _config(tmp_path, "submitit-local", array_parallelism=1), "encode")
    (start_a, end_a), (start_b, end_b) = (map(float, path.read_text().split()) for path in outputs)
    assert end_a <= start_b or end_b <= start_a


@pytest.mark.integration
@pytest.mark.parametrize(
    "sigint", [signal.default_int_handler, signal.SIG_IGN], ids=["foreground", "background"]
)
def test_interrupt_cancels_running_jobs(tmp_path, sigint):
    """Also when SIGINT is ignored, as in a command a non-interactive shell started with `cmd &`: the job
    controllers that submitit-local cancels with SIGINT would inherit that and outlive the cancel."""
    previous = signal.signal(signal.SIGINT, sigint)
    pid_file = tmp_path / "pid"
    jobs = [
        Job("fast", launcher_jobs.write_value, (tmp_path / "fast", 1)),
        Job("slow", launcher_jobs.sleep_long, (pid_file,)),
    ]

    def interrupt(units: int) -> None:
        _wait_for(pid_file.exists)
        raise KeyboardInterrupt

    try:
        with pytest.raises(KeyboardInterrupt):
            run_jobs(jobs, _config(tmp_path, "submitit-local"), "encode", interrupt)
    finally:
        signal.signal(signal.SIGINT, previous)
    pids = [int(pid) for pid in pid_file.read_text().split()]  # the job and submitit's controller
    _wait_for(lambda: not any(map(_alive, pids)))


@pytest.mark.integration  # worker processes
def test_local_workers_run_the_jobs_in_other_processes_in_job_order(tmp_path):
    marker = tmp_path / "marker"
    jobs = [
        Job("index shard 0", launcher_jobs.fail_first_time, (marker, 7)),
        *(Job(f"shard {i}", launcher_jobs.process_id) for i in (1, 2)),
    ]
    finished: list[int] = []
    results = run_jobs(jobs, _config(tmp_path, "local", retries=1), "index", finished.append, workers=2)
    assert results[0] == 7 and marker.exists()  # retried in its worker
    assert os.getpid() not in results[1:]
    assert finished == [1, 1, 1]


@pytest.mark.integration  # worker processes
def test_a_failure_in_a_local_worker_names_the_job_once_the_others_end(tmp_path):
    calls, ok = tmp_path / "calls", tmp_path / "ok"
    jobs = [
        Job("mine block 2", launcher_jobs.always_fail, (calls,)),
        Job("ok", launcher_jobs.write_value, (ok, 1)),
    ]
    expected = r"^mine block 2 failed \(2 attempts\): RuntimeError: this shard is cursed \(at .+\.py:\d+\)$"
    with pytest.raises(BitextmineError, match=expected):
        run_jobs(jobs, _config(tmp_path, "local", retries=1), "mine", workers=2)
    assert _calls(calls) == 2 and _calls(ok) == 1


@pytest.mark.integration  # worker processes
def test_a_worker_process_that_dies_is_a_one_line_error_naming_its_job(tmp_path):
    jobs = [Job("corpus de big.txt", launcher_jobs.die, ()), Job("ok", launcher_jobs.process_id, ())]
    with pytest.raises(BitextmineError, match=r"^corpus de big.txt: its worker process died"):
        run_jobs(jobs, workers=2)


@pytest.mark.integration  # worker processes
def test_local_workers_exit_once_the_command_is_killed(tmp_path):
    script = (
        "import sys; from pathlib import Path; from bitextmine.launch.jobs import Job, run_jobs; "
        "from tests.launch.launcher_jobs import sleep_long; "
        "run_jobs([Job(str(i), sleep_long, (Path(sys.argv[1]) / str(i),)) for i in (0, 1)], workers=2)"
    )
    command = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)])
    try:
        _wait_for(lambda: all((tmp_path / name).exists() for name in "01"))
    finally:
        command.kill()
        command.wait()
    workers = [int((tmp_path / name).read_text().split()[0]) for name in "01"]
    _wait_for(lambda: not any(map(_alive, workers)), seconds=5)


def _wait_for(condition, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_missing_submitit(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "submitit", None)
    job = Job("encode shard 0", launcher_jobs.write_value, (tmp_path / "out", 5))
    with pytest.raises(
        BitextmineError, match=r"^--launcher slurm needs submitit: pip install 'bitextmine\[slurm\]'$"
    ):
        run_jobs([job], _config(tmp_path, "slurm"), "encode")
    assert run_jobs([job], _config(tmp_path, "local"), "encode") == [5]


CONFIG = """
[launcher]
launcher = "slurm"
partition = "cpu"
cpus_per_job = 8
mem_gb = 32
retries = 1

[launcher.extra]
account = "nlp"
qos = "normal"

[launcher.encode]
partition = "gpu"
gpus_per_job = 1
extra = { qos = "high" }

[launcher.mine]
mem_gb = 128.5
"""


def test_config_file_then_step_table_then_flags(tmp_path):
    path = tmp_path / "launcher.toml"
    path.write_text(CONFIG)
    logs = tmp_path / "logs"
    encode = load_launcher_config(path, "encode", logs, {"cpus_per_job": 16, "retries": None})
    assert encode == LauncherConfig(
        log_dir=logs,
        launcher="slurm",
        partition="gpu",
        gpus_per_job=1,
        cpus_per_job=16,
        mem_gb=32,
        retries=1,
        extra={"account": "nlp", "qos": "high"},
    )
    index = load_launcher_config(path, "index", logs)
    assert (index.partition, index.gpus_per_job, index.cpus_per_job) == ("cpu", 0, 8)
    assert index.extra == {"account": "nlp", "qos": "normal"}
    assert load_launcher_config(path, "mine", logs).mem_gb == 128.5
    assert load_launcher_config(None, "mine", logs, {"launcher": "submitit-local"}) == LauncherConfig(
        log_dir=logs, launcher="submitit-local"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[launcher]\npartion = 'gpu'\n", "{path}: unknown key launcher.partion (known: launcher, partition"),
        ("[launcher.encode]\ngpus = 1\n", "{path}: unknown key launcher.encode.gpus"),
        ("[launcher]\nmem_gb = '16G'\n", "{path}: launcher.mem_gb must be int or float, got '16G'"),
        ("[launcher.mine]\nretries = true\n", "{path}: launcher.mine.retries must be int, got True"),
        ("[launcher]\nencode = 1\n", "{path}: launcher.encode must be a table"),
        ("[slurm]\npartition = 'gpu'\n", "{path}: no [launcher] table"),
        ("[launcher\n", "{path}: invalid TOML"),
        ("[launcher]\nlauncher = 'pbs'\n", "unknown launcher 'pbs': use local, slurm, submitit-local"),
        ("[launcher]\nretries = -1\n", "launcher retries must be at least 0, got -1"),
    ],
)
def test_bad_config_file(tmp_path, text, expected):
    path = tmp_path / "launcher.toml"
    path.write_text(text)
    with pytest.raises(BitextmineError) as info:
        load_launcher_config(path, "encode", tmp_path)
    assert str(info.value).startswith(expected.format(path=path))
    assert "\n" not in str(info.value)


def test_missing_config_file(tmp_path):
    with pytest.raises(BitextmineError, match=r"cannot read launcher config .*absent\.toml: No such file"):
        load_launcher_config(tmp_path / "absent.toml", "encode", tmp_path)


def test_options_reach_the_config(tmp_path):
    path = tmp_path / "launcher.toml"
    path.write_text(CONFIG)
    seen: list[LauncherConfig] = []
    app = typer.Typer()

    @app.command()
    @with_launcher_options
    def encode(cluster: LauncherFlags = NO_FLAGS) -> None:
        seen.append(cluster.config("encode", tmp_path / "logs" / "encode"))

    flags = ["--launcher-config", str(path), "--launcher", "submitit-local", "--partition", "big"]
    flags += ["--gpus-per-job", "2", "--mem-gb", "64", "--timeout-min", "30", "--retries", "0"]
    result = CliRunner().invoke(app, [*flags, "--array-parallelism", "3"], env={"BITEXTMINE_LAUNCHER": None})
    assert result.exit_code == 0, result.output
    assert seen == [
        LauncherConfig(
            log_dir=tmp_path / "logs" / "encode",
            launcher="submitit-local",
            partition="big",
            gpus_per_job=2,
            cpus_per_job=8,
            mem_gb=64,
            timeout_min=30,
            array_parallelism=3,
            retries=0,
            extra={"account": "nlp", "qos": "high"},
        )
    ]


@pytest.fixture
def fake_srun(tmp_path, monkeypatch) -> None:
    """submitit's Slurm executor only checks that srun is on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_slurm_parameters(tmp_path, fake_srun):
    import submitit

    config = _config(
        tmp_path, "slurm", partition="gpu", gpus_per_job=1, extra={"account": "nlp", "qos": "high"}
    )
    assert _executor(submitit, config, "encode").parameters == {
        "job_name": "bitextmine-encode",
        "partition": "gpu",
        "gpus_per_node": 1,
        "cpus_per_task": 4,
        "mem": "16GB",
        "time": 240,
        "array_parallelism": 64,
        "account": "nlp",
        "qos": "high",
    }
    assert "gpus_per_node" not in _executor(submitit, _config(tmp_path, "slurm"), "mine").parameters


def test_unknown_slurm_extra(tmp_path, fake_srun):
    import submitit

    with pytest.raises(BitextmineError, match=r"^launcher extra settings: Unknown argument 'acount'"):
        _executor(submitit, _config(tmp_path, "submitit-local", extra={"acount": "nlp"}), "encode")


def test_slurm_without_srun(tmp_path, monkeypatch):
    import submitit

    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BitextmineError, match=r'^--launcher slurm: Could not detect "srun"'):
        _executor(submitit, _config(tmp_path, "slurm"), "encode")
