"""`mine --output/--format`: every format holds the same pairs, loads with Hugging Face datasets, and
pair filters change what is written and count what they dropped."""

from __future__ import annotations

import gzip
import json
import sys

import pytest

from bitextmine.errors import BitextmineError
from bitextmine.files import OutputTarget
from bitextmine.mining.filters import NO_FILTERS, WEB, PairFilter
from bitextmine.mining.mined_file import write_pairs
from tests.helpers import read_mined, run, sentences

pytestmark = pytest.mark.integration


def _mine(work, *args):
    code, output = run("mine", "de", "en", "-w", str(work), "--threshold", "1.0", *args)
    assert code == 0, output
    return output


def _records(tsv_rows):
    return [
        {
            "score": float(r[0]),
            "src": r[1],
            "tgt": r[2],
            "src_file": r[3].rsplit(":", 1)[0],
            "src_line": int(r[3].rsplit(":", 1)[1]),
            "tgt_file": r[4].rsplit(":", 1)[0],
            "tgt_line": int(r[4].rsplit(":", 1)[1]),
        }
        for r in tsv_rows
    ]


def test_every_format_holds_the_same_pairs_and_loads_with_datasets(indexed_workspace, tmp_path):
    import datasets  # a dev dependency: this test is why
    import pyarrow.parquet as pq

    work, _ = indexed_workspace
    _mine(work)
    reference = _records(read_mined(work / "mined" / "de-en.tsv.zst"))
    assert reference and reference[0]["src_file"] == str(work.parent / "de.txt")

    _mine(work, "--output", str(tmp_path / "pairs.tsv.gz"))
    with gzip.open(tmp_path / "pairs.tsv.gz", "rt") as fh:
        assert _records([line.rstrip("\n").split("\t") for line in fh]) == reference

    reference = [{**r, "translation": {"de": r["src"], "en": r["tgt"]}} for r in reference]
    _mine(work, "--format", "jsonl")
    jsonl = work / "mined" / "de-en.jsonl"
    assert [json.loads(line) for line in jsonl.read_text().splitlines()] == reference
    stats = json.loads((work / "mined" / "de-en.stats.json").read_text())
    assert stats["output"] == {"path": "mined/de-en.jsonl", "format": "jsonl"}

    _mine(work, "-o", str(tmp_path / "pairs.parquet"))
    described = json.loads(pq.read_schema(tmp_path / "pairs.parquet").metadata[b"bitextmine"])
    model = json.loads((work / "emb" / "de" / "manifest.json").read_text())["model"]
    assert (described["model"], described["fingerprint"]) == (model["name"], model["fingerprint"])
    assert (described["margin"], described["k"], described["threshold"]) == ("ratio", 4, 1.0)
    for kind, files in (("parquet", tmp_path / "pairs.parquet"), ("json", jsonl)):
        loaded = datasets.load_dataset(
            kind, data_files=str(files), split="train", cache_dir=str(tmp_path / "hf")
        )
        rows = loaded.to_list()
        assert [{**r, "score": pytest.approx(r["score"])} for r in rows] == reference


def test_reruns_write_identical_bytes_in_every_format(indexed_workspace, tmp_path):
    work, _ = indexed_workspace
    for name in ("a.tsv.gz", "a.parquet", "a.jsonl"):
        _mine(work, "-o", str(tmp_path / name))
        first = (tmp_path / name).read_bytes()
        _mine(work, "-o", str(tmp_path / name))
        assert (tmp_path / name).read_bytes() == first, name


def test_an_unknown_output_suffix_is_a_one_line_error(indexed_workspace, tmp_path):
    work, _ = indexed_workspace
    code, output = run("mine", "de", "en", "-w", str(work), "-o", str(tmp_path / "pairs.csv"))
    assert code == 1 and "pairs.csv: cannot tell the output format from its name; pass --format" in output


def test_filters_drop_and_count_and_the_summary_says_so(indexed_workspace):
    """The fixture's 10 shared sentences are identical on both sides: the copies filter drops them."""
    work, shared = indexed_workspace
    _mine(work, "--filters", "none")
    unfiltered = read_mined(work / "mined" / "de-en.tsv.zst")
    assert {r[1] for r in unfiltered if r[1] == r[2]} == set(shared)
    output = _mine(work, "--filters", "none", "--filter", "copies", "--filter", "letters")
    rows = read_mined(work / "mined" / "de-en.tsv.zst")
    assert not [r for r in rows if r[1] == r[2]] and len(rows) == len(unfiltered) - 10
    stats = json.loads((work / "mined" / "de-en.stats.json").read_text())
    assert stats["counts"]["filtered"] == {"letters": 0, "copies": 10}
    assert stats["counts"]["above_threshold"] == len(unfiltered) and stats["counts"]["kept"] == len(rows)
    assert stats["options"]["filters"]["copies"] == 0.9
    flat = " ".join(output.replace("│", " ").split())
    assert "dropped by copies 10" in flat and f"kept {len(rows)}" in flat


