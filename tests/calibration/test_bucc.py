"""Tests for bitextmine.calibration.bucc: BUCC 2018 files (plain or compressed), precision/recall/F1, a
mined file scored against a split, and the threshold sweep."""

from __future__ import annotations

import gzip
import lzma
from pathlib import Path

import numpy as np
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from bitextmine.calibration.bucc import BuccError, Scores, read_bucc, score_pairs
from bitextmine.calibration.split_mining import score_mined_file
from bitextmine.calibration.sweep import sweep_threshold
from bitextmine.errors import BitextmineError, BitextmineWarning
from bitextmine.files import OutputTarget
from bitextmine.mining.filters import NO_FILTERS, PairFilter
from bitextmine.mining.mined_file import FORMATS, output_format, write_pairs
from bitextmine.text.reader import Row
from tests.helpers import require_shared

DE = b"d1\tDer Hund schl\xc3\xa4ft.\r\nd2\tEin Mann\tf\xc3\xa4hrt.\nd3\tPreise stiegen.\n"
EN = b"e1\tPrices rose.\ne2\tThe dog sleeps.\r\ne3\tUnrelated.\n"
GOLD = b"d1\te2\r\nd3\te1\n"


def write_split(directory: Path, de: bytes = DE, en: bytes = EN, gold: bytes | None = GOLD) -> Path:
    (directory / "de-en.dev.de").write_bytes(de)
    (directory / "de-en.dev.en").write_bytes(en)
    if gold is not None:
        (directory / "de-en.dev.gold").write_bytes(gold)
    return directory


# --- reading ---------------------------------------------------------------------------------------


def test_read_valid_split(tmp_path: Path) -> None:
    split = read_bucc(write_split(tmp_path), "de-en", "dev")
    assert (split.pair, split.split) == ("de-en", "dev")
    assert split.src.lang == "de" and split.tgt.lang == "en"
    assert split.src.ids == ["d1", "d2", "d3"]
    # CR stripped, a TAB inside the sentence kept (only the first TAB separates the id)
    assert split.src.sentences == ["Der Hund schläft.", "Ein Mann\tfährt.", "Preise stiegen."]
    assert split.tgt.ids == ["e1", "e2", "e3"]
    assert split.tgt.sentences == ["Prices rose.", "The dog sleeps.", "Unrelated."]
    assert split.gold == {("d1", "e2"), ("d3", "e1")}


def test_last_line_without_newline(tmp_path: Path) -> None:
    split = read_bucc(write_split(tmp_path, en=b"e1\tA.\ne2\tB.\ne3\tC.", gold=b"d1\te2"), "de-en", "dev")
    assert split.tgt.sentences == ["A.", "B.", "C."]
    assert split.gold == {("d1", "e2")}


def test_gold_optional(tmp_path: Path) -> None:
    split = read_bucc(write_split(tmp_path, gold=None), "de-en", "dev", require_gold=False)
    assert split.gold is None and split.src.ids == ["d1", "d2", "d3"]
    # present but not required: still read
    write_split(tmp_path)
    assert read_bucc(tmp_path, "de-en", "dev", require_gold=False).gold == {("d1", "e2"), ("d3", "e1")}


def test_an_empty_gold_file_is_an_error_naming_it_unless_gold_is_optional(tmp_path: Path) -> None:
    """The error (from the sweep, after the encoding) did not name the file."""
    write_split(tmp_path, gold=b"")
    with pytest.raises(BuccError) as excinfo:
        read_bucc(tmp_path, "de-en", "dev")
    assert_one_line_error(excinfo, f"{tmp_path / 'de-en.dev.gold'}: empty gold file")
    assert read_bucc(tmp_path, "de-en", "dev", require_gold=False).gold == set()


BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize("where", ["de", "en", "gold"])
def test_a_byte_order_mark_at_the_start_of_a_file_is_dropped(tmp_path: Path, where: str) -> None:
    """A UTF-8 BOM became part of the first id ("unknown de id")."""
    files = {"de": DE, "en": EN, "gold": GOLD}
    files[where] = BOM + files[where]
    split = read_bucc(write_split(tmp_path, **files), "de-en", "dev")
    assert split.src.ids == ["d1", "d2", "d3"] and split.tgt.ids == ["e1", "e2", "e3"]
    assert split.gold == {("d1", "e2"), ("d3", "e1")}


