"""What a command prints and returns, whatever the command: -q/--quiet and -v/--verbose, --json PATH|-
for every summary, the exit status (0 ok, 1 user error, 2 usage, 130 interrupted), and logging left as
it was found."""

from __future__ import annotations

import errno
import json
import logging
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from typer.testing import CliRunner

from bitextmine.cli import app
from bitextmine.cli.app import out
from tests.helpers import REPO, sentences, write_bucc

runner = CliRunner()


def invoke(*args: object):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture
def indexed(workspace):
    work, _ = workspace
    for lang in ("de", "en"):
        result = invoke("index", lang, "-w", work)
        assert result.exit_code == 0, result.output
    return work


@pytest.mark.integration  # an encoded workspace or a training run: seconds
def test_quiet_prints_nothing_and_verbose_adds_files_and_job_plans(indexed):
    work = indexed
    default = invoke("mine", "de", "en", "-w", work)
    assert default.exit_code == 0, default.output
    assert "mining de-en: 47/47 (100%)" in default.stderr  # a progress line
    assert "debug:" not in default.stderr

    quiet = invoke("-q", "mine", "de", "en", "-w", work)
    assert (quiet.exit_code, quiet.stdout, quiet.stderr) == (0, "", "")

    verbose = invoke("--verbose", "mine", "de", "en", "-w", work)
    assert verbose.exit_code == 0, verbose.output
    assert f"debug: wrote {work / 'mined' / 'de-en.stats.json'}\n" in verbose.stderr
    assert (
        "debug: mine: 1 job(s), 1 done by an earlier run, 0 to run with launcher local" in verbose.stderr
    )  # both ways in one


@pytest.mark.integration  # an encoded workspace or a training run: seconds
def test_quiet_and_verbose_after_the_command_name_mean_what_they_mean_before_it(indexed):
    work = indexed
    after = invoke("mine", "de", "en", "-w", work, "-q")
    assert (after.exit_code, after.stdout, after.stderr) == (0, "", ""), after.output

    verbose = invoke("index", "de", "-w", work, "--verbose")
    assert verbose.exit_code == 0 and "debug: " in verbose.stderr, verbose.output
    for args in (
        ["-q", "index", "de", "-v"],
        ["eval", "bucc", "--bucc", work, "--pair", "de-en", "-v", "-q"],
    ):
        both = invoke(*args)
        flat = " ".join(both.output.replace("│", " ").split())
        assert both.exit_code == 2 and "--quiet and --verbose exclude each other" in flat, both.output


def test_quiet_and_verbose_together_are_a_usage_error():
    result = invoke("-q", "-v", "index", "de")
    assert result.exit_code == 2 and "--quiet and --verbose exclude each other" in result.output


@pytest.mark.integration  # an encoded workspace or a training run: seconds
def test_a_run_leaves_logging_and_the_consoles_as_it_found_them(indexed):
    logger = logging.getLogger("bitextmine")
    before = logger.level, logger.propagate, list(logger.handlers)
    result = invoke("-v", "index", "de", "-w", indexed, "--json", "-")
    assert result.exit_code == 0, result.output
    assert (logger.level, logger.propagate, list(logger.handlers)) == before
    assert not out.stderr  # `--json -` sent the summary to stderr for that command only


