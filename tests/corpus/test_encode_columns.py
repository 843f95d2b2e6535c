"""TSV input (`--text-column`, `--meta-column`) and the language filter (`--lid`) of the corpus pass:
reading, text shards, the manifest, and `bitextmine encode` end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from bitextmine.cli import app
from bitextmine.corpus.build import build_corpus
from bitextmine.corpus.settings import CorpusSettings
from bitextmine.errors import BitextmineError
from bitextmine.steps.encode import EncodeOptions
from bitextmine.text.lid import DEFAULT_MIN_CONFIDENCE, RULE_CONFIDENCE, LidFilter, model_id
from bitextmine.text.reader import Columns, CorpusCounts, CorpusError, Row, iter_rows
from bitextmine.workspace.corpus import (
    MANIFEST_NAME,
    CorpusManifest,
    RowReader,
    load_manifest,
    read_shard_rows,
    read_text_shard,
    write_text_shards,
)

GERMAN = [
    "Die Regierung hat am Dienstag neue Regeln für den Wohnungsbau beschlossen.",
    "Der Zug nach Berlin fährt heute eine Stunde später ab.",
    "Wir haben gestern Abend lange über das Buch gesprochen.",
    "Ich habe Hunger.",
]
ENGLISH = "The government approved new rules for housing construction on Tuesday."
DUTCH = "De regering heeft dinsdag nieuwe regels voor de woningbouw goedgekeurd."
GERMAN_LID = LidFilter("de", DEFAULT_MIN_CONFIDENCE, model_id())


def rows_of(path: Path, columns: Columns | None, max_chars: int = 10_000) -> tuple[list, CorpusCounts, list]:
    counts, warnings = CorpusCounts(), []
    rows = list(iter_rows(str(path), 0, counts, max_chars=max_chars, columns=columns, warn=warnings.append))
    return rows, counts, warnings


def test_text_and_meta_columns(tmp_path: Path) -> None:
    source = tmp_path / "web.tsv"
    source.write_text(
        "http://a.de/1\tEin  Satz.\textra\n\nhttp://b.de/2\tNoch einer.\r\n\t\n", encoding="utf-8"
    )
    rows, counts, warnings = rows_of(source, Columns(text=2, meta=1))
    assert [(r.line, r.text, r.meta) for r in rows] == [
        (1, "Ein Satz.", "http://a.de/1"),
        (3, "Noch einer.", "http://b.de/2"),
    ]
    assert (counts.lines, counts.empty, counts.kept, counts.missing_columns) == (4, 2, 2, 0) and not warnings
    rows, _, _ = rows_of(source, Columns(text=2))
    assert [r.meta for r in rows] == [None, None]
    rows, _, _ = rows_of(source, Columns(text=1, meta=3))
    assert [(r.text, r.meta) for r in rows] == [("http://a.de/1", "extra")]  # line 3 has no third column


def test_a_line_short_of_columns_is_counted_skipped_and_warned(tmp_path: Path) -> None:
    source = tmp_path / "bucc.tsv"
    source.write_text("de-1\tEins.\nkaputt\nde-3\tDrei.\nauch kaputt\n", encoding="utf-8")
    rows, counts, warnings = rows_of(source, Columns(text=2, meta=1))
    assert [r.meta for r in rows] == ["de-1", "de-3"]
    assert counts.missing_columns == 2 and counts.kept == 2 and counts.lines == 4
    assert len(warnings) == 1 and warnings[0].startswith(f"{source}:2: fewer than 2 TAB-separated columns")
    assert "2 lines" in warnings[0]


def test_a_file_without_the_columns_is_an_error_naming_it(tmp_path: Path) -> None:
    source = tmp_path / "plain.txt"
    source.write_text("ein Satz\nnoch einer\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"plain\.txt: no line has the 2 TAB-separated columns"):
        rows_of(source, Columns(text=2))


def test_columns_of_long_lines_are_read_in_bounded_pieces(tmp_path: Path) -> None:
    source = tmp_path / "long.tsv"
    lines = [
        b"x" * 50_000 + b"\t" + b"Wort  " * 5_000 + b"\t" + b"u" * 3_000,  # long skipped column, long text
        b"\xe9t\xe9\tkurz\tid-2",  # invalid UTF-8 in a column that is not read
        b"id\tcaf\xe9\t" + b"m" * 50_000,  # invalid UTF-8 in the text, long meta cut
    ]
    source.write_bytes(b"\n".join(lines) + b"\n")
    rows, counts, warnings = rows_of(source, Columns(text=2, meta=3), max_chars=100)
    assert [len(r.text) for r in rows] == [99, 4, 4]  # cut to 100 characters, then stripped
    assert rows[0].text.startswith("Wort Wort") and rows[0].meta == "u" * 100
    assert rows[1].meta == "id-2" and rows[2].text == "caf\ufffd" and rows[2].meta == "m" * 100
    assert counts.too_long == 1 and counts.invalid_utf8 == 1
    assert any("long.tsv:3: invalid UTF-8" in w for w in warnings)


def test_a_nul_byte_in_any_column_is_an_error(tmp_path: Path) -> None:
    source = tmp_path / "bin.tsv"
    source.write_bytes(b"a\tb\nc\x00\td\n")
    with pytest.raises(CorpusError, match=r"bin\.tsv:2: binary data"):
        rows_of(source, Columns(text=2))


def test_columns_must_be_distinct_and_start_at_1() -> None:
    with pytest.raises(BitextmineError, match="both column 2"):
        Columns(text=2, meta=2)
    with pytest.raises(BitextmineError, match="start at 1"):
        Columns(text=0)


def test_shards_carry_meta_only_with_a_meta_column(tmp_path: Path) -> None:
    source = tmp_path / "web.tsv"
    source.write_text("u1\tErster Satz.\nu2\tZweiter Satz.\nu3\tErster Satz.\n", encoding="utf-8")
    plain = tmp_path / "plain.txt"
    plain.write_text("Erster Satz.\nZweiter Satz.\nErster Satz.\n", encoding="utf-8")
    with_meta = build_corpus(
        [str(source)], "de", tmp_path / "a", CorpusSettings(10, dedup=True, columns=Columns(2, 1))
    )
    text_only = build_corpus(
        [str(source)], "de", tmp_path / "b", CorpusSettings(10, dedup=True, columns=Columns(2))
    )
    whole = build_corpus([str(plain)], "de", tmp_path / "c", CorpusSettings(10, dedup=True))
    shard = "shard-00000.tsv"
    assert (tmp_path / "a" / shard).read_text() == "0\t1\tErster Satz.\tu1\n0\t2\tZweiter Satz.\tu2\n"
    assert (tmp_path / "b" / shard).read_bytes() == (tmp_path / "c" / shard).read_bytes()
    assert (tmp_path / "c" / shard).read_text() == "0\t1\tErster Satz.\n0\t2\tZweiter Satz.\n"
    assert with_meta.counts.duplicates == 1  # dedup on the sentence: the first occurrence's meta stays
    assert [r.meta for r in read_shard_rows(tmp_path / "a" / shard)] == ["u1", "u2"]
    assert [r.meta for r in read_shard_rows(tmp_path / "b" / shard)] == [None, None]
    texts, sources, lines = read_text_shard(tmp_path / "a" / shard)
    assert (
        texts == ["Erster Satz.", "Zweiter Satz."] and lines.tolist() == [1, 2] and sources.tolist() == [0, 0]
    )
    found = RowReader(tmp_path / "a", with_meta).rows(np.array([1, 0, 1]))
    assert [(r.line, r.meta) for r in found] == [(2, "u2"), (1, "u1"), (2, "u2")]
    assert [r.meta for r in RowReader(tmp_path / "c", whole).rows(np.array([0]))] == [None]
    assert text_only.rows == whole.rows == 2


def test_the_language_filter_drops_and_counts_other_languages(tmp_path: Path) -> None:
    source = tmp_path / "de.txt"
    lines = [GERMAN[0], ENGLISH, GERMAN[1], DUTCH, "+49 30 1234567", GERMAN[2], ENGLISH, GERMAN[3]]
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    m = build_corpus([str(source)], "de", tmp_path / "w", CorpusSettings(2, dedup=True, lid=GERMAN_LID))
    rows = read_shard_rows(tmp_path / "w" / "shard-00000.tsv") + read_shard_rows(
        tmp_path / "w" / "shard-00001.tsv"
    )
    assert [r.text for r in rows] == GERMAN and [r.line for r in rows] == [1, 3, 6, 8]
    # the repeated English line is a duplicate (dedup first), the others are the wrong language
    assert (m.counts.kept, m.counts.wrong_language, m.counts.duplicates, m.counts.lines) == (4, 3, 1, 8)
    loose = build_corpus([str(source)], "de", tmp_path / "v", CorpusSettings(10))
    assert loose.counts.wrong_language == 0 and loose.rows == 8


def test_manifest_records_columns_and_lid_and_a_change_rebuilds(tmp_path: Path) -> None:
    source = tmp_path / "de.tsv"
    source.write_text("".join(f"id{i}\t{t}\n" for i, t in enumerate(GERMAN)), encoding="utf-8")
    m = build_corpus(
        [str(source)], "de", tmp_path / "w", CorpusSettings(10, columns=Columns(2, 1), lid=GERMAN_LID)
    )
    loaded = load_manifest(tmp_path / "w")
    assert loaded == m and loaded.columns == Columns(2, 1) and loaded.lid == GERMAN_LID
    data = json.loads((tmp_path / "w" / MANIFEST_NAME).read_text())
    assert data["columns"] == {"text": 2, "meta": 1}
    assert data["lid"] == {
        "lang": "de",
        "min_confidence": DEFAULT_MIN_CONFIDENCE,
        "model": model_id(),
        "rule": "accept",
    }
    assert loaded.same_inputs(m)
    for change in (
        {"columns": Columns(2)},
        {"columns": None},
        {"lid": None},
        {"lid": LidFilter("de", 0.5, model_id())},
        {"lid": LidFilter("nl", DEFAULT_MIN_CONFIDENCE, model_id())},
        {"lid": LidFilter("de", DEFAULT_MIN_CONFIDENCE, "py3langid 0.0.1")},
        {"lid": LidFilter("de", DEFAULT_MIN_CONFIDENCE, model_id(), "reject")},
    ):
        assert not loaded.same_inputs(CorpusManifest(**{**m.__dict__, **change})), change


def test_a_manifest_written_before_columns_and_lid_loads_as_neither(tmp_path: Path) -> None:
    source = tmp_path / "de.txt"
    source.write_text("\n".join(GERMAN) + "\n", encoding="utf-8")
    m = build_corpus([str(source)], "de", tmp_path / "w", CorpusSettings(10))
    old = json.loads((tmp_path / "w" / MANIFEST_NAME).read_text())
    for key in ("columns", "lid"):
        del old[key]
    for key in ("missing_columns", "wrong_language"):
        del old["counts"][key]
    (tmp_path / "w" / MANIFEST_NAME).write_text(json.dumps(old))
    loaded = load_manifest(tmp_path / "w")
    assert loaded.columns is None and loaded.lid is None and loaded.counts.wrong_language == 0
    assert loaded.same_inputs(m)


def test_a_manifest_written_before_the_lid_rules_were_named_loads_as_accept(tmp_path: Path) -> None:
    source = tmp_path / "de.txt"
    source.write_text("\n".join(GERMAN) + "\n", encoding="utf-8")
    m = build_corpus([str(source)], "de", tmp_path / "w", CorpusSettings(10, lid=GERMAN_LID))
    old = json.loads((tmp_path / "w" / MANIFEST_NAME).read_text())
    del old["lid"]["rule"]
    (tmp_path / "w" / MANIFEST_NAME).write_text(json.dumps(old))
    assert load_manifest(tmp_path / "w").lid == GERMAN_LID and GERMAN_LID.rule == "accept"
    assert load_manifest(tmp_path / "w").same_inputs(m)


def test_encode_options_map_the_lid_rule_and_language() -> None:
    reject = RULE_CONFIDENCE["reject"]
    assert EncodeOptions().lid_filter("de") == LidFilter("de", reject, model_id(), "reject")  # the default
    assert EncodeOptions(lid="off").lid_filter("de") is None
    assert EncodeOptions(lid="accept").lid_filter("deu") == GERMAN_LID
    assert EncodeOptions(lid="reject", lid_min_confidence=0.9).lid_filter("de").min_confidence == 0.9
    assert EncodeOptions(lid="accept", lid_lang="cmn").lid_filter("chinese") == LidFilter(
        "zh", DEFAULT_MIN_CONFIDENCE, model_id(), "accept"
    )
    with pytest.raises(BitextmineError, match="'chinese'"):
        EncodeOptions(lid="reject").lid_filter("chinese")


def test_by_default_a_language_lid_does_not_know_is_kept_whole_with_a_warning() -> None:
    warnings: list[str] = []
    assert EncodeOptions().lid_filter("klingon", warnings.append) is None
    assert len(warnings) == 1 and "does not know 'klingon'" in warnings[0]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"lid": True}, "unknown language identification rule True"),
        ({"lid": "strict"}, "choose reject, accept or off"),
        ({"lid_min_confidence": 1.5}, r"\[0, 1\]"),
        ({"lid": "off", "lid_lang": "de"}, "not to --lid off"),
    ],
)
def test_bad_lid_options_are_refused_when_made(options: dict, message: str) -> None:
    with pytest.raises(BitextmineError, match=message):
        EncodeOptions(**options)


# ------------------------------------------------------------------------------------------- the CLI

runner = CliRunner()


def encode(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["encode", *args])
    return result.exit_code, result.output


@pytest.mark.integration
def test_encode_tsv_with_lid_end_to_end_and_a_changed_setting_rebuilds(tmp_path, tiny_model_dir):
    source = tmp_path / "web.tsv"
    lines = [f"http://x.de/{i}\t{t}" for i, t in enumerate([GERMAN[0], ENGLISH, GERMAN[1], DUTCH, GERMAN[2]])]
    source.write_text("\n".join([*lines, "kaputt"]) + "\n", encoding="utf-8")
    work = tmp_path / "w"
    args = [
        str(source),
        "--lang",
        "deu",
        "-m",
        str(tiny_model_dir("bert")),
        "-w",
        str(work),
        "--precision",
        "fp32",
    ]
    code, output = encode(*args, "--text-column", "2", "--meta-column", "1", "--lid", "accept")
    assert code == 0, output
    flat = " ".join(output.replace("│", " ").split())  # the table wraps long cells
    assert "2 by --lid, 1 too few columns" in flat and "web.tsv:6: fewer than 2" in flat
    counts = json.loads((work / "corpora" / "deu" / MANIFEST_NAME).read_text())["counts"]
    assert (counts["wrong_language"], counts["missing_columns"], counts["kept"]) == (2, 1, 3)
    rows = read_shard_rows(work / "corpora" / "deu" / "shard-00000.tsv")
    assert [(r.text, r.meta) for r in rows] == [
        (GERMAN[0], "http://x.de/0"),
        (GERMAN[1], "http://x.de/2"),
        (GERMAN[2], "http://x.de/4"),
    ]
    assert len(np.load(work / "emb" / "deu" / "shard-00000.npy")) == 3
    code, output = encode(*args, "--text-column", "2", "--meta-column", "1", "--lid", "accept")
    assert code == 0 and "reusing 1 text shard" in output, output
    code, output = encode(*args, "--text-column", "2", "--meta-column", "1", "--lid", "off")  # rebuilt
    assert code == 0 and "built 1 text shard(s), 5 sentences" in output, output


@pytest.mark.integration
@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--meta-column", "1"], "--meta-column needs --text-column"),
        (["--text-column", "2", "--meta-column", "2"], "both column 2"),
        (["--lid", "accept", "--lid-lang", "xx"], "does not know the language 'xx'"),
        (["--lid", "reject"], "does not know the language 'klingon'"),
        (["--lid", "off", "--lid-lang", "de"], "not to --lid off"),
    ],
)
def test_bad_column_and_lid_options_are_one_line_errors(tmp_path, tiny_model_dir, flags, message):
    source = tmp_path / "x.txt"
    source.write_text("ein Satz\n", encoding="utf-8")
    model, work = str(tiny_model_dir("bert")), str(tmp_path / "w")
    code, output = encode(str(source), "-l", "klingon", "--force-lang", "-m", model, "-w", work, *flags)
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert code == 1 and len(errors) == 1 and message in errors[0], output
    assert "Traceback" not in output


def test_a_row_reader_reads_each_shard_once_and_returns_what_lookup_returns(tmp_path, monkeypatch):
    rows = [Row(0, n + 1, f"sentence {n}", f"meta {n}") for n in range(10)]
    shards = write_text_shards(rows, tmp_path, shard_size=3)
    manifest = CorpusManifest("de", [], 3, False, 10_000, shards, complete=True)
    wanted = np.array([9, 0, 4, 4, 7, 1])
    reads: list[str] = []
    original = Path.read_bytes

    def counting(path: Path) -> bytes:
        reads.append(path.name)
        return original(path)

    monkeypatch.setattr(Path, "read_bytes", counting)
    reader = RowReader(tmp_path, manifest)
    for _ in range(3):  # three chunks asking for the same shards
        assert reader.rows(wanted) == [rows[i] for i in wanted]
    assert sorted(reads) == sorted(
        {shards[i // 3].name for i in wanted}
    )  # each shard read (and checked) once
    (tmp_path / shards[0].name).write_text("0\t1\tchanged\tmeta 0\n")
    with pytest.raises(CorpusError, match="damaged text shard"):
        RowReader(tmp_path, manifest).rows(np.array([0]))
