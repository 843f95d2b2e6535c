"""`train --data MINED --min-score S --weight-by-score`: mine's output in every format as training data,
kept by score, weighted by score, and its bad input as one-line errors."""

from __future__ import annotations

import gzip
import json
import sys
import warnings

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from bitextmine.cli import app
from bitextmine.errors import BitextmineError
from bitextmine.files import OutputTarget
from bitextmine.mining.filters import NO_FILTERS, PairFilter
from bitextmine.mining.mined_file import FORMATS, Layout, output_format, write_pairs
from bitextmine.text.reader import Row
from bitextmine.train.data import Pair, PairBatch, find_sources, read_source, token_batches
from bitextmine.train.loop import TrainConfig, batch_loss
from bitextmine.train.mined import ScoreUse
from bitextmine.train.model import TrainContext, TrainEncoder
from bitextmine.train.objectives.base import ObjectiveSetup
from bitextmine.train.objectives.contrastive import Contrastive
from bitextmine.train.objectives.registry import build_objectives
from bitextmine.train.objectives.settings import ContrastiveSettings
from tests.helpers import TRAINING_TEXT

THREE = [(1.3, "der Hund", "the dog"), (1.2, "die Katze", "the cat"), (1.05, "das Haus", "the house")]


def write_mined(path, pairs=THREE, with_meta=False):
    """`pairs` (score, src, tgt) written by mine's own writer, in the format `path`'s suffix names."""
    rows = [
        [Row(0, i + 1, p[side], "m" if with_meta else None) for i, p in enumerate(pairs)] for side in (1, 2)
    ]
    chunk = (np.array([p[0] for p in pairs]), *rows, None)
    keep_all = PairFilter(NO_FILTERS, "de", "en")
    write_pairs(
        OutputTarget(path),
        output_format(path),
        [chunk],
        (["de.txt"], ["en.txt"]),
        keep_all,
        (1.0, 1.5),
        Layout(with_meta),
    )
    return path


def pairs_of(path, scores=None, notes=None):
    (source,) = find_sources([str(path)], scores or ScoreUse(), notes)
    return source, list(read_source(source))


@pytest.mark.parametrize(
    ("fmt", "with_meta"), [(f, False) for f in FORMATS] + [("tsv.zst", True), ("jsonl", True)]
)
def test_every_format_of_mine_reads_as_training_pairs(tmp_path, fmt, with_meta):
    source, pairs = pairs_of(write_mined(tmp_path / f"de-en.{fmt}", with_meta=with_meta))
    assert source.lang == "de" and source.mined.format == fmt
    assert [(p.lang, p.src, p.tgt, p.weight) for p in pairs] == [("de", s, t, None) for _, s, t in THREE]


def test_english_as_the_source_side_is_swapped_to_the_target(tmp_path):
    english_first = [(score, en, de) for score, de, en in THREE]
    source, pairs = pairs_of(write_mined(tmp_path / "run1.en-de.jsonl", english_first))
    assert source.lang == "de" and [(p.src, p.tgt) for p in pairs] == [(s, t) for _, s, t in THREE]


def test_min_score_keeps_the_pairs_at_or_above_it_and_counts_them(tmp_path):
    path = write_mined(tmp_path / "de-en.tsv.zst")
    notes: list[str] = []
    source, pairs = pairs_of(path, ScoreUse(min_score=1.2), notes.append)
    assert [p.src for p in pairs] == ["der Hund", "die Katze"]  # 1.2 itself is kept
    assert (source.mined.kept, source.mined.total) == (2, 3)
    assert notes == [f"{path}: 2 of 3 mined pairs with score >= 1.2"]
    assert [p.src for p in pairs_of(path)[1]] == ["der Hund", "die Katze", "das Haus"]  # default: all


def test_pairs_with_an_empty_side_are_skipped_and_not_counted(tmp_path):
    path = tmp_path / "de-en.tsv"
    path.write_text("1.3\tder Hund\tthe dog\ta:1\tb:1\n1.2\t \tthe cat\ta:2\tb:2\n")
    source, pairs = pairs_of(path)
    assert [p.src for p in pairs] == ["der Hund"] and (source.mined.kept, source.mined.total) == (1, 2)