@pytest.mark.integration  # an encoded workspace or a training run: seconds
def test_json_on_stdout_holds_the_summary_alone_for_every_command(indexed, tmp_path, tiny_model_dir):
    work, model = indexed, str(tiny_model_dir("bert"))
    mined = invoke("mine", "de", "en", "-w", work, "--json", "-")
    assert mined.exit_code == 0, mined.output
    assert json.loads(mined.stdout) == json.loads((work / "mined" / "de-en.stats.json").read_text())
    assert "one-to-one candidates" in mined.stderr  # the printed summary went to stderr

    index_json = tmp_path / "index.json"
    indexed_again = invoke("index", "en", "-w", work, "--json", index_json)
    assert indexed_again.exit_code == 0 and "index en: Flat" in indexed_again.stdout
    assert json.loads(index_json.read_text()) == json.loads((work / "index" / "en.json").read_text())

    lines = sentences(6, seed=3)
    (tmp_path / "x.de").write_text("\n".join(lines) + "\n")
    (tmp_path / "x.en").write_text("\n".join(lines) + "\n")
    scored = invoke(
        "score", tmp_path / "x.de", tmp_path / "x.en", "--src", "de", "--tgt", "en", "-o", tmp_path / "s.tsv",
        "-m", model, "-w", work, "--json", "-",
    )  # fmt: skip
    assert scored.exit_code == 0, scored.output
    summary = json.loads(scored.stdout)
    assert (summary["pair"], summary["pairs"]) == ("de-en", 6)
    assert summary["written"]["path"] == str(tmp_path / "s.tsv")

    args = ["-l", "fr", "--lid", "off", "-m", model, "-w", work]  # word salad, not French
    encoded = invoke("-q", "encode", tmp_path / "x.de", *args, "--json", "-")
    assert encoded.exit_code == 0, encoded.output
    summary = json.loads(encoded.stdout)
    assert (summary["lang"], summary["rows"], summary["counts"]["lines"]) == ("fr", 6, 6)
    assert summary["embedding_dir"] == str(work / "emb" / "fr") and encoded.stderr == ""


@pytest.mark.integration  # the CLI end to end
def test_json_on_stdout_of_eval_and_of_imported_embeddings(tmp_path):
    shared = sentences(8, seed=4)
    write_bucc(tmp_path, shared)
    mined = tmp_path / "de-en.tsv"
    mined.write_text("".join(f"1.5\t{s}\t{s}\tx:{i}\ty:{i}\n" for i, s in enumerate(shared)))
    args = ["eval", "bucc", "--bucc", tmp_path, "--pair", "de-en", "--split", "dev", "--mined", mined]
    evaluated = invoke(*args, "--json", "-")
    assert evaluated.exit_code == 0, evaluated.output
    assert json.loads(evaluated.stdout)["f1"] == 100.0 and "eval bucc de-en dev" in evaluated.stderr

    (tmp_path / "x.it").write_text("".join(f"{s}\n" for s in shared))
    np.save(tmp_path / "x.npy", np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32))
    args = ["encode", tmp_path / "x.it", "-l", "it", "--lid", "off", "--embeddings", tmp_path / "x.npy"]
    args += ["-w", tmp_path / "w"]
    imported = invoke(*args, "--model-name", "elsewhere", "--json", "-")
    assert imported.exit_code == 0, imported.output
    assert json.loads(imported.stdout)["rows"] == 8 and "rows kept" in imported.stderr


@pytest.mark.integration  # an encoded workspace or a training run: seconds
def test_train_json_on_stdout(tmp_path, tiny_model_dir):
    (tmp_path / "toy.de").write_text("ein Hund\nzwei Katzen\ndrei Mäuse\n")
    (tmp_path / "toy.en").write_text("a dog\ntwo cats\nthree mice\n")
    trained = invoke(
        "-q", "train", "--data", tmp_path / "toy.de", "--base", tiny_model_dir("bert"),
        "--out", tmp_path / "o", "--max-steps", "1", "--bf16", "off", "--device", "cpu", "--json", "-",
        "--max-pairs", "2",  # fewer than the 3 distinct pairs: no warning that every batch repeats them
    )  # fmt: skip
    assert trained.exit_code == 0, trained.output
    summary = json.loads(trained.stdout)
    assert (summary["steps"], summary["out"]) == (1, str(tmp_path / "o")) and summary["pairs"] > 0
    assert trained.stderr == ""  # no progress, no checkpoint lines, no summary under -q


def test_exit_status_of_a_user_error_and_a_usage_error(tmp_path):
    user_error = invoke("mine", "de", "en", "-w", tmp_path)
    assert user_error.exit_code == 1 and user_error.stderr.startswith("error: ")
    assert len(user_error.stderr.splitlines()) == 1
    usage = invoke("mine", "de", "en", "--no-such-option")
    assert usage.exit_code == 2 and "No such option" in usage.stderr


