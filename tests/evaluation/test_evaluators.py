"""The evaluator contract (bitextmine/evaluation/evaluator.py): a benchmark is one class, which train's
evaluation runs beside the built-in ones with no list of names to edit; the built-in evaluators' metrics
are train's eval rows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bitextmine.calibration.bucc import read_bucc
from bitextmine.encoder.encoder import SentenceEncoder, load_encoder
from bitextmine.errors import BitextmineError
from bitextmine.evaluation.bucc import BuccEvaluator, EvaluateOptions
from bitextmine.evaluation.evaluator import Evaluator, run_evaluators
from bitextmine.evaluation.retrieval import TatoebaEvaluator, TatoebaResult, TatoebaRow, XsimEvaluator
from bitextmine.evaluation.words.token_matching import TokenMatchingEvaluator, TokenMatchSettings
from bitextmine.evaluation.words.word_eval import WordAlignmentData, WordAlignmentEvaluator, WordEvalSettings
from bitextmine.train.evaluation import EvalSets, evaluate_model
from tests.helpers import TRAINING_TEXT, sentences, write_bucc


@dataclass
class Spread:
    sentences: int
    spread: float  # percent: 100 × (1 - the mean cosine of each sentence to the first)

    def metrics(self) -> dict[str, float]:
        return {"spread/all": round(self.spread, 2)}

    def to_json(self) -> dict[str, Any]:
        return {"benchmark": "spread", "sentences": self.sentences, "spread": self.spread}


@dataclass
class SpreadEvaluator(Evaluator):
    """A toy benchmark: how far apart the encoder puts a few sentences."""

    texts: list[str]

    primary_metric = "spread/all"

    def __call__(self, encoder: SentenceEncoder) -> Spread:
        vectors = encoder.encode(self.texts).vectors
        return Spread(len(self.texts), 100 * float(1 - (vectors @ vectors[0]).mean()))


@pytest.fixture(scope="module")
def encoder(tiny_model_dir) -> SentenceEncoder:
    return load_encoder(tiny_model_dir("bert"))


@pytest.fixture
def bucc(tmp_path: Path) -> Path:
    directory = tmp_path / "de-en"
    directory.mkdir()
    write_bucc(directory, sentences(10, seed=0))
    return directory


def test_a_new_evaluator_runs_in_train_evaluation(encoder: SentenceEncoder, bucc: Path) -> None:
    toy = SpreadEvaluator(sentences(5, seed=2))
    loaded = encoder.loaded
    sets = EvalSets(bucc=[bucc], extra=[toy])
    rows = evaluate_model(loaded.model, loaded.tokenizer, encoder.settings, loaded.model_dir, sets)
    assert list(rows) == ["bucc/de-en", "spread/all"]
    assert rows["spread/all"] == toy(encoder).metrics()["spread/all"] > 0
    assert not EvalSets(extra=[toy]).empty


def test_primary_metrics_are_among_the_metrics(encoder: SentenceEncoder, bucc: Path, tmp_path: Path) -> None:
    split = read_bucc(bucc, "de-en", "dev")
    tatoeba, flores = tmp_path / "tatoeba", tmp_path / "flores"
    tatoeba.mkdir(), flores.mkdir()
    same = "".join(s + "\n" for s in sentences(6, seed=3))
    for lang in ("deu", "eng"):
        (tatoeba / f"tatoeba.deu-eng.{lang}").write_text(same)
        (flores / f"{lang}.dev").write_text(same)
    evaluators = [
        BuccEvaluator(split, EvaluateOptions(threshold="oracle")),
        TatoebaEvaluator(tatoeba, ["deu"]),
        XsimEvaluator(flores, ["deu"]),
        SpreadEvaluator(sentences(3, seed=4)),
    ]
    row = run_evaluators(evaluators, encoder)
    primary = [e.primary_metric for e in evaluators]
    assert primary == ["bucc/de-en", "tatoeba/avg", "xsim/avg", "spread/all"]
    assert list(row) == ["bucc/de-en", "tatoeba/deu", "tatoeba/avg", "xsim/deu", "xsim/avg", "spread/all"]
    assert (row["tatoeba/avg"], row["xsim/avg"]) == (100.0, 0.0)
    assert [e.greater_is_better for e in evaluators] == [True, True, False, True]


def test_a_calibrated_threshold_needs_a_store(encoder: SentenceEncoder, bucc: Path) -> None:
    evaluator = BuccEvaluator(read_bucc(bucc, "de-en", "dev"))
    with pytest.raises(BitextmineError, match=r"give options\.thresholds or a workspace"):
        evaluator(encoder)


def test_tatoeba_rows_average_the_logged_figures() -> None:
    """train's tatoeba/avg has always been the mean of the rounded per-language figures."""
    result = TatoebaResult([TatoebaRow("deu", 3, 100 / 3, 100 / 3), TatoebaRow("fra", 3, 200 / 3, 200 / 3)])
    assert result.metrics() == {"tatoeba/deu": 33.33, "tatoeba/fra": 66.67, "tatoeba/avg": 50.0}


def test_the_layer_analyses_are_evaluators(encoder: SentenceEncoder, tmp_path: Path) -> None:
    """`eval words` and `eval tokens` run beside the others, on the encoder's model; the primary figure
    of each is the one its report (`--json`) gives."""
    english, german = TRAINING_TEXT[0::2], TRAINING_TEXT[1::2]
    (tmp_path / "news.de").write_text("".join(line + "\n" for line in german), encoding="utf-8")
    (tmp_path / "news.en").write_text("".join(line + "\n" for line in english), encoding="utf-8")
    (tmp_path / "de-en.txt").write_text("hund dog\nmann man\nkinder children\n")
    data = WordAlignmentData.read(("de", "en"), [tmp_path / "news"], tmp_path / "de-en.txt")
    settings = WordEvalSettings(pairs=2, sentence_pairs=3, samplings=3, k=2, pool=4)
    words = WordAlignmentEvaluator(data, settings)
    tokens = TokenMatchingEvaluator({"eng": english, "deu": german}, TokenMatchSettings(query_sentences=2))
    row = run_evaluators([words, tokens], encoder)
    assert [words.primary_metric, tokens.primary_metric] == ["words/de-en/strong", "tokens/translation"]
    at_best_layers = ["words/de-en/weak", "words/de-en/strong", "words/de-en/cls", "words/de-en/mean"]
    assert list(row) == [
        *at_best_layers,
        "tokens/other",
        "tokens/same_language",
        "tokens/same_sentence",
        "tokens/translation",
    ]
    assert [words.greater_is_better, tokens.greater_is_better] == [True, True]

    report = words(encoder).to_json()
    assert report["model"] == encoder.loaded.name and report["parallel"] == [str(tmp_path / "news")]
    strong = report["words"]["strong"]
    best = strong["layers"][strong["best_layer"]]
    assert row["words/de-en/strong"] == round((best["de->en"]["mean"] + best["en->de"]["mean"]) / 2, 2)
    report = tokens(encoder).to_json()
    assert row["tokens/translation"] == round(report["percent"]["translation"], 2)