COMPRESSORS = {
    ".zst": zstandard.ZstdCompressor().compress,
    ".gz": lambda data: gzip.compress(data, mtime=0),
    ".xz": lzma.compress,
}


@pytest.mark.parametrize("suffix", sorted(COMPRESSORS))
def test_compressed_split_files_are_read(tmp_path: Path, suffix: str) -> None:
    """The scale set is de-en.scale.{de,en,gold}.zst."""
    for name, data in (("de", DE), ("en", EN), ("gold", GOLD)):
        (tmp_path / f"de-en.scale.{name}{suffix}").write_bytes(COMPRESSORS[suffix](data))
    split = read_bucc(tmp_path, "de-en", "scale")
    assert split.src.sentences == ["Der Hund schläft.", "Ein Mann\tfährt.", "Preise stiegen."]
    assert split.gold == {("d1", "e2"), ("d3", "e1")}


def test_a_plain_and_a_compressed_file_of_one_name_are_refused(tmp_path: Path) -> None:
    write_split(tmp_path)
    (tmp_path / "de-en.dev.en.zst").write_bytes(zstandard.ZstdCompressor().compress(EN))
    with pytest.raises(BuccError) as excinfo:
        read_bucc(tmp_path, "de-en", "dev")
    assert_one_line_error(excinfo, f"{tmp_path / 'de-en.dev.en'} and de-en.dev.en.zst both exist")


def assert_one_line_error(excinfo: pytest.ExceptionInfo[BuccError], prefix: str, *fragments: str) -> None:
    message = str(excinfo.value)
    assert isinstance(excinfo.value, BitextmineError)
    assert "\n" not in message and "\r" not in message
    assert message.startswith(prefix), message
    for fragment in fragments:
        assert fragment in message, message


@pytest.mark.parametrize("missing", ["de-en.dev.de", "de-en.dev.en", "de-en.dev.gold"])
def test_missing_file(tmp_path: Path, missing: str) -> None:
    write_split(tmp_path)
    (tmp_path / missing).unlink()
    with pytest.raises(BuccError) as excinfo:
        read_bucc(tmp_path, "de-en", "dev")
    assert_one_line_error(
        excinfo,
        f"{tmp_path / missing}: no such file",
        "expected BUCC 2018 files de-en.dev.de, de-en.dev.en, de-en.dev.gold, each plain or .zst/.gz/.xz",
    )


def test_missing_side_file_even_without_gold(tmp_path: Path) -> None:
    with pytest.raises(BuccError) as excinfo:
        read_bucc(tmp_path, "de-en", "dev", require_gold=False)
    assert_one_line_error(excinfo, f"{tmp_path / 'de-en.dev.de'}: no such file")


SIDE_ERRORS = [
    (b"d1\tA.\nd2 no tab\n", 2, "expected ID<TAB>SENTENCE"),
    (b"d1\tA.\n\tno id\n", 2, "expected ID<TAB>SENTENCE"),
    (b"d1\t\n", 1, "expected ID<TAB>SENTENCE"),
    (b"d1\tA.\r\n\r\n", 2, "expected ID<TAB>SENTENCE"),
    (b"d1\tA.\nd2\tB.\nd1\tC.\n", 3, "duplicate id d1 (first on line 1)"),
]


@pytest.mark.parametrize(("content", "line", "fragment"), SIDE_ERRORS)
def test_side_file_errors(tmp_path: Path, content: bytes, line: int, fragment: str) -> None:
    write_split(tmp_path, de=content)
    with pytest.raises(BuccError) as excinfo:
        read_bucc(tmp_path, "de-en", "dev")
    assert_one_line_error(excinfo, f"{tmp_path / 'de-en.dev.de'}:{line}: ", fragment)


def test_empty_side_file(tmp_path: Path) -> None:
    write_split(tmp_path, en=b"")
    with pytest.raises(BuccError) as excinfo:
        read_bucc(tmp_path, "de-en", "dev")
    assert_one_line_error(excinfo, f"{tmp_path / 'de-en.dev.en'}: empty split, no sentences")