@pytest.mark.integration  # an encoded workspace or a training run: seconds
def test_an_interrupt_in_a_command_is_status_130_and_one_line(indexed, monkeypatch):
    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("bitextmine.steps.index.index", interrupted)
    result = invoke("index", "de", "-w", indexed)
    assert result.exit_code == 130 and result.stderr.endswith("interrupted\n"), result.output
    assert "Traceback" not in result.output


@pytest.mark.integration
def test_ctrl_c_while_reading_input_ends_with_interrupted_and_130(tmp_path, tiny_model_dir):
    """A real SIGINT, sent once the command is blocked reading its input (a FIFO nobody writes). `score`
    reads its bitext before torch loads: once torch's threads exist, the kernel may hand the signal to
    one of them, and a main thread blocked in read() would not wake up to raise KeyboardInterrupt."""
    fifo = tmp_path / "x.de"
    os.mkfifo(fifo)
    (tmp_path / "x.en").write_text("a sentence\n")
    args = ["score", fifo, tmp_path / "x.en", "--src", "de", "--tgt", "en", "-o", tmp_path / "o"]
    args += ["-w", tmp_path, "-m", tiny_model_dir("bert")]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, "-m", "bitextmine", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        # A suite started in the background (`pytest &`) ignores SIGINT, its children inherit that, and
        # Python then leaves SIGINT ignored: the command would never see the signal.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    writer = _open_once_read(fifo, child)
    try:
        _wait_blocked_in_read(child)
        child.send_signal(signal.SIGINT)
        stdout, stderr = child.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        state = _main_thread_state(child.pid)
        child.kill()
        raise AssertionError(f"no exit 60 s after SIGINT; its main thread: {state}") from None
    finally:
        os.close(writer)
    assert (child.returncode, stdout, stderr) == (130, "", "interrupted\n")


def _wait_blocked_in_read(child: subprocess.Popen, timeout: float = 10.0) -> None:
    """Until `child`'s main thread sleeps in a pipe read, by Linux's /proc (at most `timeout` seconds:
    where wchan is hidden, the signal then goes as after a pause). A signal that arrives between
    Python's last check for signals and the read() call is handled, but read() then blocks for good: a
    fixed half-second pause left that race open."""
    deadline = time.monotonic() + timeout
    while "pipe" not in _main_thread_state(child.pid) and time.monotonic() < deadline:
        if child.poll() is not None:
            raise AssertionError(f"the command ended before reading its input: {child.communicate()}")
        time.sleep(0.02)


def _main_thread_state(pid: int) -> str:
    """What the kernel says the process's main thread waits in (its wchan; "0" while it runs)."""
    try:
        with open(f"/proc/{pid}/wchan") as fh:
            return fh.read()
    except OSError as exc:
        return f"unknown ({exc.strerror})"


def _open_once_read(fifo, child: subprocess.Popen, timeout: float = 60.0) -> int:
    """The FIFO's write end, opened once `child` has opened it for reading (it then blocks reading)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO or child.poll() is not None or time.monotonic() > deadline:
                child.kill()
                raise AssertionError(f"the command never read its input: {child.communicate()}") from exc
            time.sleep(0.05)


@pytest.mark.integration
def test_a_mistyped_objective_is_a_usage_error_before_torch_loads(tmp_path):
    probe = """
import sys
from typer.testing import CliRunner
from bitextmine.cli import app
args = ["train", "--data", "x", "--out", "o", "--objectives", "contrastive,mexmaa=0.5"]
result = CliRunner().invoke(app, args)
print(result.exit_code, "torch" in sys.modules)
print(" ".join(result.output.replace("│", " ").split()))
"""
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    status, message = result.stdout.splitlines()
    assert status == "2 False"
    assert "unknown objective 'mexmaa': choose from contrastive, mexma, rtl, vmsst, xtr" in message
    assert list(tmp_path.iterdir()) == []
