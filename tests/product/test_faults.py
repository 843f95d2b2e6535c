"""Fault injection: each command is killed with SIGKILL at named points (bitextmine/faults.py) early,
in the middle and during its final write; the rerun's outputs must be byte-identical to an
uninterrupted run's, so no row is lost or duplicated. JSON records are compared without their timings.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bitextmine.faults import FAULT_ENV
from tests.helpers import outputs, sentences

pytestmark = pytest.mark.integration  # the CLI end to end (docs: make test-fast leaves these out)


def cli(work: Path, *args: str, fault: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    if fault:
        env[FAULT_ENV] = fault
    command = [sys.executable, "-m", "bitextmine", *args, "--workdir", str(work)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory, tiny_model_dir):
    """Inputs, the commands of a small pipeline, and the workspace after each uninterrupted step."""
    root = tmp_path_factory.mktemp("faults")
    model = str(tiny_model_dir("bert"))
    shared = sentences(20, seed=0)
    inputs = {"de": shared + sentences(40, seed=1), "en": sentences(35, seed=2) + shared}
    steps = []
    for lang, lines in inputs.items():
        path = root / f"{lang}.txt"
        path.write_text("\n".join(lines) + "\n")
        steps.append(
            (
                f"encode-{lang}",
                [
                    "encode",
                    str(path),
                    "-l",
                    lang,
                    "-m",
                    model,
                    "--shard-size",
                    "10",
                    "--precision",
                    "fp32",
                    "--threads",
                    "1",
                    "--lid",
                    "off",  # word salad under both labels
                ],
            )
        )
    steps += [
        ("index-de", ["index", "de", "--max-memory", "0.000002", "--factory", "IVF1,Flat"]),  # FAISS shards
        ("index-en", ["index", "en"]),
        ("mine", ["mine", "de", "en", "--job-rows", "16"]),
    ]
    snapshots, after = {}, {}
    work = root / "reference"
    work.mkdir()
    for name, args in steps:
        snapshots[name] = root / f"before-{name}"
        shutil.copytree(work, snapshots[name])
        done = cli(work, *args)
        assert done.returncode == 0, done.stderr
        after[name] = outputs(work)
    return dict(steps), snapshots, after


# (step, fault point): early, middle, and during the final write of each command. Encode writes its
# input's corpus part, 6 text shards, the corpus manifest, the embeddings manifest, then per shard its
# vectors and record (21 writes for de); index-de writes a template, 3 shards and its json; mine writes
# 4 + 4 neighbour blocks (60 and 55 queries in blocks of 16), 8 sorted candidate runs in its selection
# scratch, the mined file and the stats.
FAULTS = [
    ("encode-de", "before-rename@1"),
    ("encode-de", "after-rename@13"),
    ("encode-de", "before-rename@21"),
    ("index-de", "after-rename@2"),
    ("mine", "after-rename@1"),
    ("mine", "after-rename@6"),
    ("mine", "selection.run@3"),  # scratch files of the candidate selection left behind
    ("mine", "before-rename@9"),
]


@pytest.mark.parametrize(("step", "fault"), FAULTS)
def test_killed_step_resumes_to_identical_outputs(pipeline, tmp_path, step, fault):
    steps, snapshots, after = pipeline
    work = tmp_path / "work"
    shutil.copytree(snapshots[step], work)
    killed = cli(work, *steps[step], fault=fault)
    assert killed.returncode == -signal.SIGKILL, f"{fault} was not reached: {killed.stderr}"
    rerun = cli(work, *steps[step])
    assert rerun.returncode == 0, rerun.stderr
    got, want = outputs(work), after[step]
    assert sorted(got) == sorted(want)
    for name, content in want.items():
        assert got[name] == content, name
    assert not list(work.rglob(".*.tmp-*")), "a temporary file was left behind"


def test_no_row_lost_or_duplicated_in_the_reference(pipeline):
    _, _, after = pipeline
    reference = after["mine"]
    vectors = [k for k in reference if k.startswith("emb/de/") and k.endswith(".npy")]
    rows = sum(np.load(io.BytesIO(reference[k])).shape[0] for k in vectors)
    assert rows == 60
