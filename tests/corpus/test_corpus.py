"""Tests for bitextmine.text (reading, cleaning, dedup), bitextmine.corpus (the pass) and
bitextmine.workspace.corpus (shards, manifest)."""

from __future__ import annotations

import gc
import gzip
import hashlib
import io
import lzma
import os
import random
import re
import sys
import tempfile
import tracemalloc
import types
from pathlib import Path

import numpy as np
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from bitextmine.corpus.build import build_corpus
from bitextmine.corpus.settings import CorpusSettings
from bitextmine.corpus.sift import iter_corpus
from bitextmine.errors import BitextmineError
from bitextmine.text import reader as corpus
from bitextmine.text.cleaning import clean_line
from bitextmine.text.dedup import Deduplicator
from bitextmine.text.lid import DEFAULT_MIN_CONFIDENCE, LidFilter, model_id
from bitextmine.text.reader import Columns, CorpusCounts, CorpusError, Row, iter_rows, open_binary, read_lines
from bitextmine.workspace.corpus import (
    CorpusManifest,
    SourceInfo,
    TextShard,
    load_manifest,
    read_text_shard,
    write_text_shards,
)

SAMPLE = "First sentence.\n\n  Second\tone  \n\n\nThird — ünïcödé 字\n   \n"
SAMPLE_ROWS = [(1, "First sentence."), (3, "Second one"), (6, "Third — ünïcödé 字")]


def rows_of(path: str, **kwargs) -> tuple[list[tuple[int, str]], CorpusCounts, list[str]]:
    counts, warnings = CorpusCounts(), []
    rows = [(r.line, r.text) for r in iter_rows(str(path), 0, counts, warn=warnings.append, **kwargs)]
    return rows, counts, warnings


def zstd(data: bytes, **kwargs) -> bytes:
    return zstandard.ZstdCompressor(**kwargs).compress(data)


def starting(text: str) -> str:
    return "^" + re.escape(text)


def exactly(text: str) -> str:
    return starting(text) + "$"


def set_stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(buffer=io.BytesIO(data)))


# --- clean_line --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("a\tb", "a b"),
        ("  a  \t\t b  ", "a b"),
        ("a\u00a0b\u202fc\u2003d", "a b c d"),
        ("zero\u200bwidth", "zerowidth"),
        ("\ufeffbom", "bom"),
        ("soft\u00adhyphen", "softhyphen"),
        ("crlf line\r\n", "crlf line"),
        ("a\u2028b\u2029c", "a b c"),
        ("a\x0bb\x0cc\x1cd\x1de\x1ef", "a b c d e f"),
        ("a\x07b\x1bc\x7fd", "a b c d"),
        ("a\x85b\x9fc\x80d\x81e", "a bŸc€d e"),  # C1 as cp1252; U+0085 and undefined ones are spaces
        ("a \u200b b", "a b"),
        (" \t\u00a0\u200b ", ""),
        ("plain text", "plain text"),
        ("zwj\u200d kept", "zwj\u200d kept"),
    ],
)
def test_clean_line(raw: str, expected: str) -> None:
    assert clean_line(raw) == expected


# --- reading formats -----------------------------------------------------------------------------------


@pytest.mark.integration  # four full garbage collections with torch loaded: seconds
def test_plain_gzip_zstd_xz_and_stdin_give_the_same_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = SAMPLE.encode()
    (tmp_path / "a.txt").write_bytes(data)
    (tmp_path / "a.txt.gz").write_bytes(gzip.compress(data))
    (tmp_path / "a.txt.zst").write_bytes(zstd(data))
    (tmp_path / "a.txt.xz").write_bytes(lzma.compress(data))
    for name in ("a.txt", "a.txt.gz", "a.txt.zst", "a.txt.xz"):
        rows, counts, _ = rows_of(tmp_path / name)
        assert rows == SAMPLE_ROWS, name
        assert (counts.lines, counts.empty, counts.kept) == (7, 4, 3)
    for stdin_data in (data, gzip.compress(data), zstd(data), lzma.compress(data)):
        set_stdin(monkeypatch, stdin_data)
        assert rows_of("-")[0] == SAMPLE_ROWS
        buffer = io.BufferedReader(io.BytesIO(stdin_data))  # like the real sys.stdin.buffer
        monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(buffer=buffer))
        assert rows_of("-")[0] == SAMPLE_ROWS
        gc.collect()
        assert not buffer.closed  # stdin is never closed


