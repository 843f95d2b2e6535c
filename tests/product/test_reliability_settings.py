"""One check of the mining settings, shared by the command line and the Python API (`MineOptions`,
`FilterSettings` and `parse_filters`, `mine_arrays`), before any work: finite numbers, k in range, a
device that is here, a scratch folder that exists; a one-line ValueError, never a silent empty output."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import bitextmine as bm
from tests.helpers import run, sentences, write_bucc

NAN, INF = float("nan"), float("inf")


def _one_line_value_error(call) -> str:
    with pytest.raises(ValueError) as error:
        call()
    assert isinstance(error.value, bm.BitextmineError) and "\n" not in str(error.value)
    return str(error.value)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"k": 0}, "k must be a whole number from 1 to 4096, not 0"),  # wrote an empty output
        ({"k": -1}, "not -1"),  # numpy's "negative dimensions" after a job attempt
        ({"threshold": NAN}, "threshold must be a finite number, not nan"),  # kept 0 pairs
        ({"threshold": INF}, "not inf"),
        ({"threshold": "abc"}, "--threshold must be a number, auto or auto:PAIR"),
        ({"nprobe": 0}, "nprobe must be a whole number >= 1"),
        ({"job_rows": 0}, "job_rows must be a whole number >= 1"),
        ({"device": "gpu"}, "unknown device 'gpu'"),
        ({"filters": "web"}, "filters must be a FilterSettings"),
    ],
)
def test_mine_options_are_checked_as_the_command_line_checks_them(options, message):
    assert message in _one_line_value_error(lambda: bm.MineOptions(**options))


@pytest.mark.skipif(torch.cuda.device_count() > 7, reason="a machine with a CUDA device 7")
def test_a_cuda_device_that_is_not_here_is_refused_when_the_options_are_made():
    assert "'cuda:7'" in _one_line_value_error(lambda: bm.MineOptions(device="cuda:7"))
    vectors = np.eye(4, dtype=np.float32)
    assert "'cuda:7'" in _one_line_value_error(lambda: bm.mine_arrays(vectors, vectors, device="cuda:7"))


@pytest.mark.parametrize("item", ["score-max=nan", "score-max=inf", "length-ratio=nan", "copies=nan"])
def test_filters_refuse_numbers_that_are_not_finite(item):
    """`--filter score-max=nan` dropped every pair ("0 pairs", exit 0)."""
    name = item.partition("=")[0]
    assert f"--filter {name} must be a finite number" in _one_line_value_error(
        lambda: bm.parse_filters("web", [item])
    )


def test_filter_settings_made_by_hand_are_checked_too():
    for wrong in ({"score_max": NAN}, {"min_chars": -1}, {"min_chars": 1.5}, {"letters": "yes"}):
        _one_line_value_error(lambda wrong=wrong: bm.FilterSettings(**wrong))


def test_mine_refuses_a_nan_filter_before_any_work(tmp_path):
    code, output = run("mine", "de", "en", "-w", str(tmp_path / "w"), "--filter", "score-max=nan")
    assert code == 2 and "score-max must be a finite number" in " ".join(output.split()), output
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("scratch", ["missing", "file"])
def test_mine_arrays_refuses_a_scratch_folder_that_is_not_one(tmp_path, scratch):
    """FileNotFoundError, NotADirectoryError."""
    (tmp_path / "file").write_text("")
    vectors = np.eye(4, dtype=np.float32)
    message = _one_line_value_error(lambda: bm.mine_arrays(vectors, vectors, scratch=tmp_path / scratch))
    assert f"{tmp_path / scratch}: not an existing folder" in message


@pytest.mark.parametrize("size", [-5, 0, 2.5])
def test_sample_split_refuses_a_size_that_is_not_a_count(tmp_path, size):
    """`sample_split(split, -5)` returned an empty split."""
    write_bucc(tmp_path, sentences(6, seed=1))
    split = bm.read_bucc(tmp_path, "de-en", "dev")
    assert "max_sentences must be a whole number >= 1" in _one_line_value_error(
        lambda: bm.sample_split(split, size)
    )
