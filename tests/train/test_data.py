"""Training data: source discovery, aligned reading, exclusion, seeded shuffling, token batches, resume."""

from __future__ import annotations

import itertools
import re
from collections import Counter

import pytest

from bitextmine.errors import BitextmineError
from bitextmine.train.data import (
    Pair,
    PairSource,
    find_sources,
    interleave,
    pair_stream,
    read_excluded,
    read_source,
    token_batches,
)


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture
def corpus(tmp_path):
    write(tmp_path / "news.de", [f"de {i}" for i in range(6)])
    write(tmp_path / "news.en", [f"en {i}" for i in range(6)])
    sub = tmp_path / "fr-en"
    sub.mkdir()
    write(sub / "talks.fr", ["fr 0", "", "fr 2"])
    write(sub / "talks.en", ["en a", "en b", "   "])
    write(tmp_path / "extra.ru-en.tsv", ["ru 0\ten x", "ru 1\t", "ru 2\ten z"])
    return tmp_path


def test_sources_are_found_in_directories_and_from_either_file(corpus):
    sources = find_sources([str(corpus)])
    assert [(s.lang, [p.rsplit("/", 1)[-1] for p in s.paths]) for s in sources] == [
        ("ru", ["extra.ru-en.tsv"]),
        ("fr", ["talks.fr", "talks.en"]),
        ("de", ["news.de", "news.en"]),
    ]
    assert find_sources([str(corpus / "news.de")]) == find_sources([str(corpus / "news.en")])


def test_lines_empty_on_either_side_are_skipped_together(corpus):
    (fr,) = [s for s in find_sources([str(corpus)]) if s.lang == "fr"]
    assert list(read_source(fr)) == [Pair("fr", "fr 0", "en a")]
    (ru,) = [s for s in find_sources([str(corpus)]) if s.lang == "ru"]
    assert [(p.src, p.tgt) for p in read_source(ru)] == [("ru 0", "en x"), ("ru 2", "en z")]


def test_bad_sources_are_one_line_errors(tmp_path):
    write(tmp_path / "a.de", ["x", "y", "z"])
    with pytest.raises(BitextmineError, match=r"a\.de: its English side .*a\.en does not exist"):
        find_sources([str(tmp_path / "a.de")])
    write(tmp_path / "a.en", ["x", "y"])
    with pytest.raises(
        BitextmineError, match=r"a\.de: 3 lines but its counterpart has 2; the files are not aligned"
    ):
        list(read_source(find_sources([str(tmp_path / "a.de")])[0]))
    write(tmp_path / "pairs.tsv", ["a\tb"])
    with pytest.raises(BitextmineError, match="name a TSV of pairs after its languages"):
        find_sources([str(tmp_path / "pairs.tsv")])
    write(tmp_path / "p.de-en.tsv", ["a\tb\tc"])
    with pytest.raises(BitextmineError, match=r"p\.de-en\.tsv:1: expected 'xx<TAB>en'"):
        list(read_source(find_sources([str(tmp_path / "p.de-en.tsv")])[0]))
    with pytest.raises(BitextmineError, match="no such file or directory"):
        find_sources([str(tmp_path / "missing")])


def test_excluded_sentences_drop_their_pairs(corpus, tmp_path):
    held_out = write(tmp_path / "held-out.txt", ["de-000000001\tDE 2", "en 4"])  # BUCC line and plain line
    excluded = read_excluded([str(held_out)])
    dropped: list[Pair] = []
    kept = list(interleave(find_sources([str(corpus / "news.de")]), excluded, dropped.append))
    assert [p.src for p in kept] == ["de 0", "de 1", "de 3", "de 5"]  # matched case-insensitively
    assert [p.src for p in dropped] == ["de 2", "de 4"]


def test_the_stream_is_seeded_and_each_epoch_is_a_permutation(corpus):
    sources = find_sources([str(corpus)])
    everything = Counter(interleave(sources))
    first = list(itertools.islice(pair_stream(sources, seed=1, buffer=3), 2 * len(everything)))
    again = list(itertools.islice(pair_stream(sources, seed=1, buffer=3), 2 * len(everything)))
    other = list(itertools.islice(pair_stream(sources, seed=2, buffer=3), 2 * len(everything)))
    assert first == again and first != other
    n = len(everything)
    assert Counter(first[:n]) == everything and Counter(first[n:]) == everything
    assert first[:n] != first[n:]  # epochs are shuffled differently