def test_compression_detected_by_magic_not_name(tmp_path: Path) -> None:
    data = SAMPLE.encode()
    (tmp_path / "gz.txt").write_bytes(gzip.compress(data))
    (tmp_path / "zst.gz").write_bytes(zstd(data))
    (tmp_path / "plain.zst").write_bytes(data)
    for name in ("gz.txt", "zst.gz", "plain.zst"):
        assert rows_of(tmp_path / name)[0] == SAMPLE_ROWS, name
    with open_binary(str(tmp_path / "zst.gz")) as fh:
        assert fh.read() == data


def test_concatenated_gzip_members_and_zstd_frames(tmp_path: Path) -> None:
    a, b = b"one\ntwo\n", b"three\n"
    (tmp_path / "multi.gz").write_bytes(gzip.compress(a) + gzip.compress(b))
    streamed = zstandard.ZstdCompressor().compressobj()  # no content size in the frame header
    skippable = (0x184D2A53).to_bytes(4, "little") + (3).to_bytes(4, "little") + b"xyz"
    run = b"r" * 300_000 + b"\n"  # whole blocks of one byte: zstd writes RLE blocks
    frames = zstd(a, write_checksum=True) + skippable + zstd(run) + streamed.compress(b) + streamed.flush()
    (tmp_path / "multi.zst").write_bytes(frames)
    expected = [(1, "one"), (2, "two"), (3, "three")]
    assert rows_of(tmp_path / "multi.gz")[0] == expected
    assert rows_of(tmp_path / "multi.zst", max_chars=5)[0] == [*expected[:2], (3, "rrrrr"), (4, "three")]


def test_line_numbers_count_empty_lines_and_crlf(tmp_path: Path) -> None:
    lines = ["", "a", " ", "\t", "b", "", "", "c"]
    (tmp_path / "x.txt").write_bytes("\r\n".join(lines).encode())  # no final newline
    rows, counts, _ = rows_of(tmp_path / "x.txt")
    assert rows == [(i + 1, s) for i, s in enumerate(lines) if s.strip()]
    assert counts.lines == len(lines)
    assert counts.empty == sum(1 for s in lines if not s.strip())


def test_invalid_utf8_replaced_counted_and_warned(tmp_path: Path) -> None:
    path = tmp_path / "bad.txt"
    path.write_bytes(b"good\nbad \xff byte\nok\n\xc3(\n")
    rows, counts, warnings = rows_of(path)
    assert rows == [(1, "good"), (2, "bad \ufffd byte"), (3, "ok"), (4, "\ufffd(")]
    assert counts.invalid_utf8 == 2
    assert len(warnings) == 1
    assert f"{path}:2:" in warnings[0] and "2 lines" in warnings[0]


def test_nul_byte_is_an_error_with_line(tmp_path: Path) -> None:
    path = tmp_path / "bin.txt"
    path.write_bytes(b"text\nmore\nbin\x00ary\n")
    with pytest.raises(CorpusError, match=starting(f"{path}:3: binary data")):
        rows_of(path)


def test_nul_byte_in_discarded_part_of_long_line(tmp_path: Path) -> None:
    path = tmp_path / "bin.txt"
    path.write_bytes(b"ok\n" + b"x" * 1000 + b"\x00\n")
    with pytest.raises(CorpusError, match=starting(f"{path}:2: binary data")):
        rows_of(path, max_chars=10)


class Endless(io.RawIOBase):
    """A stream of one byte value without end (/dev/zero for NUL) that fails a reader still reading after
    `limit` bytes (rather than leaving it to read for ever)."""

    def __init__(self, byte: bytes, limit: int = 64 << 20) -> None:
        super().__init__()
        self.byte, self.limit, self.read_bytes = byte, limit, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        assert self.read_bytes < self.limit, f"read {self.read_bytes:,} bytes of a line without end"
        buffer[:] = self.byte * len(buffer)
        self.read_bytes += len(buffer)
        return len(buffer)


