"""`mine`'s outputs as Hugging Face users load them: a `translation` column in jsonl and parquet,
parquet schema metadata saying what made the pairs, and the headerless TSV read by the recipe in
docs/commands.md."""

from __future__ import annotations

import csv
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from bitextmine.calibration.thresholds import ThresholdChoice
from bitextmine.errors import BitextmineError
from bitextmine.files import OutputTarget
from bitextmine.mining.filters import NO_FILTERS, FilterSettings, PairFilter
from bitextmine.mining.mined_file import METADATA_KEY, Layout, mining_settings, output_format, write_pairs
from bitextmine.text.reader import Row

# sentences a CSV reader mangles by default: a leading quote, pandas' NA markers, a comma, a '#'
PAIRS = [(1.5, '"Ja", sagte er.', "NA"), (1.4, "null", '"Yes," he said.'), (1.3, "a,b", "# x")]
TSV_COLUMNS = ["score", "src", "tgt", "src_id", "tgt_id"]
SETTINGS = mining_settings(
    "e5", "fp-1", "ratio", 4, ThresholdChoice(1.06, "de-en", "given"), FilterSettings(letters=True)
)


def write(path: Path, langs: tuple[str, str] = ("de", "en"), precision: np.ndarray | None = None) -> Path:
    rows = [[Row(0, i + 1, pair[side]) for i, pair in enumerate(PAIRS)] for side in (1, 2)]
    chunk = (np.array([pair[0] for pair in PAIRS]), *rows, precision)
    keep_all = PairFilter(NO_FILTERS, *langs)
    files = (["de.txt"], ["en.txt"])
    layout = Layout(with_precision=precision is not None)
    write_pairs(
        OutputTarget(path),
        output_format(path),
        [chunk],
        files,
        keep_all,
        (1.0, 2.0),
        layout,
        settings=SETTINGS,
    )
    return path


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_datasets_loads_the_translation_column_beside_the_others(tmp_path, fmt):
    datasets = pytest.importorskip("datasets")
    path = write(tmp_path / f"de-en.{fmt}")
    loaded = datasets.load_dataset(
        "json" if fmt == "jsonl" else fmt, data_files=str(path), split="train", cache_dir=str(tmp_path / "hf")
    )
    assert loaded["translation"] == [{"de": src, "en": tgt} for _, src, tgt in PAIRS]
    assert loaded["src"] == [src for _, src, _ in PAIRS] and loaded["score"] == [p[0] for p in PAIRS]
    assert {"src_file", "src_line", "tgt_file", "tgt_line"} <= set(loaded.column_names)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "tsv"])
def test_each_pairs_regional_precision_is_a_column_of_jsonl_and_parquet(tmp_path, fmt):
    datasets = pytest.importorskip("datasets")
    path = write(tmp_path / f"de-en.{fmt}", precision=np.array([0.9, 0.8, 0.31234567]))
    if fmt == "tsv":  # LASER's layout: five columns, no precision
        assert [len(line.split("\t")) for line in path.read_text().splitlines()] == [5, 5, 5]
        return
    loaded = datasets.load_dataset(
        "json" if fmt == "jsonl" else fmt, data_files=str(path), split="train", cache_dir=str(tmp_path / "hf")
    )
    assert loaded["precision"] == [0.9, 0.8, 0.312346] and loaded.column_names[:3] == [
        "score",
        "precision",
        "src",
    ]
    assert (
        "precision"
        not in datasets.load_dataset(
            "json" if fmt == "jsonl" else fmt,
            data_files=str(write(tmp_path / f"no.{fmt}")),
            split="train",
            cache_dir=str(tmp_path / "hf2"),
        ).column_names
    )


def test_the_parquet_schema_says_what_made_the_pairs(tmp_path):
    import pyarrow.parquet as pq

    from bitextmine import __version__

    schema = pq.read_schema(write(tmp_path / "de-en.parquet"))
    described = json.loads(schema.metadata[METADATA_KEY])
    assert described == {
        "src_lang": "de",
        "tgt_lang": "en",
        "model": "e5",
        "fingerprint": "fp-1",
        "margin": "ratio",
        "k": 4,
        "threshold": 1.06,
        "threshold_source": "given",
        "threshold_scale": "margin",
        "filters": asdict(FilterSettings(letters=True)),
        "bitextmine_version": __version__,
    }


@pytest.mark.parametrize("fmt", ["tsv.zst", "tsv.gz", "tsv"])
def test_the_documented_recipes_read_the_headerless_tsv_exactly(tmp_path, fmt):
    """docs/commands.md: datasets' csv loader and pandas need header=None, quoting=3 (QUOTE_NONE: a
    sentence may start with a quote) and keep_default_na=False ('NA' and 'null' are sentences)."""
    pd = pytest.importorskip("pandas")
    path = write(tmp_path / f"de-en.{fmt}")
    expected = [
        {"score": score, "src": src, "tgt": tgt, "src_id": f"de.txt:{i}", "tgt_id": f"en.txt:{i}"}
        for i, (score, src, tgt) in enumerate(PAIRS, 1)
    ]
    frame = pd.read_csv(
        path, sep="\t", header=None, quoting=csv.QUOTE_NONE, keep_default_na=False, names=TSV_COLUMNS
    )
    assert frame.to_dict("records") == expected
    datasets = pytest.importorskip("datasets")
    loaded = datasets.load_dataset(
        "csv",
        data_files=str(path),
        delimiter="\t",
        header=None,
        quoting=3,
        keep_default_na=False,
        column_names=TSV_COLUMNS,
        split="train",
        cache_dir=str(tmp_path / "hf"),
    )
    assert loaded.to_list() == expected


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_one_language_twice_cannot_key_the_translation_column(tmp_path, fmt):
    with pytest.raises(BitextmineError) as excinfo:
        write(tmp_path / f"en-en.{fmt}", ("en", "en"))
    assert str(excinfo.value) == (
        f"{fmt} output has a translation column keyed by language, and both sides are 'en': "
        "write tsv.zst, tsv.gz or tsv"
    )
    assert not list(tmp_path.iterdir())
    assert write(tmp_path / "en-en.tsv", ("en", "en")).read_text().count("\n") == len(PAIRS)


def test_score_refuses_one_language_twice_in_jsonl_before_encoding(tmp_path):
    from bitextmine.steps.score import score_bitext
    from bitextmine.text.bitext import read_bitext
    from bitextmine.workspace.layout import Workspace

    for side in ("a", "b"):
        (tmp_path / side).write_text("Hello there.\n")
    bitext = read_bitext([str(tmp_path / "a"), str(tmp_path / "b")])
    no_encoder = None  # reaching the encoder would be an AttributeError, not this error
    with pytest.raises(BitextmineError, match="both sides are 'en'"):
        score_bitext(Workspace(tmp_path / "w"), bitext, ("en", "en"), no_encoder, tmp_path / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists()
