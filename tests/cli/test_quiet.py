"""-q/--quiet, one rule for every command: nothing is printed but warnings, errors and what was asked
for on stdout (`--json -`); no summary table, not even on a rerun that finds the work done."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from bitextmine.cli import app
from tests.helpers import TRAINING_TEXT, sentences, write_bucc

pytestmark = pytest.mark.integration

FAST = ["--precision", "fp32", "--threads", "1"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_model_dir) -> dict[str, str]:
    """Inputs for every command: two corpora, a BUCC split, Tatoeba and FLORES folders, a workspace."""
    root = tmp_path_factory.mktemp("quiet")
    shared = sentences(8, seed=0)
    for name, lines in {"de": shared + sentences(6, seed=1), "en": sentences(5, seed=2) + shared}.items():
        (root / f"{name}.txt").write_text("\n".join(lines) + "\n")
    (root / "bucc").mkdir()
    write_bucc(root / "bucc", shared)
    for folder, files in {
        "tatoeba": ["tatoeba.deu-eng.deu", "tatoeba.deu-eng.eng"],
        "flores": ["deu.dev", "eng.dev"],
    }.items():
        (root / folder).mkdir()
        for name in files:
            (root / folder / name).write_text("\n".join(shared) + "\n")
    (root / "mined.tsv").write_text("".join(f"1.5\t{s}\t{s}\tx:{i}\ty:{i}\n" for i, s in enumerate(shared)))
    (root / "parallel").mkdir()
    (root / "parallel" / "p.de").write_text("\n".join(TRAINING_TEXT[1::2]) + "\n")
    (root / "parallel" / "p.en").write_text("\n".join(TRAINING_TEXT[0::2]) + "\n")
    (root / "dict.txt").write_text("hund dog\nmann man\nkinder children\n")
    return {"root": str(root), "model": str(tiny_model_dir("bert")), "work": str(root / "work")}


def _commands(s: dict[str, str]) -> dict[str, list[str]]:
    """Each command's arguments, in an order where each may read what the ones before it wrote."""
    root, model, work = s["root"], s["model"], s["work"]
    mw, fast = f"-m {model} -w {work}", " ".join(FAST)
    lines = {
        "encode de": f"encode {root}/de.txt -l de --lid off {mw} {fast}",
        "encode en": f"encode {root}/en.txt -l en --lid off {mw} {fast}",
        "index de": f"index de -w {work}",
        "index en": f"index en -w {work}",
        "mine": f"mine de en -w {work}",
        "mine-files": f"mine-files {root}/de.txt {root}/en.txt --src de --tgt en --lid off "
        f"-o {root}/pairs.tsv -m {model} -w {root}/mf",
        "score": f"score {root}/de.txt {root}/de.txt --src de --tgt en -o {root}/scored.tsv {mw}",
        "calibrate": f"calibrate --bucc {root}/bucc --pair de-en {mw} {fast}",
        "eval bucc": f"eval bucc --bucc {root}/bucc --pair de-en --split dev --mined {root}/mined.tsv",
        "eval tatoeba": f"eval tatoeba --data {root}/tatoeba {mw} {fast}",
        "eval xsim": f"eval xsim --data {root}/flores --langs deu {mw}",
        "eval words": f"eval words --pair de-en --parallel {root}/parallel/p --dict {root}/dict.txt "
        f"-m {model} --pairs 2 --sentence-pairs 3 --samplings 1 -k 2",
        "eval tokens": f"eval tokens --flores {root}/flores -m {model} --query-sentences 2 --neighbors 2",
        "train": f"train --data {root}/parallel/p.de --base {model} --out {root}/trained --max-steps 1 "
        "--bf16 off --device cpu --max-pairs 2",  # batches below the distinct pairs: no warning
    }
    return {name: line.split() for name, line in lines.items()}


def test_quiet_prints_nothing_on_any_command_and_json_alone_with_json_dash(setup):
    runner = CliRunner()
    for name, args in _commands(setup).items():
        quiet = runner.invoke(app, ["-q", *args])
        assert quiet.exit_code == 0, (name, quiet.output)
        assert (quiet.stdout, quiet.stderr) == ("", ""), name
        again = runner.invoke(app, [*args, "-q", "--json", "-"])  # a rerun: the work is found done
        assert again.exit_code == 0, (name, again.output)
        assert again.stderr == "", name
        assert isinstance(json.loads(again.stdout), dict), name
