"""What the CLI prints in a log file (stderr not a terminal): plain progress lines, not a bar's last frame."""

from __future__ import annotations

import io

from rich.console import Console
from rich.progress import TimeRemainingColumn

from bitextmine import progress as progress_module
from bitextmine.cli.output import ProgressDisplay
from bitextmine.cli.train import _LiveReporter
from bitextmine.progress import LOG_EVERY_SECONDS


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_progress_in_a_log_is_a_line_every_interval_and_one_at_the_end(capsys):
    clock = Clock()
    with ProgressDisplay("encoding", 400, rates=True, clock=clock) as progress:
        for _ in range(8):  # 50 sentences of 500 tokens every 10 s
            clock.now += 10
            progress.advance(50, 500)
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "encoding: 150/400 (38%), 5.0 sent/s, 50 tok/s, 0:00:30, 0:00:50 left",
        "encoding: 300/400 (75%), 5.0 sent/s, 50 tok/s, 0:01:00, 0:00:20 left",
        "encoding: 400/400 (100%), 5.0 sent/s, 50 tok/s, 0:01:20",
    ]
    assert LOG_EVERY_SECONDS == 30


def test_a_total_learned_late_and_no_total(capsys):
    clock = Clock()
    with ProgressDisplay("mining de-en", None, clock=clock) as progress:
        progress.advance(7)
        progress.set_total(10)
        progress.advance(3)
    assert capsys.readouterr().err == "mining de-en: 10/10 (100%), 0:00:00\n"
    with ProgressDisplay("indexing", None, clock=clock) as progress:
        progress.advance(5)
    assert capsys.readouterr().err == "indexing: 5, 0:00:00\n"


def test_nothing_to_do_is_no_progress_line(capsys):
    with ProgressDisplay("encoding", 0):  # a rerun that finds every shard done
        pass
    assert capsys.readouterr().err == ""


def test_training_in_a_log_is_a_line_every_interval_after_evaluations_and_at_the_end(capsys):
    clock = Clock()
    reporter = _LiveReporter(clock=clock)
    reporter.last_line = clock.now
    record = {"step": 1, "loss": 2.5, "lr": 1e-5, "pairs_per_s": 12.0, "elapsed_s": 60.0}
    for step in range(1, 5):  # a step every 20 s
        clock.now += 20
        reporter.step(record | {"step": step})
    reporter.evaluated(4, {"tatoeba": 91.234})
    reporter.close()
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "train: step 2, loss 2.5000, lr 1.00e-05, pairs/s 12.0, elapsed 1.0 min"
    assert lines[1] == "train: step 4, loss 2.5000, lr 1.00e-05, pairs/s 12.0, elapsed 1.0 min"
    assert lines[2].endswith("tatoeba (step 4) 91.23") and lines[3] == lines[2] and len(lines) == 4


def test_one_display_shows_each_stage_a_step_opens(capsys):
    """A step reports to one Progress, stage after stage (mine-files: encode, index, mine)."""
    clock = Clock()
    with ProgressDisplay(clock=clock) as progress:
        with progress.stage("indexing de", 4):
            progress.advance(4)
        with progress.stage("mining de-en", 10):
            clock.now += 20
            progress.advance(10)
    assert capsys.readouterr().err.splitlines() == [
        "indexing de: 4/4 (100%), 0:00:00",
        "mining de-en: 10/10 (100%), 0:00:20",
    ]


def test_reused_vectors_count_as_done_but_not_towards_the_encoding_rate(capsys):
    clock = Clock()
    with ProgressDisplay("calibrating", 3000, rates=True, clock=clock) as progress:
        progress.advance(2977, reused=True)
        clock.now += 5
        progress.advance(23, 80)
    assert capsys.readouterr().err == (
        "calibrating: 3,000/3,000 (100%), 2,977 reused, 23 encoded, 4.6 sent/s, 16 tok/s, 0:00:05\n"
    )
    with ProgressDisplay("calibrating", 10, rates=True, clock=clock) as progress:
        clock.now += 1
        progress.advance(10, reused=True)
    assert capsys.readouterr().err == "calibrating: 10/10 (100%), 10 reused, 0 encoded, 0:00:01\n"


def test_a_bar_on_a_terminal_shows_the_time_left_and_what_was_reused():
    console = Console(file=io.StringIO(), force_terminal=True, width=200)
    with progress_module.ProgressDisplay("encoding", 100, rates=True, console=console) as progress:
        assert progress.bar is not None
        assert any(isinstance(column, TimeRemainingColumn) for column in progress.bar.columns)
        progress.advance(60, reused=True)
        progress.advance(20, 100)
        task = progress.bar.tasks[0]
        assert task.fields["reused"] == 60 and task.completed == 80