GOLD_ERRORS = [
    (b"d1\te2\nd3 e1\n", 2, "expected X-ID<TAB>EN-ID"),
    (b"d1\te2\td3\n", 1, "expected X-ID<TAB>EN-ID"),
    (b"d1\te2\n\te1\n", 2, "expected X-ID<TAB>EN-ID"),
    (b"d1\te2\n\n", 2, "expected X-ID<TAB>EN-ID"),
    (b"d1\te2\nd9\te1\n", 2, "unknown de id d9"),
    (b"d1\te2\nd3\te9\n", 2, "unknown en id e9"),
    (b"d1\te2\nd3\te1\nd1\te3\n", 3, "de id d1 is already paired (line 1)"),
    (b"d1\te2\nd3\te2\n", 2, "en id e2 is already paired (line 1)"),
    (b"d1\te2\nd3\te1\nd1\te2\n", 3, "duplicate pair d1 e2 (first on line 1)"),
    (b"d1\te2\n\xffd3\te1\n", 2, "unknown de id \ufffdd3"),  # replaced (one policy: text/reader.py)
]


def test_invalid_utf8_is_replaced_and_reported_once_per_file(tmp_path: Path) -> None:
    write_split(tmp_path, de=b"d1\tA.\nd2\tB\xe4d\nd3\t\xff\xfe C.\n")
    with pytest.warns(BitextmineWarning) as caught:
        split = read_bucc(tmp_path, "de-en", "dev")
    assert split.src.sentences == ["A.", "B\ufffdd", "\ufffd\ufffd C."]
    assert [str(w.message) for w in caught] == [
        f"{tmp_path / 'de-en.dev.de'}:2: invalid UTF-8 replaced by U+FFFD (2 lines in this file)"
    ]


@pytest.mark.parametrize(("content", "line", "fragment"), GOLD_ERRORS)
def test_gold_file_errors(tmp_path: Path, content: bytes, line: int, fragment: str) -> None:
    write_split(tmp_path, gold=content)
    with pytest.raises(BuccError) as excinfo:
        read_bucc(tmp_path, "de-en", "dev")
    assert_one_line_error(excinfo, f"{tmp_path / 'de-en.dev.gold'}:{line}: ", fragment)


def test_read_real_dev_split() -> None:
    directory = require_shared("data/bucc-like/de-en")
    split = read_bucc(directory, "de-en", "dev")
    assert len(split.src.ids) == len(split.src.sentences) == 8400
    assert len(split.tgt.ids) == len(split.tgt.sentences) == 8400
    assert split.gold is not None and len(split.gold) == 400
    assert all(x.startswith("de-") and en.startswith("en-") for x, en in split.gold)
    assert score_pairs(split.gold, split.gold) == Scores(1.0, 1.0, 1.0, 400, 400, 400)


# --- a mined file scored against a split (eval bucc --mined) --------------------------------------


def write_mined_file(path: Path, pairs: list[tuple[float, str, str]]) -> Path:
    """`pairs` (score, src, tgt) written by mine's own writer, in the format `path`'s suffix names."""
    rows = [[Row(0, i + 1, pair[side]) for i, pair in enumerate(pairs)] for side in (1, 2)]
    chunk = (np.array([pair[0] for pair in pairs]), *rows, None)
    keep_all = PairFilter(NO_FILTERS, "de", "en")
    target = OutputTarget(path)
    write_pairs(target, output_format(path), [chunk], (["de.txt"], ["en.txt"]), keep_all, (1.0, 2.0))
    return path


TRUE_PAIRS = [(1.5, "Der Hund schläft.", "The dog sleeps."), (1.4, "Preise stiegen.", "Prices rose.")]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_mined_file_of_every_format_mine_writes_is_scored(tmp_path: Path, fmt: str) -> None:
    """`eval bucc --mined` refused the .jsonl that `mine` wrote."""
    split = read_bucc(write_split(tmp_path), "de-en", "dev")
    mined = write_mined_file(tmp_path / f"de-en.{fmt}", TRUE_PAIRS)
    scores = score_mined_file(mined, split)
    assert (scores.f1, scores.predicted, scores.true_positives) == (1.0, 2, 2)