@pytest.mark.parametrize("columns", [None, Columns(2)], ids=["lines", "columns"])
def test_an_endless_line_of_nuls_is_an_error_at_its_first_bytes(monkeypatch, columns) -> None:
    zeros = Endless(b"\0")
    monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(buffer=zeros))
    with pytest.raises(CorpusError, match=starting("<stdin>:1: binary data")):
        rows_of("-", columns=columns)
    assert zeros.read_bytes <= 2 * corpus._DISCARD_CHUNK


def test_whole_lines_are_read_in_bounded_pieces_up_to_a_bound(monkeypatch) -> None:
    zeros = Endless(b"\0")
    monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(buffer=zeros))
    with pytest.raises(CorpusError, match=starting("<stdin>:1: binary data")):
        list(read_lines("-"))
    assert zeros.read_bytes <= 2 * corpus._DISCARD_CHUNK
    monkeypatch.setattr(corpus, "MAX_LINE_BYTES", 4 * corpus._DISCARD_CHUNK)
    monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(buffer=Endless(b"x")))
    with pytest.raises(CorpusError, match=exactly("<stdin>:1: a line longer than 4 MiB; not a text file")):
        list(read_lines("-"))


COMPRESS = {"zstd": lambda data: zstd(data, write_checksum=True), "gzip": gzip.compress, "xz": lzma.compress}


