"""examples/mining/Makefile on a small real workspace (the tiny test model, an exact index): the first run
encodes, indexes, calibrates, mines and evaluates; the second finds every target up to date."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import zstandard

from tests.helpers import REPO, TRAINING_TEXT

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_the_second_make_run_does_nothing(tmp_path, tiny_model_dir):
    german, english = TRAINING_TEXT[1::2], TRAINING_TEXT[0::2]  # real sentences: `encode --lid` keeps them
    (tmp_path / "mono").mkdir()
    for lang, lines in (("de", german), ("en", english)):
        text = "".join(f"{line}\n" for line in lines).encode()
        (tmp_path / "mono" / f"news.{lang}.txt.zst").write_bytes(zstandard.compress(text))
    bucc = tmp_path / "bucc" / "de-en"
    bucc.mkdir(parents=True)
    for lang, lines in (("de", german), ("en", english)):
        (bucc / f"de-en.dev.{lang}").write_text("".join(f"{lang}-{i}\t{s}\n" for i, s in enumerate(lines)))
    (bucc / "de-en.dev.gold").write_text("".join(f"de-{i}\ten-{i}\n" for i in range(len(german))))
    command = tmp_path / "bitextmine"
    command.write_text(f'#!/bin/sh\nPYTHONPATH="{REPO}" exec "{sys.executable}" -m bitextmine "$@"\n')
    command.chmod(0o755)
    make = [
        "make", "-C", str(REPO / "examples" / "mining"), "LANGS=de", f"MONO={tmp_path / 'mono'}",
        f"BUCC={tmp_path / 'bucc'}", f"MODEL={tiny_model_dir('bert')}", f"WORK={tmp_path / 'work'}",
        f"BITEXTMINE={command}", f"PYTHON={sys.executable}", "THREADS=1", "all",
    ]  # fmt: skip
    env = {key: value for key, value in os.environ.items() if not key.startswith("MAKE")}
    first = subprocess.run(make, capture_output=True, text=True, env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "bitextmine index de" in first.stdout and not (tmp_path / "work" / "index" / "de.faiss").exists()
    second = subprocess.run(make, capture_output=True, text=True, env=env)
    assert second.returncode == 0, second.stdout + second.stderr
    assert " -m bitextmine" not in second.stdout and "bitextmine " not in second.stdout, second.stdout
    assert subprocess.run([*make[:-1], "-q", "all"], env=env).returncode == 0  # make -q: up to date