def test_a_mined_file_of_another_corpus_is_refused_and_foreign_pairs_are_warned_about(tmp_path: Path) -> None:
    """Another corpus's mined file scored F1 0 without a word."""
    split = read_bucc(write_split(tmp_path), "de-en", "dev")
    other = write_mined_file(tmp_path / "other.jsonl", [(1.5, "Ein Satz.", "A sentence."), (1.2, "B.", "C.")])
    with pytest.raises(BuccError) as excinfo:
        score_mined_file(other, split)
    assert_one_line_error(excinfo, f"{other}: none of its 2 pairs are sentences of de-en dev")
    warnings: list[str] = []
    mixed = write_mined_file(tmp_path / "mixed.tsv.zst", [*TRUE_PAIRS, (1.2, "Ein Satz.", "Prices rose.")])
    assert score_mined_file(mixed, split, warnings.append).f1 == 1.0
    assert warnings == [f"{mixed}: 1 of its 3 pairs are not sentences of de-en dev; left out of the scores"]


# --- scoring ---------------------------------------------------------------------------------------


def test_score_pairs_hand_computed() -> None:
    gold = {("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")}
    predicted = [("a", "1"), ("b", "2"), ("c", "9"), ("a", "1")]  # the duplicate counts once
    scores = score_pairs(predicted, gold)
    assert (scores.true_positives, scores.predicted, scores.gold) == (2, 3, 4)
    assert scores.precision == pytest.approx(2 / 3)
    assert scores.recall == pytest.approx(1 / 2)
    assert scores.f1 == pytest.approx(4 / 7)
    percent = scores.as_percent()
    assert percent.keys() == {"precision", "recall", "f1"}
    assert percent["f1"] == pytest.approx(400 / 7)


def test_score_pairs_zero_cases() -> None:
    gold = {("a", "1")}
    assert score_pairs([], gold) == Scores(0.0, 0.0, 0.0, 0, 0, 1)
    assert score_pairs([("a", "1")], set()) == Scores(0.0, 0.0, 0.0, 0, 1, 0)
    assert score_pairs([], set()) == Scores(0.0, 0.0, 0.0, 0, 0, 0)
    assert score_pairs([("b", "2")], gold) == Scores(0.0, 0.0, 0.0, 0, 1, 1)


# --- threshold sweep -------------------------------------------------------------------------------


def test_sweep_hand_computed() -> None:
    # sorted scores 1.20 1.10 1.10 1.05 1.00, gold T T F T F, 4 gold pairs in all:
    #   t = 2.20  (above max) keeps none:           F1 = 0
    #   t = 1.15  keeps 1.20:              TP 1/1   F1 = 2/(1+4) = 0.400
    #   t = 1.075 keeps 1.20 1.10 1.10:    TP 2/3   F1 = 4/(3+4) = 0.571
    #   t = 1.025 keeps ... 1.05:          TP 3/4   F1 = 6/(4+4) = 0.750  <- best, P = R = 3/4
    #   t = 1.00  keeps all:               TP 3/5   F1 = 6/(5+4) = 0.667
    scores = np.array([1.10, 1.00, 1.20, 1.05, 1.10])  # unsorted input
    is_gold = np.array([True, False, True, True, False])
    result = sweep_threshold(scores, is_gold, 4)
    assert result.threshold == pytest.approx(1.025)
    assert result.candidates == 5
    assert (result.scores.true_positives, result.scores.predicted, result.scores.gold) == (3, 4, 4)
    assert (result.scores.precision, result.scores.recall, result.scores.f1) == (0.75, 0.75, 0.75)


def test_sweep_keeps_ties_together() -> None:
    # splitting the tie at 1.0 (keeping only its gold member) would give F1 = 1; ties go together:
    #   t = 1.5 keeps 2.0: TP 1/1, F1 = 2/3;  t = 1.0 keeps all: TP 2/3, F1 = 4/5  <- best
    result = sweep_threshold(np.array([2.0, 1.0, 1.0]), np.array([True, True, False]), 2)
    assert result.threshold == 1.0
    assert (result.scores.true_positives, result.scores.predicted) == (2, 3)
    assert result.scores.f1 == pytest.approx(4 / 5)


