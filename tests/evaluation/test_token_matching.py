"""MEXMA §5.5 token matching: streamed top-k, the four categories on hand-built vectors, query picking,
file checks, and `bitextmine eval tokens` end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from bitextmine.cli import app
from bitextmine.errors import BitextmineError
from bitextmine.evaluation.words.hidden_states import TokenizedSentence
from bitextmine.evaluation.words.token_matching import (
    CATEGORIES,
    RunningTopK,
    TokenMatchSettings,
    categorize,
    pick_queries,
    read_nway,
    summarize,
)
from tests.helpers import require_shared

runner = CliRunner()


def keys(*rows: tuple[int, int, int, int]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.int64).reshape(-1, 4)


def test_categories_follow_the_sentence_of_the_neighbour():
    query = keys((0, 7, 2, 100))  # English (language 0), line 7, position 2, token 100
    neighbours = keys((0, 7, 5, 11), (3, 7, 1, 12), (0, 2, 2, 100), (3, 2, 4, 13), (1, 7, 9, 100))[None]
    names = [CATEGORIES[i] for i in categorize(query, neighbours, query_lang=0)[0]]
    assert names == ["same_sentence", "translation", "same_language", "other", "translation"]


def test_running_top_k_over_chunks_equals_brute_force_and_skips_the_query():
    rng = np.random.default_rng(0)
    candidates = torch.tensor(rng.standard_normal((50, 6)), dtype=torch.float32)
    candidate_keys = keys(*[(i % 3, i // 3, i % 5, i) for i in range(50)])
    queries, query_keys = candidates[[4, 20]] * 2.0, candidate_keys[[4, 20]]  # they are candidates too
    top = RunningTopK(queries, query_keys, k=5)
    for start in range(0, 50, 7):
        top.add(candidates[start : start + 7], candidate_keys[start : start + 7])
    unit = torch.nn.functional.normalize(candidates, dim=-1)
    cos = unit[[4, 20]] @ unit.T
    cos[0, 4] = cos[1, 20] = -torch.inf
    expected = torch.topk(cos, 5, dim=1)
    torch.testing.assert_close(top.sims, expected.values)
    assert torch.equal(top.keys, candidate_keys[expected.indices])
    assert top.found.all()


def test_hand_built_vectors_give_one_neighbour_of_each_category():
    """Query: English line 0, token 1. Candidates by decreasing cosine: a translation of line 0
    (German), a token of the same English sentence, the same vocabulary entry in English line 1, and
    a German token of line 1; the query itself, also a candidate, must not count."""
    query = torch.tensor([[1.0, 0.0, 0.0]])
    query_key = keys((0, 0, 1, 42))
    vectors = torch.tensor(
        [
            [1.0, 0.0, 0.0],  # the query itself
            [0.6, 0.8, 0.0],  # same sentence
            [0.9, 0.1, 0.0],  # translation
            [0.5, 0.0, 0.9],  # same language, same token
            [0.2, 0.9, 0.1],  # other
            [-1.0, 0.0, 0.0],  # sixth: never among the 4 nearest
        ]
    )
    candidate_keys = keys(
        (0, 0, 1, 42), (0, 0, 3, 7), (1, 0, 2, 8), (0, 1, 4, 42), (1, 1, 1, 9), (1, 1, 2, 5)
    )
    top = RunningTopK(query, query_key, k=4)
    top.add(vectors[:3], candidate_keys[:3])
    top.add(vectors[3:], candidate_keys[3:])
    result = summarize(top, ["eng", "deu"], 2, TokenMatchSettings(neighbors=4), candidates=6)
    assert result.counts == {"other": 1, "same_language": 1, "same_sentence": 1, "translation": 1}
    assert [result.percent(c) for c in CATEGORIES] == [25.0] * 4
    assert result.same_language_same_token == 1
    assert result.to_json()["matches"] == 4


def test_missing_neighbours_are_not_counted():
    top = RunningTopK(torch.tensor([[1.0, 0.0]]), keys((0, 0, 0, 1)), k=3)
    top.add(torch.tensor([[0.0, 1.0]]), keys((1, 0, 0, 2)))
    assert top.found.tolist() == [[True, False, False]]
    result = summarize(top, ["eng", "deu"], 1, TokenMatchSettings(neighbors=3), candidates=1)
    assert result.counts["translation"] == 1 and result.matches == 1


def test_pick_queries_takes_content_tokens_only():
    def sentence(content: list[bool]) -> TokenizedSentence:
        return TokenizedSentence(list(range(len(content))), [(0, 1)] * len(content), content)

    tokenized = [sentence([False, True, True, True, True, False]), sentence([False, True, False])]
    queries = pick_queries(tokenized, 3, np.random.default_rng(0))
    assert [line for line, _ in queries] == [0, 0, 0, 1]
    assert all(tokenized[line].content[p] for line, p in queries)
    assert queries == pick_queries(tokenized, 3, np.random.default_rng(0))


def test_read_nway_puts_english_first_and_checks_the_files(tmp_path):
    (tmp_path / "eng.dev").write_text("a\nb\nc\n")
    (tmp_path / "deu.dev").write_text("A\nB\nC\n")
    (tmp_path / "fra.dev").write_text("x\ny\n")
    assert read_nway(tmp_path, ["deu"], "eng", "dev", 2) == {"eng": ["a", "b"], "deu": ["A", "B"]}
    with pytest.raises(BitextmineError, match=r"fra\.dev: 2 lines but .*eng\.dev has 3"):
        read_nway(tmp_path, ["deu", "fra"], "eng", "dev", None)
    with pytest.raises(BitextmineError, match="no FLORES data for xyz"):
        read_nway(tmp_path, ["xyz"], "eng", "dev", None)


def test_cli_tokens_on_a_flores_slice_with_the_shared_model(tmp_path, e5_dir):
    flores = require_shared("data/flores101/dev")
    for lang in ("eng", "deu", "zho_simpl"):
        lines = (flores / f"{lang}.dev").read_text(encoding="utf-8").splitlines()[:12]
        (tmp_path / f"{lang}.dev").write_text("\n".join(lines) + "\n", encoding="utf-8")
    report = tmp_path / "tokens.json"
    args = ["eval", "tokens", "--flores", str(tmp_path), "--model", str(e5_dir), "--query-sentences", "4"]
    result = runner.invoke(app, [*args, "--json", str(report)])
    assert result.exit_code == 0, result.output
    assert "% translation" in result.output
    data = json.loads(report.read_text())
    assert data["langs"] == ["eng", "deu", "zho_simpl"] and data["sentences_per_language"] == 12
    assert data["queries"] == 12 and data["matches"] == 60
    assert sum(data["percent"].values()) == pytest.approx(100.0)
    assert data["percent"]["same_sentence"] + data["percent"]["translation"] > 50

    code = runner.invoke(app, [*args, "--langs", "deu,xyz"])
    assert code.exit_code == 1 and "no FLORES data for xyz" in code.output
