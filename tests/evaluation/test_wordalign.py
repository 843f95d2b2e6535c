"""Word-level alignment (Gaschi et al. 2022): pair extraction, segmentation, subword averaging, CSLS
weak/strong scores against hand computation, sampling, and `bitextmine eval words` end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from bitextmine.cli import app
from bitextmine.encoder.loading import LoadedModel, load_model
from bitextmine.errors import BitextmineError
from bitextmine.evaluation.words.alignment import (
    Dictionary,
    Segmenter,
    extract_pairs,
    forward_maximum_matching,
    read_dictionary,
    read_parallel,
    unique_candidate_pairs,
)
from bitextmine.evaluation.words.csls import knn_mean, weak_alignment, word_alignment
from bitextmine.evaluation.words.hidden_states import HiddenStates
from bitextmine.evaluation.words.word_eval import (
    WordAlignmentData,
    WordEvalSettings,
    evaluate_words,
    pool_lines,
    sample_distinct,
)
from tests.helpers import TRAINING_TEXT, require_shared

runner = CliRunner()


def dictionary(*entries: str) -> Dictionary:
    forward: dict[str, set[str]] = {}
    backward: dict[str, set[str]] = {}
    for entry in entries:
        x, y = entry.split()
        forward.setdefault(x, set()).add(y)
        backward.setdefault(y, set()).add(x)
    return Dictionary(
        {w: frozenset(t) for w, t in forward.items()}, {w: frozenset(t) for w, t in backward.items()}
    )


def pairs_of(
    src: str, tgt: str, d: Dictionary, langs: tuple[str, str] = ("de", "en")
) -> list[tuple[str, str]]:
    found = extract_pairs([src], [tgt], langs, d)
    return [(p.src.text, p.tgt.text) for p in found]


# ---------------------------------------------------------------------------------------------------
# Dictionary, parallel files, segmentation


def test_read_dictionary_lowercases_and_drops_identical_entries(tmp_path):
    path = tmp_path / "de-en.txt"
    path.write_text("der the\nHund dog\nberlin berlin\nder of\n")
    d = read_dictionary(path)
    assert d.forward == {"der": {"the", "of"}, "hund": {"dog"}}
    assert d.backward["of"] == {"der"}
    assert read_dictionary(path, keep_identical=True).forward["berlin"] == {"berlin"}


@pytest.mark.parametrize("line", ["der", "der the a", ""])
def test_dictionary_line_with_wrong_field_count_names_file_and_line(tmp_path, line):
    path = tmp_path / "d.txt"
    path.write_text(f"der the\nund and\n{line}\nvon of\n")
    with pytest.raises(BitextmineError, match=r"d\.txt:3: expected 2 fields"):
        read_dictionary(path)


def test_missing_files_and_mismatched_line_counts_are_one_line_errors(tmp_path):
    with pytest.raises(BitextmineError, match="no such file"):
        read_dictionary(tmp_path / "absent.txt")
    (tmp_path / "c.de").write_text("a\nb\nc\n")
    (tmp_path / "c.en").write_text("a\nb\n")
    with pytest.raises(BitextmineError, match=r"c\.de: 3 lines but .*c\.en has 2"):
        read_parallel(tmp_path / "c", "de", "en")
    with pytest.raises(BitextmineError, match=r"c\.fr: no such file"):
        read_parallel(tmp_path / "c", "fr", "en")
    assert read_parallel(tmp_path / "c", "de", "de") == (["a", "b", "c"], ["a", "b", "c"])


def test_segmenter_splits_at_whitespace_and_punctuation_with_character_spans():
    words = Segmenter("de")("Der Hund, (müde) schläft.")
    assert [(w.text, w.start, w.end) for w in words] == [
        ("Der", 0, 3),
        ("Hund", 4, 8),
        ("müde", 11, 15),
        ("schläft", 17, 24),
    ]
    assert words[0].key == "der"


def test_chinese_forward_maximum_matching_prefers_the_longest_dictionary_word():
    vocabulary = frozenset({"中国", "中国人", "人民", "北京"})
    assert forward_maximum_matching("中国人民", vocabulary, 3) == [(0, 3), (3, 4)]
    words = Segmenter("zh", vocabulary)("28岁的中国人在北京，Tamaki说")
    assert [w.text for w in words] == ["28", "岁", "的", "中国人", "在", "北京", "Tamaki", "说"]
    text = "28岁的中国人在北京，Tamaki说"
    assert all(text[w.start : w.end] == w.text for w in words)


# ---------------------------------------------------------------------------------------------------
# The unique-candidate rule


def test_unique_translations_are_kept_case_insensitively():
    d = dictionary("der the", "hund dog", "schläft sleeps")
    assert pairs_of("Der Hund schläft.", "The dog sleeps.", d) == [
        ("Der", "The"),
        ("Hund", "dog"),
        ("schläft", "sleeps"),
    ]


def test_two_different_candidates_in_the_target_reject_the_word():
    d = dictionary("bank bank", "bank bench", "der the")
    assert pairs_of("Die Bank", "the bank near the bench", d) == []


def test_a_candidate_occurring_twice_in_the_target_rejects_the_word():
    d = dictionary("hund dog", "sieht sees")
    assert pairs_of("Hund sieht", "dog sees dog", d) == [("sieht", "sees")]


def test_the_reverse_direction_must_be_unique_too():
    # "Hund" has one candidate, "dog", but "dog" translates back to both "Hund" and "Köter".
    d = dictionary("hund dog", "köter dog", "köter cur", "und and")
    assert pairs_of("Hund und Köter", "dog and cur", d) == [("und", "and")]
    # A repeated source word: each occurrence has the one candidate "dog", which is ambiguous back.
    assert pairs_of("Hund und Hund", "dog and", d) == [("und", "and")]


def test_unique_candidate_pairs_gives_word_positions():
    d = dictionary("ich i", "liebe love", "beijing beijing")
    src, tgt = Segmenter("de")("ich liebe Beijing"), Segmenter("en")("I love Beijing")
    assert unique_candidate_pairs(src, tgt, d) == [(0, 0), (1, 1), (2, 2)]


def test_chinese_pairs_from_dictionary_segmentation():
    d = dictionary("我 i", "爱 love", "北京 beijing", "北 north")
    found = extract_pairs(["我爱北京。"], ["I love Beijing."], ("zh", "en"), d)
    assert [(p.src.text, p.tgt.text, p.src.start, p.src.end) for p in found] == [
        ("我", "I", 0, 1),
        ("爱", "love", 1, 2),
        ("北京", "Beijing", 2, 4),
    ]


def test_extract_pairs_only_reads_the_given_lines():
    d = dictionary("hund dog")
    found = extract_pairs(["Hund", "kein", "Hund"], ["dog", "none", "dog"], ("de", "en"), d, [1, 2])
    assert [(p.line, p.types) for p in found] == [(2, ("hund", "dog"))]


# ---------------------------------------------------------------------------------------------------
# Subword vectors


def tiny_states(tiny_model_dir, prefix: str = "") -> HiddenStates:
    loaded = load_model(str(tiny_model_dir("bert")), torch.device("cpu"))
    return HiddenStates(loaded, prefix, max_length=62, max_tokens=64)


def test_tokens_map_back_to_words_and_skip_special_and_prefix_tokens(tiny_model_dir):
    states = tiny_states(tiny_model_dir, prefix="query: ")
    sentence = "the schoolyard sleeps"
    (tokenized,) = states.tokenize([sentence])
    pieces = states.loaded.tokenizer.convert_ids_to_tokens(tokenized.input_ids)
    prefix = len(states.loaded.tokenizer("query: ", add_special_tokens=False)["input_ids"])
    assert pieces[0] == "[CLS]" and pieces[1 + prefix] == "the" and pieces[-1] == "[SEP]"
    assert tokenized.content == [False] * (1 + prefix) + [True] * (len(pieces) - prefix - 2) + [False]
    word = tokenized.tokens_of(4, 14)
    assert [pieces[i] for i in word] == ["school", "##y", "##a", "##r", "##d"]
    assert tokenized.tokens_of(0, 3) == [1 + prefix]


def test_word_vector_is_the_mean_of_its_subword_vectors_at_every_layer(tiny_model_dir):
    states = tiny_states(tiny_model_dir)
    sentences = ["a man rides a bicycles", "the bicycles sleep in the schoolyard of the old town"]
    tokenized = states.tokenize(sentences)
    got = dict(states.run(tokenized))
    assert sorted(got) == [0, 1]
    tokenizer, model = states.loaded.tokenizer, states.loaded.model
    for i, sentence in enumerate(sentences):
        batch = tokenizer(sentence, return_tensors="pt")
        with torch.no_grad():
            reference = torch.stack(model(**batch, output_hidden_states=True).hidden_states)[:, 0]
        assert got[i].shape == (3, len(tokenized[i].input_ids), 32)  # embeddings + 2 blocks
        torch.testing.assert_close(got[i], reference, atol=1e-5, rtol=1e-5)
        start = sentence.index("bicycles")
        pieces = tokenized[i].tokens_of(start, start + len("bicycles"))
        assert len(pieces) == 2
        word = got[i][:, pieces].mean(dim=1)
        torch.testing.assert_close(word, reference[:, pieces].mean(dim=1), atol=1e-5, rtol=1e-5)
    assert list(dict(states.run(tokenized, layers=[-1]))[0].shape) == [1, len(tokenized[0].input_ids), 32]


def test_sentencepiece_token_holding_the_prefix_space_belongs_to_the_first_word(tiny_model_dir, e5_dir):
    from transformers import AutoTokenizer

    tiny = load_model(str(tiny_model_dir("bert")), torch.device("cpu"))
    loaded = LoadedModel(tiny.model, AutoTokenizer.from_pretrained(e5_dir), e5_dir, "e5")
    (tokenized,) = HiddenStates(loaded, "query: ", 512).tokenize(["Der Hund schläft."])
    pieces = loaded.tokenizer.convert_ids_to_tokens(tokenized.input_ids)
    first = pieces.index("▁Der")
    assert tokenized.content[:first] == [False] * first  # <s>, ▁que, ry, :
    assert tokenized.tokens_of(0, 3) == [first]
    assert [pieces[i] for i in tokenized.tokens_of(8, 15)] == ["▁sch", "lä", "ft"]


# ---------------------------------------------------------------------------------------------------
# CSLS, weak and strong alignment


def test_knn_mean_clamps_k():
    cos = torch.tensor([[0.1, 0.9, 0.5], [0.3, 0.2, 0.1]])
    torch.testing.assert_close(knn_mean(cos, 2), torch.tensor([0.7, 0.25]))
    torch.testing.assert_close(knn_mean(cos, 10), cos.mean(dim=1))


def test_weak_and_strong_alignment_by_hand():
    """k = 2 over two pairs, so every neighbourhood mean is a plain mean.

    cos(u0,v0)=.6  cos(u0,v1)=.48  cos(u1,v0)=.48  cos(u1,v1)=.768  cos(u0,u1)=.8  cos(v0,v1)=.768
    r_V(u0)=.54  r_V(u1)=.624  r_U(v0)=.54  r_U(v1)=.624; with themselves r_U(u.)=.9, r_V(v.)=.884
    weak:  s(u0,v0)=.12 > s(u0,v1)=-.204;  s(u1,v1)=.288 > s(u1,v0)=-.204; the same from V: 100 / 100
    strong U: s(u0,u1)=1.6-.54-.9=.16 beats .12 (miss); s(u1,u0)=1.6-.624-.9=.076 < .288 (hit): 50
    strong V: s(v0,v1)=1.536-.54-.884=.112 < .12 (hit); s(v1,v0)=1.536-.624-.884=.028 < .288: 100
    """
    u = torch.tensor([[1.0, 0.0, 0.0], [0.8, 0.6, 0.0]])
    v = torch.tensor([[0.6, 0.0, 0.8], [0.48, 0.64, 0.6]])
    weak, strong = word_alignment(u, v, k=2)
    assert (weak.forward, weak.backward) == (100.0, 100.0)
    assert (strong.forward, strong.backward) == (50.0, 100.0)
    assert weak_alignment(u, v, k=2) == weak
    _, scaled = word_alignment(3 * u, 0.5 * v, k=2)  # cosines: the norms do not matter
    assert (scaled.forward, scaled.backward) == (50.0, 100.0)


def brute_force(u: np.ndarray, v: np.ndarray, k: int, strong: bool) -> float:
    """Eq. 1 / Eq. 3 of Gaschi et al. with loops, in float64."""
    u = u / np.linalg.norm(u, axis=1, keepdims=True)
    v = v / np.linalg.norm(v, axis=1, keepdims=True)

    def r(x: np.ndarray, others: np.ndarray) -> float:
        return float(np.mean(sorted((float(x @ o) for o in others), reverse=True)[:k]))

    r_v_of_u = [r(x, v) for x in u]  # the query's neighbourhood, in the other language
    r_u_of_v = [r(x, u) for x in v]
    r_u_of_u = [r(x, u) for x in u]  # u_j's neighbourhood in U contains u_j
    hits = 0
    for i in range(len(u)):
        gold = 2 * float(u[i] @ v[i]) - r_v_of_u[i] - r_u_of_v[i]
        rivals = [
            2 * float(u[i] @ (u[j] if strong else v[j])) - r_v_of_u[i] - (r_u_of_u if strong else r_u_of_v)[j]
            for j in range(len(u))
            if j != i
        ]
        hits += gold > max(rivals)
    return 100.0 * hits / len(u)


@pytest.mark.integration  # brute force over every layer: seconds
@pytest.mark.parametrize("seed", range(4))
def test_weak_and_strong_alignment_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    u = rng.standard_normal((30, 8))
    v = u + rng.standard_normal((30, 8)) * (0.5 + seed / 2)
    u[5] = u[4] + 0.01 * rng.standard_normal(8)  # near-duplicate queries
    for k in (1, 3, 10):
        weak, strong = word_alignment(torch.tensor(u), torch.tensor(v), k)
        assert weak_alignment(torch.tensor(u), torch.tensor(v), k) == weak
        assert weak.forward == pytest.approx(brute_force(u, v, k, strong=False))
        assert weak.backward == pytest.approx(brute_force(v, u, k, strong=False))
        assert strong.forward == pytest.approx(brute_force(u, v, k, strong=True))
        assert strong.backward == pytest.approx(brute_force(v, u, k, strong=True))


def test_identical_vectors_are_ties_and_never_retrieved():
    same = torch.ones(5, 4)
    assert weak_alignment(same, same).forward == 0.0


# ---------------------------------------------------------------------------------------------------
# Sampling and the evaluation


def test_sample_distinct_keeps_one_occurrence_per_type():
    type_ids = np.array([0, 1, 0, 2, 1, 0, 3])
    for seed in range(5):
        chosen = sample_distinct(type_ids, 3, np.random.default_rng(seed))
        assert len(chosen) == 3 and len(set(type_ids[chosen])) == 3
    with pytest.raises(BitextmineError, match="only 4 distinct word pairs"):
        sample_distinct(type_ids, 5, np.random.default_rng(0))


def test_pool_lines_is_a_sorted_seeded_subset():
    assert pool_lines(5, 10, np.random.default_rng(0)) == [0, 1, 2, 3, 4]
    pool = pool_lines(100, 10, np.random.default_rng(0))
    assert len(set(pool)) == 10 and pool == sorted(pool)
    assert pool == pool_lines(100, 10, np.random.default_rng(0))


def test_evaluate_words_on_a_tiny_model(tiny_model_dir):
    english, german = TRAINING_TEXT[0::2], TRAINING_TEXT[1::2]
    d = dictionary("hund dog", "mann man", "kinder children")
    states = tiny_states(tiny_model_dir)
    settings = WordEvalSettings(pairs=2, sentence_pairs=3, samplings=3, k=2, pool=4)
    planned, done = [], []
    data = WordAlignmentData(("de", "en"), german, english, d)
    result = evaluate_words(data, states, settings, done.append, planned.append)
    assert (result.pool, result.extracted, result.distinct) == (4, 3, 3)
    assert planned == [result.encoded] == [sum(done)] == [8]
    assert set(result.scores) == {"weak", "strong", "cls", "mean"}
    assert all(s.shape == (3, 3, 2) for s in result.scores.values())
    assert (result.scores["cls"][:, 0] == 0).all(), "first token at layer 0: identical vectors"
    report = result.to_json()
    assert report["words"]["weak"]["layers"][2]["de->en"].keys() == {"mean", "std"}
    assert report["sentences"]["mean"]["last_layer"] == 2
    with pytest.raises(BitextmineError, match="only 3 distinct word pairs"):
        evaluate_words(data, states, WordEvalSettings(pairs=4, sentence_pairs=2))
    with pytest.raises(BitextmineError, match="only 4 non-empty parallel lines"):
        evaluate_words(data, states, WordEvalSettings(pairs=2, sentence_pairs=5))


# ---------------------------------------------------------------------------------------------------
# CLI


def words(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["eval", "words", *args])
    return result.exit_code, result.output


def test_cli_bad_inputs_are_one_line_errors(tmp_path):
    (tmp_path / "c.de").write_text("Hund\nKatze\n")
    (tmp_path / "c.en").write_text("dog\n")
    good = tmp_path / "good.txt"
    good.write_text("hund dog\n")
    bad = tmp_path / "bad.txt"
    bad.write_text("hund dog\nkatze\n")
    base = ["--pair", "de-en", "--model", str(tmp_path / "no-model")]
    code, output = words(*base, "--parallel", str(tmp_path / "c"), "--dict", str(good))
    assert code == 1 and "c.de: 2 lines but" in output and len(output.strip().splitlines()) == 1
    (tmp_path / "c.en").write_text("dog\ncat\n")
    code, output = words(*base, "--parallel", str(tmp_path / "c"), "--dict", str(bad))
    assert code == 1 and "bad.txt:2: expected 2 fields" in output
    code, output = words(*base, "--parallel", str(tmp_path / "c"), "--dict", str(tmp_path / "none.txt"))
    assert code == 1 and "none.txt: no such file" in output
    code, output = words(*base, "--parallel", str(tmp_path / "missing"), "--dict", str(good))
    assert code == 1 and "missing.de: no such file" in output


def test_cli_words_on_real_news_with_the_shared_model(tmp_path, e5_dir):
    source = require_shared("data/parallel/de-en")
    dictionary_path = require_shared("data/dictionaries/de-en.txt")
    for lang in ("de", "en"):
        lines = (source / f"news.{lang}").read_text(encoding="utf-8").splitlines()[:40]
        (tmp_path / f"news.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    report = tmp_path / "words.json"
    code, output = words(
        "--pair", "de-en", "--parallel", str(tmp_path / "news"), "--dict", str(dictionary_path),
        "--model", str(e5_dir), "--pairs", "40", "--sentence-pairs", "30", "--samplings", "2",
        "--json", str(report),
    )  # fmt: skip
    assert code == 0, output
    assert "weak de→en" in output and "mean best" in output
    data = json.loads(report.read_text())
    assert data["pool_lines"] == 40 and data["distinct_pairs"] >= 40
    assert len(data["words"]["strong"]["layers"]) == 13
    last = data["words"]["weak"]["layers"][12]
    assert last["de->en"]["mean"] > 50 and last["en->de"]["mean"] > 50
    assert data["sentences"]["cls"]["layers"][0]["de->en"]["mean"] == 0.0
    assert data["sentences"]["mean"]["layers"][12]["en->de"]["mean"] > 90