def test_mine_filters_web_by_default(indexed_workspace):
    work, _ = indexed_workspace
    _mine(work)
    stats = json.loads((work / "mined" / "de-en.stats.json").read_text())
    assert stats["options"]["filters"] == WEB.to_json()
    assert list(stats["counts"]["filtered"]) == WEB.enabled() and stats["counts"]["filtered"]["copies"] == 10
    assert not [r for r in read_mined(work / "mined" / "de-en.tsv.zst") if r[1] == r[2]]


def test_a_bad_filter_fails_before_the_search(indexed_workspace):
    work, _ = indexed_workspace
    code, output = run("mine", "de", "en", "-w", str(work), "--filter", "copies=2")
    assert code == 2 and "copies must be in (0, 1]" in " ".join(output.replace("│", " ").split()), output
    assert not (work / "mined").exists()


def test_a_meta_column_is_carried_through_to_every_format(tmp_path, tiny_model_dir):
    """BUCC-style `ID<TAB>sentence` input: the ids come out beside the mined pairs."""
    model = str(tiny_model_dir("bert"))
    work = tmp_path / "work"
    shared = sentences(6, seed=0)
    lines = {"de": shared + sentences(2, seed=1), "en": sentences(1, seed=2) + shared}
    for lang, texts in lines.items():
        path = tmp_path / f"{lang}.tsv"
        path.write_text("".join(f"{lang}-{i:03d}\t{t}\n" for i, t in enumerate(texts)))
        code, output = run(
            "encode",
            "--lid",
            "off",
            str(path),
            "-l",
            lang,
            "-m",
            model,
            "-w",
            str(work),
            "--text-column",
            "2",
            "--meta-column",
            "1",
        )
        assert code == 0, output
        assert run("index", lang, "-w", str(work))[0] == 0
    assert run("mine", "de", "en", "-w", str(work), "--filters", "none")[0] == 0  # every candidate
    rows = read_mined(work / "mined" / "de-en.tsv.zst")
    identical = {(r[5], r[6]) for r in rows if r[1] == r[2]}
    assert identical == {(f"de-{i:03d}", f"en-{i + 1:03d}") for i in range(6)}
    assert run("mine", "de", "en", "-w", str(work), "--format", "jsonl", "--filters", "none")[0] == 0
    records = [json.loads(line) for line in (work / "mined" / "de-en.jsonl").read_text().splitlines()]
    assert {(r["src_meta"], r["tgt_meta"]) for r in records if r["src"] == r["tgt"]} == identical


@pytest.mark.parametrize("missing", ["pyarrow", "pyarrow.parquet"])
def test_parquet_without_pyarrow_is_a_one_line_error(monkeypatch, tmp_path, missing):
    monkeypatch.setitem(sys.modules, missing, None)  # `import` of it raises ImportError
    no_filter = PairFilter(NO_FILTERS, "de", "en")
    with pytest.raises(
        BitextmineError, match=r"^parquet output needs pyarrow: pip install 'bitextmine\[parquet\]'$"
    ):
        write_pairs(OutputTarget(tmp_path / "p.parquet"), "parquet", [], ([], []), no_filter, (0.0, 1.0))
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("item", "name"),
    [
        ("score-max=1.0", "score-max"),
        ("min-chars=1000", "length"),
        ("length-ratio=1.0", "length-ratio"),
        ("letters", "letters"),
        ("copies=1.0", "copies"),
        ("language=0.0", "language"),
        ("dedup", "dedup"),
    ],
)
def test_each_filter_through_the_cli_drops_what_it_counts(indexed_workspace, item, name):
    """Every filter, alone: the pairs it drops are gone from the output, and counted in the stats."""
    work, shared = indexed_workspace
    assert run("mine", "de", "en", "-w", str(work), "--filters", "none")[0] == 0
    every = read_mined(work / "mined" / "de-en.tsv.zst")
    code, output = run("mine", "de", "en", "-w", str(work), "--filters", "none", "--filter", item)
    assert code == 0, output
    kept = read_mined(work / "mined" / "de-en.tsv.zst")
    stats = json.loads((work / "mined" / "de-en.stats.json").read_text())
    assert list(stats["counts"]["filtered"]) == [name]
    assert stats["counts"]["filtered"][name] == len(every) - len(kept) and set(map(tuple, kept)) <= set(
        map(tuple, every)
    )
    expected = {
        "score-max": sum(float(r[0]) > 1.0 for r in every),
        "length": len(every),  # no sentence has 1,000 characters
        "copies": len(shared),  # the identical sentences
        "letters": 0,
        "dedup": 0,
    }
    if name in expected:
        assert stats["counts"]["filtered"][name] == expected[name]
    if name in (
        "length-ratio",
        "language",
    ):  # at 1.0 only equal lengths pass; at 0.0 any other language drops
        assert 0 < stats["counts"]["filtered"][name] <= len(every)
