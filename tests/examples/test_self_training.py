"""examples/self_training.py end to end on a tiny model: two mining rounds around one training round,
the dev sentences kept out of training, the known-translation precision counted by hand."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import zstandard

from tests.helpers import REPO, sentences, write_bucc

pytestmark = pytest.mark.integration


def _zst(path, lines: list[str]) -> None:
    path.write_bytes(zstandard.ZstdCompressor().compress("".join(f"{x}\n" for x in lines).encode()))


def test_self_training_mines_trains_on_what_it_mined_and_mines_again(tmp_path, tiny_model_dir):
    bucc, mono = tmp_path / "bucc", tmp_path / "mono"
    bucc.mkdir(), mono.mkdir()
    dev_shared = sentences(8, seed=4)
    write_bucc(bucc, dev_shared)
    news = sentences(30, seed=11)  # identical on both sides: the tiny model's sure translations
    _zst(mono / "news.de.txt.zst", dev_shared + news + sentences(10, seed=12))
    _zst(mono / "news.en.txt.zst", sentences(10, seed=13) + news + dev_shared)
    (tmp_path / "known.de").write_text("".join(f"{s}\n" for s in news[:20]))
    (tmp_path / "known.en").write_text("".join(f"{s}\n" for s in news[:10] + news[11:21]))  # 10 off by one

    work = tmp_path / "work"
    args = ["--model", str(tiny_model_dir("bert")), "--mono", str(mono), "--bucc", str(bucc)]
    args += ["--work", str(work), "--known", str(tmp_path / "known"), "--rounds", "1", "--steps", "2"]
    args += ["--filters", "none"]  # the sure translations are identical sentences: web drops them as copies
    result = subprocess.run(
        [sys.executable, str(REPO / "examples" / "self_training.py"), *args], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    rows = re.findall(
        r"^\| (\d) \| ([\d.]+) \| ([\d.]+) \| ([\d,]+) \| ([\d.]+)% \((\d+) of (\d+)\) \|$",
        result.stdout,
        re.M,
    )
    assert [row[0] for row in rows] == ["0", "1"], result.stdout

    mined = [line.split("\t") for line in zstandard.open(work / "round-0" / "mined" / "de-en.tsv.zst", "rt")]
    known = dict(zip(news[:20], news[:10] + news[11:21], strict=True))
    judged = [(row[1], row[2]) for row in mined if row[1] in known]
    assert judged and rows[0][5:] == (str(sum(known[s] == t for s, t in judged)), str(len(judged)))

    model = work / "model-1"
    trained = json.loads((model / "bitextmine.json").read_text())
    assert trained["training"]["steps"] == 2
    assert trained["training"]["excluded_pairs_seen"] > 0  # the mined dev pairs were not trained on
    log = [json.loads(line) for line in (model / "train_log.jsonl").read_text().splitlines()]
    assert log and all(r["lr"] > 0 for r in log if "lr" in r)
    assert (work / "round-1" / "mined" / "de-en.tsv.zst").is_file()
