"""`bitextmine score`: margin scores of an existing bitext, against `mine` and a numpy reference."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bitextmine.encoder.cache import embed
from bitextmine.encoder.encoder import SentenceEncoder
from bitextmine.text.bitext import read_bitext
from bitextmine.text.reader import CorpusError
from tests.helpers import read_mined, run

pytestmark = pytest.mark.integration


def _tsv(path, pairs):
    path.write_text("".join(f"{a}\t{b}\n" for a, b in pairs))
    return path


def test_workspace_neighbourhoods_give_the_scores_mine_gave(indexed_workspace, tiny_model_dir, tmp_path):
    work, _ = indexed_workspace
    model = str(tiny_model_dir("bert"))
    precision = json.loads((work / "emb" / "de" / "manifest.json").read_text())["model"]["precision"]
    assert run("mine", "de", "en", "-w", str(work))[0] == 0
    mined = read_mined(work / "mined" / "de-en.tsv.zst")
    bitext = _tsv(tmp_path / "pairs.tsv", [(r[1], r[2]) for r in mined])
    out = tmp_path / "scored.tsv"
    code, output = run(
        "score", str(bitext), "--src", "de", "--tgt", "en", "-o", str(out), "-m", model, "-w", str(work),
        "--neighbourhood", "workspace", "--precision", precision,
    )  # fmt: skip
    assert code == 0 and "warning" not in output, output
    scored = [line.split("\t") for line in out.read_text().splitlines()]
    assert [(r[1], r[2]) for r in scored] == [(r[1], r[2]) for r in mined]  # input order, same text
    np.testing.assert_allclose([float(r[0]) for r in scored], [float(r[0]) for r in mined], atol=2e-6)
    assert [r[3] for r in scored] == [f"{bitext}:{n}" for n in range(1, len(mined) + 1)]
    other = "fp32" if precision != "fp32" else "bf16"
    code, output = run(
        "score", str(bitext), "--src", "de", "--tgt", "en", "-o", str(out), "-m", model, "-w", str(work),
        "--neighbourhood", "workspace", "--precision", other,
    )  # fmt: skip
    assert code == 0 and f"encoded in {precision}, the bitext in {other}" in " ".join(output.split())


def test_bitext_neighbourhoods_match_a_numpy_reference(tiny_model_dir, tmp_path):
    model = str(tiny_model_dir("bert"))
    src = ["ein Hund schläft", "die Katze", "ein Haus am See", "Regen", "Sonne und Mond", "zwei Bäume"]
    tgt = ["a dog sleeps", "the cat", "a house by the lake", "rain", "sun and moon", "two trees"]
    (tmp_path / "x.de").write_text("\n".join(src) + "\n")
    (tmp_path / "x.en").write_text("\n".join(tgt) + "\n")
    out = tmp_path / "scored.jsonl"
    code, output = run(
        "score", str(tmp_path / "x.de"), str(tmp_path / "x.en"), "--src", "de", "--tgt", "en", "-o", str(out),
        "-m", model, "-w", str(tmp_path / "work"), "-k", "3", "--precision", "fp32",
    )  # fmt: skip
    assert code == 0, output
    got = [json.loads(line) for line in out.read_text().splitlines()]
    encoder = SentenceEncoder.load(model, device="cpu", precision="fp32")
    x, y = embed(encoder, src).astype(np.float64), embed(encoder, tgt).astype(np.float64)
    sims = x @ y.T
    fwd = np.sort(sims, axis=1)[:, -3:].mean(1)
    bwd = np.sort(sims, axis=0)[-3:, :].mean(0)
    want = np.diag(sims) / ((fwd + bwd) / 2)
    np.testing.assert_allclose([g["score"] for g in got], want, atol=2e-6)
    assert [(g["src"], g["tgt"], g["src_line"]) for g in got] == list(zip(src, tgt, range(1, 7), strict=True))
    assert {g["src_file"] for g in got} == {str(tmp_path / "x.de")}


def test_threshold_and_filters_keep_only_what_passes(tiny_model_dir, tmp_path):
    model = str(tiny_model_dir("bert"))
    pairs = [
        ("ein Hund schläft", "a dog sleeps"),
        ("04.07.2002", "04.07.2002"),
        ("Hallo", "Hallo"),
        ("", "x"),
    ]
    bitext = _tsv(tmp_path / "b.tsv", pairs)
    common = ["--src", "de", "--tgt", "en", "-m", model, "-w", str(tmp_path / "work"), "-k", "2"]
    code, output = run("score", str(bitext), "-o", str(tmp_path / "all.tsv"), *common)
    assert code == 0 and "3 pairs scored (1 with an empty side left out), 3 written" in " ".join(
        output.split()
    )
    code, output = run(
        "score",
        str(bitext),
        "-o",
        str(tmp_path / "f.tsv"),
        *common,
        "--filter",
        "letters",
        "--filter",
        "copies",
    )
    assert code == 0, output
    assert [r.split("\t")[1] for r in (tmp_path / "f.tsv").read_text().splitlines()] == ["ein Hund schläft"]
    code, output = run("score", str(bitext), "-o", str(tmp_path / "t.tsv"), *common, "--threshold", "99")
    assert code == 0 and (tmp_path / "t.tsv").read_text() == ""
    assert "threshold 99.0000: given on the command line" in " ".join(output.split())


def test_bad_bitexts_are_one_line_errors(tmp_path):
    (tmp_path / "a").write_text("1\n2\n3\n")
    (tmp_path / "b").write_text("1\n2\n")
    (tmp_path / "t.tsv").write_text("a\tb\nonly one column\n")
    with pytest.raises(
        CorpusError, match=r"a has more lines than .*b: the two files of a bitext must be line-aligned"
    ):
        read_bitext([str(tmp_path / "a"), str(tmp_path / "b")])
    with pytest.raises(CorpusError, match=r"a has more lines than .*b: "):
        read_bitext([str(tmp_path / "b"), str(tmp_path / "a")])
    with pytest.raises(CorpusError, match=r"t.tsv:2: expected at least 2 TAB-separated columns, found 1"):
        read_bitext([str(tmp_path / "t.tsv")])
    code, output = run(
        "score",
        str(tmp_path / "a"),
        str(tmp_path / "b"),
        "--src",
        "de",
        "--tgt",
        "en",
        "-o",
        str(tmp_path / "o.tsv"),
        "-m",
        "x",
    )
    assert code == 1 and "must be line-aligned" in output and "Traceback" not in output


def test_a_plain_score_creates_no_workspace_writes_absolute_ids_and_titles_its_table(
    tiny_model_dir, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BITEXTMINE_WORKDIR", raising=False)
    (tmp_path / "x.de").write_text("ein Hund\nzwei Katzen\nein Haus\n")
    (tmp_path / "x.en").write_text("a dog\ntwo cats\na house\n")
    model = str(tiny_model_dir("bert"))
    args = ["score", "x.de", "x.en", "--src", "de", "--tgt", "en", "-m", model, "-k", "2"]
    code, output = run(*args, "-o", "s.tsv")
    assert code == 0, output
    assert not (tmp_path / "bitextmine-work").exists()  # no cache in the current directory unasked
    rows = [line.split("\t") for line in (tmp_path / "s.tsv").read_text().splitlines()]
    want = [(f"{tmp_path}/x.de:{n}", f"{tmp_path}/x.en:{n}") for n in (1, 2, 3)]
    assert [(r[3], r[4]) for r in rows] == want
    flat = " ".join(output.split())
    assert "first pairs written de-en, in input order" in flat and "top pairs" not in flat
    code, output = run(*args, "-o", "t.tsv", "-w", "work")  # asked: the vectors are cached there
    assert code == 0 and any((tmp_path / "work" / "cache" / "embeddings").iterdir()), output
