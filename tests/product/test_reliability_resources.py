"""Running out of disk or memory: the candidate selection reserves its scratch space before it maps it (a
full disk is one line naming the folder and the bytes, not SIGBUS), and an out-of-memory error is one
line naming the option that bounds the command's memory."""

from __future__ import annotations

import errno
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bitextmine.errors import BitextmineError
from bitextmine.mining import selection
from bitextmine.workspace.locks import file_lock
from tests.helpers import TRAINING_TEXT, run


def _no_space(*_args: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.integration
def test_a_full_disk_in_the_selection_is_one_line_naming_the_scratch_and_bytes(workspace, monkeypatch):
    work, _ = workspace
    for lang in ("de", "en"):
        code, output = run("index", lang, "-w", str(work))
        assert code == 0, output
    monkeypatch.setattr(os, "posix_fallocate", _no_space)
    code, output = run("mine", "de", "en", "-w", str(work))
    message = " ".join(output[output.find("error:") :].split())
    assert code == 1 and message.startswith("error:") and "Traceback" not in output, output
    scratch = next((work / "mined" / ".neighbours").glob("de-en-*")) / "selection"
    assert f"{scratch}: cannot store 328 bytes of scratch data" in message  # 25 float64 + the .npy header
    assert "fwd-mean.npy: No space left on device; free some space and rerun" in message


def _under_file_size_limit(limit: int, *args: str) -> str:
    """`bitextmine ARGS` in a process whose files may not grow past `limit` bytes (`ulimit -f`): its
    one-line error."""

    def lower_limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # as Python does: the write fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    done = subprocess.run(
        [sys.executable, "-m", "bitextmine", *args], capture_output=True, text=True, preexec_fn=lower_limit
    )
    output = done.stdout + done.stderr
    assert done.returncode == 1 and "Traceback" not in output, output
    return " ".join(output[output.index("error:") :].split())


@pytest.mark.integration
def test_a_file_size_limit_is_one_line_naming_the_file_and_the_limit(indexed_workspace, tmp_path):
    work, _ = indexed_workspace
    mine = ["mine", "de", "en", "-w", str(work), "--threshold", "0", "--filters", "none"]
    ran_out = "cannot write: File too large; past the largest file allowed (ulimit -f"
    # numpy's own writer cut a neighbour list silently here, which the selection then found damaged
    message = _under_file_size_limit(300, *mine)
    assert "/fwd-000000000000-000000000025.npy: " + ran_out in message
    assert run(*mine)[0] == 0  # the neighbour lists, so that the output is what meets the limit
    out = tmp_path / "x.tsv"
    assert f"{out}: {ran_out}" in _under_file_size_limit(2000, *mine, "-o", str(out), "--format", "tsv")


@pytest.mark.integration
def test_an_embedding_shard_past_the_file_size_limit_says_so(tiny_model_dir, tmp_path):
    corpus = tmp_path / "de.txt"  # short lines: the shard of their vectors is the largest file
    corpus.write_text("".join(f"w{i}\n" for i in range(200)))
    work = tmp_path / "w"
    args = ["encode", str(corpus), "-l", "de", "-m", str(tiny_model_dir("bert")), "-w", str(work)]
    # the language code's check loads py3langid, which unpacks its model into a file past this limit
    message = _under_file_size_limit(8000, *args, "--lid", "off")
    assert "py3langid cannot unpack its model into a temporary file: File too large" in message
    message = _under_file_size_limit(8000, *args, "--lid", "off", "--force-lang")
    shard = work / "emb" / "de" / "shard-00000.npy"  # numpy's own writer said "N requested and M written"
    assert f"{shard}: cannot write: File too large; past the largest file allowed (ulimit -f" in message


def test_a_full_disk_when_a_lock_records_its_holder_names_the_lock_file(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "pwrite", _no_space)
    with pytest.raises(BitextmineError) as caught, file_lock(tmp_path / "x.lock", exclusive=True):
        pass
    assert str(caught.value) == (
        f"{tmp_path / 'x.lock'}: cannot record this run as the lock's holder: No space left on device; "
        "free some space and rerun"
    )


def test_scratch_arrays_are_allocated_not_sparse(tmp_path):
    array = selection._scratch_array(tmp_path / "a.npy", np.float64, 1_000_000)
    assert array.shape == (1_000_000,) and not array.any()
    assert os.stat(tmp_path / "a.npy").st_blocks * 512 >= 8_000_000