def test_invalid_utf8_is_warned_once_by_the_stream_not_by_the_read_ahead(tmp_path):
    path = tmp_path / "de-en.tsv"
    path.write_bytes(b"1.3\tder Hund \xff\tthe dog\ta:1\tb:1\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (source,) = find_sources([str(path)])
    said: list[str] = []
    assert [p.src for p in read_source(source, warn=said.append)] == ["der Hund \ufffd"]
    assert len(said) == 1 and "invalid UTF-8" in said[0]


def test_weights_are_the_score_above_the_floor_with_mean_one(tmp_path):
    path = write_mined(tmp_path / "de-en.parquet")
    # floor --min-score 1.0: excess 0.3, 0.2, 0.05, mean 0.55 / 3
    _, pairs = pairs_of(path, ScoreUse(min_score=1.0, weighted=True))
    want = [0.3 * 3 / 0.55, 0.2 * 3 / 0.55, 0.05 * 3 / 0.55]
    assert [p.weight for p in pairs] == pytest.approx(want)
    assert sum(p.weight for p in pairs) == pytest.approx(3.0)
    # no --min-score: the floor is the lowest score, 1.05; excess 0.25, 0.15, 0, mean 0.4 / 3
    _, pairs = pairs_of(path, ScoreUse(weighted=True))
    assert [p.weight for p in pairs] == pytest.approx([0.25 * 3 / 0.4, 0.15 * 3 / 0.4, 0.0])
    # --min-score 1.1 drops 1.05 and is the floor: excess 0.2, 0.1, mean 0.15
    _, pairs = pairs_of(path, ScoreUse(min_score=1.1, weighted=True))
    assert [p.weight for p in pairs] == pytest.approx([0.2 / 0.15, 0.1 / 0.15])


def test_equal_scores_weigh_one_each(tmp_path):
    path = write_mined(tmp_path / "de-en.tsv", [(1.2, "a", "b"), (1.2, "c", "d")])
    notes: list[str] = []
    _, pairs = pairs_of(path, ScoreUse(weighted=True), notes.append)
    assert [p.weight for p in pairs] == [1.0, 1.0]
    assert notes == [f"{path}: 2 of 2 mined pairs, each weighing 1 (they score alike)"]


def test_batches_carry_the_weights_and_unweighted_pairs_weigh_one():
    pairs = [Pair("de", "a b", "c d", 2.0), Pair("fr", "e f", "g h"), Pair("de", "i", "j", 0.5)]
    batch = next(token_batches(iter(pairs * 100), lambda ts: [t.split() for t in ts], max_tokens=12))
    assert batch.weights == [2.0, None, 0.5] and batch.pair_weights == [2.0, 1.0, 0.5]
    assert PairBatch([[1]], [[2]], ["de"], 1, [None]).pair_weights is None


def test_the_contrastive_loss_weights_each_pair_by_hand():
    torch.manual_seed(0)
    u, v = torch.randn(3, 8), torch.randn(3, 8)
    w = torch.tensor([2.0, 0.5, 0.5])
    objective = Contrastive(8, ContrastiveSettings(temperature=0.1))
    logits = torch.nn.functional.normalize(u, dim=-1) @ torch.nn.functional.normalize(v, dim=-1).T / 0.1
    rows = -torch.log_softmax(logits, 1).diagonal()
    columns = -torch.log_softmax(logits, 0).diagonal()
    want = (w * (rows + columns) / 2).mean()
    assert objective.loss(u, v, w)[0].item() == pytest.approx(want.item(), rel=1e-6)
    assert objective.loss(u, v, torch.ones(3))[0].item() == pytest.approx(objective.loss(u, v)[0].item())


@pytest.mark.integration  # training steps on a tiny model: seconds
def test_batch_weights_reach_the_loss(tiny_model_dir):
    from transformers import AutoModel, AutoTokenizer

    model_dir = tiny_model_dir("bert")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    ids = tokenizer(TRAINING_TEXT, truncation=True, max_length=30)["input_ids"]
    encoder = TrainEncoder(AutoModel.from_pretrained(model_dir).eval())
    ctx = TrainContext(encoder, tokenizer.mask_token_id, frozenset(), len(tokenizer), ["de", "en"], None)
    objectives = build_objectives({"contrastive": 1.0}, ObjectiveSetup(encoder, ctx))

    def loss(weights):
        batch = PairBatch(ids[1::2], ids[0::2], ["de"] * 4, 4, weights)
        return batch_loss(encoder, objectives, {"contrastive": 1.0}, batch, ctx)[0].item()

    plain = loss([None] * 4)
    assert loss([1.0] * 4) == pytest.approx(plain) and loss([2.0] * 4) == pytest.approx(2 * plain)
    assert loss([2.0, 0.0, 1.0, 1.0]) != pytest.approx(plain)


def test_a_directory_holds_mined_files_named_after_their_pair(tmp_path):
    write_mined(tmp_path / "de-en.tsv.zst")
    (tmp_path / "de-en.stats.json").write_text("{}")
    (tmp_path / "train_log.jsonl").write_text("{}\n")  # no pair in its name: not training data
    (source,) = find_sources([str(tmp_path)])
    assert source.paths == (str(tmp_path / "de-en.tsv.zst"),) and source.mined is not None


def test_a_compressed_tsv_of_two_columns_is_a_pair_tsv(tmp_path):
    path = tmp_path / "pairs.de-en.tsv.gz"
    path.write_bytes(gzip.compress(b"der Hund\tthe dog\n"))
    source, pairs = pairs_of(path)
    assert source.mined is None and pairs == [Pair("de", "der Hund", "the dog")]


def _write(path, text):
    path.write_text(text)
    return path


def _parquet_without_score(path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"src": ["a"], "tgt": ["b"]}), path)
    return path