@pytest.mark.parametrize("kind", list(COMPRESS))
def test_truncated_compressed_input(tmp_path: Path, kind: str) -> None:
    data = "".join(f"sentence number {i}\n" for i in range(5000)).encode()
    blob = COMPRESS[kind](data)
    path = tmp_path / "cut.bin"
    cuts = [*range(4, len(blob), max(1, len(blob) // 25)), len(blob) - 1, len(blob) - 4]
    message = starting(f"{path}: corrupt or truncated {kind} data after line ") + r"\d+$"
    for cut in cuts:
        path.write_bytes(blob[:cut])
        with pytest.raises(CorpusError, match=message):
            rows_of(path)
    path.write_bytes(blob)
    assert len(rows_of(path)[0]) == 5000


def test_streams_are_closed(tmp_path: Path) -> None:
    fd_dir = Path("/proc/self/fd")
    if not fd_dir.is_dir():
        pytest.skip("needs /proc/self/fd")
    data = b"a\nb\n"
    blobs = {"plain": data, "gzip": gzip.compress(data), "zstd": zstd(data)}
    for kind, blob in blobs.items():
        path = tmp_path / kind
        path.write_bytes(blob)
        before = len(list(fd_dir.iterdir()))
        with open_binary(str(path)) as fh:
            assert fh.read() == data
            assert len(list(fd_dir.iterdir())) == before + 1
        assert len(list(fd_dir.iterdir())) == before, kind
        rows_of(path)
        assert len(list(fd_dir.iterdir())) == before, kind


def test_iter_rows_closes_its_file_when_done(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened = []
    real_open = corpus._open

    def recording_open(p: str):
        opened.append(real_open(p))
        return opened[-1]

    monkeypatch.setattr(corpus, "_open", recording_open)
    (tmp_path / "a.txt").write_bytes(b"a\n")
    rows_of(tmp_path / "a.txt")
    assert opened[0][0].closed


def test_corrupt_gzip(tmp_path: Path) -> None:
    blob = bytearray(gzip.compress(b"hello world\n" * 1000))
    blob[30] ^= 0xFF
    path = tmp_path / "bad.gz"
    path.write_bytes(bytes(blob))
    with pytest.raises(CorpusError, match=starting(f"{path}: corrupt or truncated gzip data after line ")):
        rows_of(path)


def test_missing_directory_and_unreadable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "nope.txt"
    with pytest.raises(CorpusError, match=exactly(f"{missing}: no such file")):
        rows_of(missing)
    with pytest.raises(CorpusError, match=exactly(f"{tmp_path}: is a directory, not a corpus file")):
        rows_of(tmp_path)

    def deny(path, mode="r", *args, **kwargs):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(corpus, "open", deny, raising=False)
    with pytest.raises(CorpusError, match=exactly(f"{missing}: permission denied")):
        open_binary(str(missing))


def test_a_corpus_that_lid_drops_whole_is_an_error_saying_so(tmp_path: Path) -> None:
    english = tmp_path / "en.txt"
    english.write_text("The weather is lovely today.\n\nWhere is the train station?\n")
    lid = LidFilter("de", DEFAULT_MIN_CONFIDENCE, model_id())
    expected = f"no sentences in {english}: every line was dropped (1 empty, 2 by --lid)"
    with pytest.raises(CorpusError, match=exactly(expected)):
        build_corpus([str(english)], "de", tmp_path / "out", CorpusSettings(10, lid=lid))


def test_empty_file_warns_and_all_empty_is_an_error(tmp_path: Path) -> None:
    empty, blank = tmp_path / "empty.txt", tmp_path / "blank.txt"
    empty.write_bytes(b"")
    blank.write_bytes(b"\n \n\t\n")
    rows, counts, warnings = rows_of(empty)
    assert rows == [] and counts.lines == 0
    assert warnings == [f"{empty}: empty file, no sentences"]
    warnings = []
    with pytest.raises(CorpusError, match=exactly(f"no sentences in {empty}, {blank}: every line is empty")):
        build_corpus(
            [str(empty), str(blank)], "xx", tmp_path / "out", CorpusSettings(10), warn=warnings.append
        )
    assert warnings == [
        f"{empty}: empty file, no sentences",
        f"{blank}: empty file, no sentences (all 3 lines are blank)",
    ]


class RecordingReader:
    """Wraps a binary stream and records how many bytes each readline returned."""

    def __init__(self, fh) -> None:
        self.fh, self.sizes = fh, []

    def readline(self, limit: int = -1) -> bytes:
        assert limit > 0, "unbounded readline"
        line = self.fh.readline(limit)
        self.sizes.append(len(line))
        return line

    def close(self) -> None:
        self.fh.close()


@pytest.mark.parametrize("kind", ["plain", "zstd", "gzip"])
def test_over_long_line_is_cut_with_bounded_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    long_line = "abcd " * 1_000_000  # 5 MB; the cut at 100 characters falls on a space
    data = f"short\n{long_line}\nafter\nx {'y' * 150}\n".encode()
    blob = {"plain": data, "zstd": zstd(data), "gzip": gzip.compress(data, 1)}[kind]
    path = tmp_path / "long.txt"
    path.write_bytes(blob)
    readers: list[RecordingReader] = []
    real_open = corpus._open

    def recording_open(p: str):
        fh, k = real_open(p)
        readers.append(RecordingReader(fh))
        return readers[-1], k

    monkeypatch.setattr(corpus, "_open", recording_open)
    tracemalloc.start()
    try:
        rows, counts, warnings = rows_of(path, max_chars=100)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rows == [(1, "short"), (2, "abcd " * 19 + "abcd"), (3, "after"), (4, "x " + "y" * 98)]
    assert counts.too_long == 2
    assert warnings == [f"{path}:2: line longer than 100 characters, cut (2 lines in this file)"]
    assert max(readers[0].sizes) <= corpus._DISCARD_CHUNK
    assert peak < 4 * corpus._DISCARD_CHUNK  # the 5 MB line was never held whole


@pytest.mark.parametrize(
    ("line", "text", "too_long", "invalid"),
    [
        (" " * 1000 + "word " * 10, "word word", 1, 0),  # cleaned first, then cut
        (" \t" * 1000 + "hi" + " " * 1000, "hi", 0, 0),
        ("\u200b" * 500 + "abc", "abc", 0, 0),
        ("\u00a0" * 500 + "abc" + "\u2028" * 500 + "def", "abc def", 0, 0),
        ("x" * 5 + "\udcff" + "y" * 200, "xxxxx\ufffdyyyy", 1, 1),
        ("x" * 200 + "\udcff", "x" * 10, 1, 0),  # the invalid byte is in the discarded part
    ],
)
def test_long_line_is_cleaned_before_the_cut(
    tmp_path: Path, line: str, text: str, too_long: int, invalid: int
) -> None:
    path = tmp_path / "long.txt"
    path.write_bytes(b"first\n" + line.encode(errors="surrogateescape") + b"\nlast")
    rows, counts, _ = rows_of(path, max_chars=10)
    assert rows == [(1, "first"), (2, text), (3, "last")]
    assert (counts.too_long, counts.invalid_utf8) == (too_long, invalid)


def test_cut_at_byte_limit_does_not_invent_invalid_utf8(tmp_path: Path) -> None:
    path = tmp_path / "multi.txt"
    text = "字" * 50  # 3 bytes each: the 48-byte limit for max_chars=10 falls inside a character
    path.write_text(text + "\n" + text[:5] + "\n", encoding="utf-8")
    rows, counts, _ = rows_of(path, max_chars=10)
    assert rows == [(1, "字" * 10), (2, "字" * 5)]
    assert (counts.invalid_utf8, counts.too_long) == (0, 1)


# --- dedup ---------------------------------------------------------------------------------------------

sentence = st.text(alphabet="ab \t\u00a0\u200b", max_size=4)


@settings(max_examples=40, deadline=None)
@given(files=st.lists(st.lists(sentence, max_size=30), min_size=1, max_size=3))
def test_dedup_matches_a_set(files: list[list[str]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, lines in enumerate(files):
            paths.append(os.path.join(tmp, f"f{i}.txt"))
            Path(paths[-1]).write_text("".join(s + "\n" for s in lines), encoding="utf-8")
        expected, seen, nonempty = [], set(), 0
        for source, lines in enumerate(files):
            for lineno, s in enumerate(lines, start=1):
                norm = " ".join(s.replace("\u200b", "").split())
                nonempty += bool(norm)
                if norm and norm not in seen:
                    seen.add(norm)
                    expected.append((source, lineno, norm))
        counts = CorpusCounts()
        got = [(r.source, r.line, r.text) for r in iter_corpus(paths, counts, CorpusSettings(dedup=True))]
        assert got == expected
        assert counts.kept == len(expected)
        assert counts.duplicates == nonempty - len(expected)
        counts = CorpusCounts()
        assert sum(1 for _ in iter_corpus(paths, counts, CorpusSettings())) == nonempty == counts.kept


def test_deduplicator_grows_and_agrees_with_a_set() -> None:
    rng = random.Random(7)
    d, reference = Deduplicator(capacity=16), set()
    assert d.capacity == 16
    for _ in range(20000):
        s = f"s{rng.randrange(6000)}"
        assert d.seen(s) == (s in reference)
        reference.add(s)
    assert len(d) == len(reference)
    assert d.capacity >= 2 * len(reference)  # load stays at most 50%
    assert d.nbytes == 8 * d.capacity
    assert d.nbytes <= 32 * len(reference)
    stored = np.sort(d._table[d._table != 0])
    assert np.array_equal(stored, np.sort(np.array([Deduplicator.hash(s) for s in reference], np.uint64)))


def test_deduplicator_reserved_empty_value_is_remapped() -> None:
    d = Deduplicator(capacity=4)
    assert not d.seen_hash(0)
    assert len(d) == 1
    assert d.seen_hash(0)
    assert d.seen_hash(1)  # 0 is stored as 1
    assert not d.seen_hash(2**64 - 1)
    for h in range(2, 40):  # force several doublings with the remapped value inside
        assert not d.seen_hash(h << 8)
    assert d.seen_hash(0) and d.seen_hash(2**64 - 1)
    assert len(d) == 40


# --- shards and manifest -------------------------------------------------------------------------------


def make_rows(n: int) -> list[Row]:
    return [Row(i % 3, 10 * i + 1, f"sentence {i} ü") for i in range(n)]


@pytest.mark.parametrize(
    ("n", "size", "expected_rows"), [(23, 5, [5, 5, 5, 5, 3]), (10, 5, [5, 5]), (0, 5, []), (3, 1, [1, 1, 1])]
)
def test_write_text_shards(tmp_path: Path, n: int, size: int, expected_rows: list[int]) -> None:
    rows = make_rows(n)
    reported: list[TextShard] = []
    shards = write_text_shards(iter(rows), tmp_path, size, on_shard=reported.append)
    assert reported == shards
    assert [s.rows for s in shards] == expected_rows
    assert [s.name for s in shards] == [f"shard-{i:05d}.tsv" for i in range(len(expected_rows))]
    assert sorted(p.name for p in tmp_path.iterdir()) == [s.name for s in shards]
    start = 0
    for shard in shards:
        assert shard.first_row == start
        data = (tmp_path / shard.name).read_bytes()
        assert shard.sha256 == hashlib.sha256(data).hexdigest()
        part = rows[start : start + shard.rows]
        assert data == "".join(f"{r.source}\t{r.line}\t{r.text}\n" for r in part).encode()
        texts, sources, lines = read_text_shard(tmp_path / shard.name)
        assert texts == [r.text for r in part]
        assert sources.dtype == np.int32 and sources.tolist() == [r.source for r in part]
        assert lines.dtype == np.int64 and lines.tolist() == [r.line for r in part]
        start += shard.rows
    assert start == n


def test_build_corpus_and_manifest(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt.gz"
    a.write_text("x\ny\n\nx\nz\n", encoding="utf-8")
    b.write_bytes(gzip.compress(b"z\nw\nx\n"))
    out = tmp_path / "work" / "en"
    out.mkdir(parents=True)
    (out / "shard-00007.tsv").write_text("stale\n")
    assert load_manifest(out) is None
    m = build_corpus([str(a), str(b)], "en", out, CorpusSettings(2, dedup=True))
    assert not (out / "shard-00007.tsv").exists()
    assert m.complete and m.rows == 4 and [s.rows for s in m.shards] == [2, 2]
    assert m.counts.as_dict() == {
        "lines": 8,
        "empty": 1,
        "duplicates": 3,
        "invalid_utf8": 0,
        "too_long": 0,
        "kept": 4,
        "missing_columns": 0,
        "wrong_language": 0,
    }
    rows = []
    for shard in m.shards:
        texts, sources, lines = read_text_shard(out / shard.name)
        rows += list(zip(sources.tolist(), lines.tolist(), texts, strict=True))
    assert rows == [(0, 1, "x"), (0, 2, "y"), (0, 5, "z"), (1, 2, "w")]
    assert m.sources == [
        SourceInfo(str(a), a.stat().st_size, a.stat().st_mtime_ns),
        SourceInfo(str(b), b.stat().st_size, b.stat().st_mtime_ns),
    ]

    loaded = load_manifest(out)
    assert loaded == m
    assert CorpusManifest.from_json(m.to_json()) == m
    assert loaded.same_inputs(m)
    assert not loaded.same_inputs(CorpusManifest.from_json({**m.to_json(), "shard_size": 3}))
    assert not loaded.same_inputs(CorpusManifest.from_json({**m.to_json(), "dedup": False}))
    assert not loaded.same_inputs(CorpusManifest.from_json({**m.to_json(), "max_chars": 5}))
    os.utime(a, ns=(a.stat().st_atime_ns, a.stat().st_mtime_ns + 10**9))
    touched = CorpusManifest(**{**m.__dict__, "sources": [SourceInfo.of(str(a)), SourceInfo.of(str(b))]})
    assert not loaded.same_inputs(touched)


def test_same_inputs_never_for_stdin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    set_stdin(monkeypatch, b"a\nb\n")
    m = build_corpus(["-"], "en", tmp_path, CorpusSettings(10))
    assert m.sources == [SourceInfo("-", None, None)]
    assert m.rows == 2
    assert not m.same_inputs(CorpusManifest.from_json(m.to_json()))


def test_source_info_is_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "rel.txt").write_text("a\n")
    monkeypatch.chdir(tmp_path)
    info = SourceInfo.of("rel.txt")
    assert info.path == str(tmp_path / "rel.txt") and info.size == 2
    with pytest.raises(CorpusError, match=exactly("gone.txt: no such file")):
        SourceInfo.of("gone.txt")
    with pytest.raises(CorpusError, match=exactly(f"{tmp_path}: is a directory, not a corpus file")):
        SourceInfo.of(str(tmp_path))


def test_corrupt_manifest_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(
        BitextmineError, match=starting(f"{tmp_path / 'manifest.json'}:1: invalid JSON")
    ) as info:
        load_manifest(tmp_path)
    assert str(info.value).endswith("; delete it to rebuild")
    (tmp_path / "manifest.json").write_text('{"lang": "de"}')  # JSON, but not a manifest
    with pytest.raises(CorpusError, match=starting(f"{tmp_path / 'manifest.json'}: corrupt corpus manifest")):
        load_manifest(tmp_path)


def test_counts_add() -> None:
    a, b = CorpusCounts(1, 2, 3, 4, 5, 6), CorpusCounts(10, 20, 30, 40, 50, 60)
    a.add(b)
    assert a.as_dict() == {
        "lines": 11,
        "empty": 22,
        "duplicates": 33,
        "invalid_utf8": 44,
        "too_long": 55,
        "kept": 66,
        "missing_columns": 0,
        "wrong_language": 0,
    }