@pytest.mark.parametrize("refusal", ["missing", errno.EOPNOTSUPP])
def test_without_posix_fallocate_zeros_are_written_after_the_header(tmp_path, monkeypatch, refusal):
    if refusal == "missing":
        monkeypatch.delattr(os, "posix_fallocate", raising=False)
    else:
        monkeypatch.setattr(os, "posix_fallocate", lambda *_: _raise(OSError(refusal, os.strerror(refusal))))
    monkeypatch.setattr(selection, "ZERO_CHUNK", 4096)
    array = selection._scratch_array(tmp_path / "a.npy", np.int64, 100_000)
    array[:3] = [7, 8, 9]
    array.flush()
    assert os.stat(tmp_path / "a.npy").st_blocks * 512 >= 800_000
    assert np.load(tmp_path / "a.npy")[:4].tolist() == [7, 8, 9, 0]  # the header is intact


def _raise(exc: BaseException) -> None:
    raise exc


@pytest.fixture
def pairs(tmp_path) -> Path:
    (tmp_path / "toy.de").write_text("\n".join(TRAINING_TEXT[1::2]) + "\n")
    (tmp_path / "toy.en").write_text("\n".join(TRAINING_TEXT[0::2]) + "\n")
    return tmp_path / "toy.de"


CUDA_OOM = (
    "CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which "
    "1.2 GiB is free. Including non-PyTorch memory, this process has 77.8 GiB memory in use."
)


@pytest.mark.parametrize(
    ("command", "target", "hint"),
    [
        (["index", "de", "-w", "{work}"], "bitextmine.steps.index.index", "pass --max-memory GB"),
        (["mine", "de", "en", "-w", "{work}"], "bitextmine.steps.mine.mine", "lower --job-rows"),
        (
            ["train", "--data", "{pairs}", "--out", "{work}/out", "--base", "x", "--max-steps", "1"],
            "bitextmine.train.loop.train",
            "lower --max-tokens or --max-pairs",
        ),
    ],
)
@pytest.mark.parametrize("error", ["MemoryError", "CUDA"])
def test_out_of_memory_is_one_line_naming_the_option_to_lower(
    command, target, hint, error, tmp_path, pairs, monkeypatch
):
    def exhausted(*_args: object, **_kwargs: object) -> None:
        if error == "CUDA":
            raise torch.cuda.OutOfMemoryError(CUDA_OOM)
        raise MemoryError(
            "Unable to allocate 8.00 GiB for an array with shape (10**9,) and data type float64"
        )

    module, name = target.rsplit(".", 1)
    monkeypatch.setattr(f"{module}.{name}", exhausted)
    monkeypatch.setattr("bitextmine.workspace.language.open_language", lambda *_: _Sized())
    code, output = run(*(part.format(work=tmp_path, pairs=pairs) for part in command))
    message = " ".join(output[output.find("error:") :].split())
    assert code == 1 and message.startswith("error: out of memory (") and hint in message, output
    if error == "CUDA":
        assert "(CUDA out of memory. Tried to allocate 20.00 GiB);" in message
        assert "non-PyTorch" not in message
    else:
        assert "(Unable to allocate 8.00 GiB for an array" in message


class _Sized:
    """What the CLI asks of an opened language before the step: the number of vectors."""

    vectors = range(10)


@pytest.mark.integration
def test_a_job_out_of_memory_is_not_retried_and_names_the_option(workspace, monkeypatch):
    work, _ = workspace
    for lang in ("de", "en"):
        code, output = run("index", lang, "-w", str(work))
        assert code == 0, output
    calls = []

    def exhausted(*_args: object, **_kwargs: object) -> None:
        calls.append(1)
        raise MemoryError()

    monkeypatch.setattr("bitextmine.steps.mine.neighbours_job", exhausted)
    monkeypatch.setattr("bitextmine.steps.mine.both_ways_job", exhausted)  # two exact indexes: one job
    code, output = run("mine", "de", "en", "-w", str(work), "--retries", "2")
    message = " ".join(output.split())
    assert code == 1 and "error: out of memory (MemoryError); lower --job-rows" in message, output
    assert calls == [1]