BAD = {
    "wrong field count": (
        lambda d: _write(d / "de-en.tsv", "1.3\ta\tb\ta:1\tb:1\n1.2\ta\tb\ta:2\n"),
        r"de-en\.tsv:2: expected mine's 'score<TAB>src<TAB>tgt<TAB>src id<TAB>tgt id.*got 4 fields",
    ),
    "score not a number": (
        lambda d: _write(d / "de-en.tsv", "1.3\ta\tb\ta:1\tb:1\nhigh\ta\tb\ta:2\tb:2\n"),
        r"de-en\.tsv:2: score 'high' is not a number",
    ),
    "score not finite": (
        lambda d: _write(d / "de-en.tsv", "nan\ta\tb\ta:1\tb:1\n"),
        r"de-en\.tsv:1: score 'nan' is not a finite number",
    ),
    "neither kind of TSV": (
        lambda d: _write(d / "de-en.tsv", "1.3\ta\tb\n"),
        r"de-en\.tsv:1: expected 'xx<TAB>en' \(a pair TSV\) or 'score<TAB>.*\(mine's output\), got 3 fields",
    ),
    "jsonl not JSON": (
        lambda d: _write(d / "de-en.jsonl", '{"score": 1.3, "src": "a", "tgt": "b"}\n{"score": 1.2,\n'),
        r"de-en\.jsonl:2: not JSON",
    ),
    "jsonl score a string": (
        lambda d: _write(d / "de-en.jsonl", '{"score": "1.3", "src": "a", "tgt": "b"}\n'),
        r"de-en\.jsonl:1: score '1\.3' is not a number",
    ),
    "jsonl without tgt": (
        lambda d: _write(d / "de-en.jsonl", '{"score": 1.3, "src": "a"}\n'),
        r"de-en\.jsonl:1: no tgt",
    ),
    "parquet without score": (
        lambda d: _parquet_without_score(d / "de-en.parquet"),
        r"de-en\.parquet: no score column",
    ),
    "parquet not parquet": (
        lambda d: _write(d / "de-en.parquet", "not parquet at all\n"),
        r"de-en\.parquet: not a readable parquet file",
    ),
    "no pair in the name": (
        lambda d: write_mined(d / "mined.tsv.zst"),
        r"mined\.tsv\.zst: name mine's output after its language pair, e\.g\. de-en\.tsv\.zst",
    ),
    "no English side": (
        lambda d: write_mined(d / "de-fr.tsv.zst"),
        r"de-fr\.tsv\.zst: train learns \(xx, en\) pairs; this file pairs de with fr",
    ),
    "neither mined nor pairs": (
        lambda d: _write(d / "notes.json", "{}"),
        r"notes\.json: not training data: expected X\.xx next to X\.en, NAME\.xx-en\.tsv, or mine's output",
    ),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_mined_input_is_a_one_line_error_naming_the_file(tmp_path, case):
    make, message = BAD[case]
    path = make(tmp_path)
    with pytest.raises(BitextmineError, match=message) as error:
        pairs_of(path)
    assert "\n" not in str(error.value)


def test_parquet_without_pyarrow_is_a_one_line_error(tmp_path, monkeypatch):
    path = write_mined(tmp_path / "de-en.parquet")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(BitextmineError, match=r"de-en\.parquet: reading parquet needs pyarrow: pip install"):
        pairs_of(path)


def test_score_options_need_a_mined_file_and_a_reachable_score(tmp_path):
    (tmp_path / "x.de").write_text("a\n")
    (tmp_path / "x.en").write_text("b\n")
    with pytest.raises(BitextmineError, match="--min-score and --weight-by-score apply to mine's output"):
        find_sources([str(tmp_path / "x.de")], ScoreUse(weighted=True))
    path = write_mined(tmp_path / "de-en.tsv.gz")
    with pytest.raises(
        BitextmineError, match=r"none of its 3 pairs has score >= 2\.0 .*highest score 1\.3000"
    ):
        find_sources([str(path)], ScoreUse(min_score=2.0))


def test_weighting_is_refused_with_objectives_without_a_per_pair_term(tmp_path):
    with pytest.raises(BitextmineError, match="weights the pairs of contrastive only; drop mexma from"):
        TrainConfig(
            data=[],
            out=tmp_path,
            objectives={"contrastive": 1.0, "mexma": 1.0},
            base="m",
            max_steps=1,
            weight_by_score=True,
        )


@pytest.mark.integration
def test_train_command_on_a_mined_file(tiny_model_dir, tmp_path):
    en, de = TRAINING_TEXT[0::2] * 6, TRAINING_TEXT[1::2] * 6
    pairs = [(1.5 - 0.01 * i, f"{d} {i}", f"{e} {i}") for i, (d, e) in enumerate(zip(de, en, strict=True))]
    data = write_mined(tmp_path / "de-en.tsv.zst", pairs)
    out = tmp_path / "model"
    args = ["train", "--data", str(data), "--base", str(tiny_model_dir("bert")), "--out", str(out)]
    args += ["--max-steps", "3", "--max-tokens", "120", "--bf16", "off", "--device", "cpu"]
    runner = CliRunner()
    result = runner.invoke(app, [*args, "--min-score", "1.3", "--weight-by-score"])
    assert result.exit_code == 0, result.output
    assert "21 of 24 mined pairs with score >= 1.3, weighted (score - 1.3000)" in result.output
    assert "trained 3 steps" in result.output
    training = json.loads((out / "bitextmine.json").read_text())["training"]
    assert training["min_score"] == 1.3 and training["weight_by_score"] is True
    for extra, message in (
        (["--min-score", "9"], "none of its 24 pairs has score >= 9.0"),
        (["--weight-by-score", "--objectives", "contrastive,xtr"], "drop xtr from --objectives"),
    ):
        result = runner.invoke(app, [*args, "--out", str(tmp_path / "other"), *extra])
        assert result.exit_code == 1 and message in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1, result.output