def test_sweep_prefers_higher_threshold_among_equal_f1() -> None:
    # t = 3.5: TP 1/1, F1 = 2/(1+2) = 2/3;  t = 2.5: 2/4;  t = 1.5: 2/5;  t = 1.0 (all): TP 2/4, 4/6 = 2/3
    scores, is_gold = np.array([1.0, 2.0, 3.0, 4.0]), np.array([True, False, False, True])
    result = sweep_threshold(scores, is_gold, 2)
    assert result.threshold == 3.5
    assert (result.scores.true_positives, result.scores.predicted) == (1, 1)
    assert result.scores.f1 == pytest.approx(2 / 3)


def test_sweep_without_gold_candidates_keeps_nothing() -> None:
    result = sweep_threshold(np.array([1.0, 2.0]), np.array([False, False]), 3)
    assert result.threshold > 2.0
    assert result.scores == Scores(0.0, 0.0, 0.0, 0, 0, 3)


def test_sweep_adjacent_floats() -> None:
    # the midpoint of 1 and the next float up rounds to 1.0 itself; the threshold must still drop 1.0
    high = np.nextafter(1.0, 2.0)
    result = sweep_threshold(np.array([high, 1.0]), np.array([True, False]), 1)
    assert result.threshold == high and result.scores.f1 == 1.0


def test_sweep_float32_threshold_is_exact() -> None:
    scores = np.array([1.0, np.nextafter(np.float32(1.0), np.float32(2.0)), 0.5], dtype=np.float32)
    is_gold = np.array([False, True, False])
    result = sweep_threshold(scores, is_gold, 1)
    assert np.float32(result.threshold) == result.threshold
    assert int((scores >= result.threshold).sum()) == result.scores.predicted == 1


def test_sweep_errors() -> None:
    with pytest.raises(BuccError, match="no candidate pairs"):
        sweep_threshold(np.array([]), np.array([], dtype=bool), 3)
    with pytest.raises(BuccError, match="no gold pairs"):
        sweep_threshold(np.array([1.0]), np.array([False]), 0)
    with pytest.raises(BuccError, match="finite"):
        sweep_threshold(np.array([1.0, np.nan]), np.array([True, False]), 1)
    with pytest.raises(ValueError, match="gold_total"):
        sweep_threshold(np.array([1.0, 2.0]), np.array([True, True]), 1)
    with pytest.raises(ValueError, match="1-D"):
        sweep_threshold(np.array([1.0, 2.0]), np.array([True]), 1)


candidates = st.lists(
    st.tuples(
        st.one_of(st.sampled_from([0.5, 1.0, 1.0625, 1.1, 2.0]), st.floats(-1e6, 1e6)),
        st.booleans(),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(candidates=candidates, missed=st.integers(0, 3), float32=st.booleans())
def test_sweep_matches_brute_force(candidates: list[tuple[float, bool]], missed: int, float32: bool) -> None:
    scores = np.array([s for s, _ in candidates], dtype=np.float32 if float32 else np.float64)
    is_gold = np.array([g for _, g in candidates])
    gold_total = int(is_gold.sum()) + missed
    if gold_total == 0:
        gold_total = missed = 1

    def naive_f1(threshold: float) -> float:
        kept = [i for i in range(len(scores)) if scores[i] >= threshold]
        true_positives = sum(bool(is_gold[i]) for i in kept)
        return 2 * true_positives / (len(kept) + gold_total)

    result = sweep_threshold(scores, is_gold, gold_total)
    assert result.scores.f1 == max(naive_f1(float(t)) for t in set(scores.tolist()))
    assert result.candidates == len(scores)

    # applying the returned threshold reproduces the returned Scores exactly
    pairs = [(f"x{i}", f"e{i}") for i in range(len(scores))]
    gold = {pair for pair, g in zip(pairs, is_gold, strict=True) if g}
    gold |= {(f"missed-x{j}", f"missed-e{j}") for j in range(missed)}
    kept = [pair for pair, score in zip(pairs, scores, strict=True) if score >= result.threshold]
    assert score_pairs(kept, gold) == result.scores
    # every smaller kept set (a higher threshold) has a lower F1
    lowest_kept = min((float(s) for s in scores if s >= result.threshold), default=np.inf)
    assert all(naive_f1(t) < result.scores.f1 for t in set(scores.tolist()) if t > lowest_kept)