def test_token_batches_respect_the_budget_and_resume_exactly():
    pairs = [Pair("de", "w " * (i % 7 + 1), "w " * (i % 5 + 1)) for i in range(400)]
    source = [PairSource("de", ("x",))]

    def stream():
        return pair_stream(source, seed=0, buffer=50)

    def tokenize(texts):
        return [[0] * len(t.split()) for t in texts]

    import bitextmine.train.data as data

    original = data.read_source
    data.read_source = lambda s, max_chars=2000, warn=None: iter(pairs)
    try:
        batches = list(itertools.islice(token_batches(stream(), tokenize, max_tokens=40, max_pairs=5), 30))
        assert all(b.tokens <= 40 and len(b.src_ids) <= 5 for b in batches)
        assert [b.pairs_drawn for b in batches] == sorted(b.pairs_drawn for b in batches)
        resumed = token_batches(stream(), tokenize, max_tokens=40, max_pairs=5, skip=batches[9].pairs_drawn)
        assert list(itertools.islice(resumed, 20)) == batches[10:]
    finally:
        data.read_source = original


def test_bad_bytes_in_tsv_and_exclude_files(tmp_path):
    tsv = tmp_path / "p.de-en.tsv"
    tsv.write_bytes(b"gut\tgood\nkaput \xff\tbroken\nok\tok\n\xc3(\tx\n")
    warnings: list[str] = []
    pairs = list(read_source(find_sources([str(tsv)])[0], warn=warnings.append))
    assert [p.src for p in pairs] == ["gut", "kaput \ufffd", "ok", "\ufffd("]
    assert warnings == [f"{tsv}:2: invalid UTF-8 replaced by U+FFFD (2 lines in this file)"]
    held_out = tmp_path / "held-out.txt"
    held_out.write_bytes(b"a\n\xff b\n")
    warnings.clear()
    assert len(read_excluded([str(held_out)], warn=warnings.append)) == 2
    assert warnings == [f"{held_out}:2: invalid UTF-8 replaced by U+FFFD (1 lines in this file)"]
    for path in (tsv, held_out):
        path.write_bytes(b"a\tb\nbin\x00ary\tb\n")
    with pytest.raises(BitextmineError, match=r"p\.de-en\.tsv:2: binary data \(NUL byte\)"):
        list(read_source(find_sources([str(tsv)])[0]))
    with pytest.raises(BitextmineError, match=r"held-out\.txt:2: binary data \(NUL byte\)"):
        read_excluded([str(held_out)])


def test_bad_bytes_in_aligned_files_are_warned_in_the_first_epoch_only(tmp_path):
    (tmp_path / "u.de").write_bytes(b"ein Satz\nkaput \xff\n")
    write(tmp_path / "u.en", ["a sentence", "broken"])
    warnings: list[str] = []
    stream = pair_stream(find_sources([str(tmp_path / "u.de")]), seed=0, buffer=4, warn=warnings.append)
    assert len(list(itertools.islice(stream, 6))) == 6  # three epochs
    assert warnings == [f"{tmp_path / 'u.de'}:2: invalid UTF-8 replaced by U+FFFD (1 lines in this file)"]


def test_no_training_pairs_names_the_files(corpus, tmp_path):
    empty = tmp_path / "empty.de-en.tsv"
    empty.write_bytes(b"")
    warnings: list[str] = []
    with pytest.raises(
        BitextmineError, match=rf"no training pairs in {re.escape(str(empty))}: they are empty"
    ):
        next(pair_stream(find_sources([str(empty)]), seed=0, warn=warnings.append))
    assert warnings == [f"{empty}: no pairs (the file is empty or every line has an empty side)"]
    sources = find_sources([str(corpus / "news.de")])
    excluded = read_excluded([str(corpus / "news.de")])
    with pytest.raises(BitextmineError, match=r"news\.de, .*news\.en: .* \(6 pairs excluded by --exclude\)"):
        next(pair_stream(sources, seed=0, excluded=excluded))
