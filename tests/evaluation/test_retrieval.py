"""Tatoeba and xsim benchmarks: metrics against brute force, file reading errors, fake-encoder runs."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from bitextmine.errors import BitextmineError, BitextmineWarning
from bitextmine.evaluation.retrieval import (
    TatoebaResult,
    TatoebaRow,
    XsimResult,
    XsimRow,
    evaluate_tatoeba,
    evaluate_xsim,
    flores_languages,
    read_flores,
    read_tatoeba,
    retrieval_accuracy,
    tatoeba_languages,
    xsim_errors,
)
from bitextmine.mining.margin import MARGINS
from tests.helpers import require_shared

# ---------------------------------------------------------------------------------------------------
# Metrics against brute force


def unit_rows(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def noisy_pairs(seed: int, n: int = 40, dim: int = 12) -> tuple[np.ndarray, np.ndarray]:
    """Targets = noisy copies of the sources, with near-duplicate sources and targets planted."""
    rng = np.random.default_rng(seed)
    src = rng.standard_normal((n, dim))
    src[1::7] = src[0::7][: len(src[1::7])] + 0.05 * rng.standard_normal((len(src[1::7]), dim))
    tgt = src + 0.6 * rng.standard_normal((n, dim))
    tgt[3::9] = tgt[2::9][: len(tgt[3::9])] + 0.05 * rng.standard_normal((len(tgt[3::9]), dim))
    return unit_rows(src), unit_rows(tgt)


def brute_accuracy(src: np.ndarray, tgt: np.ndarray) -> float:
    sims = src.astype(np.float64) @ tgt.T.astype(np.float64)
    return 100.0 * sum(int(np.argmax(sims[i]) == i) for i in range(len(src))) / len(src)


def brute_xsim(src: np.ndarray, tgt: np.ndarray, margin: str, k: int) -> int:
    sims = src.astype(np.float64) @ tgt.T.astype(np.float64)
    n, k = len(src), min(k, len(tgt))
    fwd = [np.sort(sims[i])[::-1][:k].mean() for i in range(n)]
    bwd = [np.sort(sims[:, j])[::-1][:k].mean() for j in range(n)]
    errors = 0
    for i in range(n):
        best, best_score = -1, -np.inf
        for j in np.argsort(-sims[i])[:k]:
            denominator = (fwd[i] + bwd[j]) / 2
            if margin == "ratio":
                score = sims[i, j] / denominator
            elif margin == "distance":
                score = sims[i, j] - denominator
            elif margin == "csls":
                score = 2 * sims[i, j] - fwd[i] - bwd[j]
            else:
                score = sims[i, j]
            if score > best_score:
                best, best_score = j, score
        errors += int(best != i)
    return errors


@pytest.mark.parametrize("seed", range(4))
def test_retrieval_accuracy_matches_brute_force(seed: int) -> None:
    src, tgt = noisy_pairs(seed)
    accuracy = retrieval_accuracy(src, tgt)
    assert 0 < accuracy < 100
    assert accuracy == pytest.approx(brute_accuracy(src, tgt))
    assert retrieval_accuracy(tgt, src) == pytest.approx(brute_accuracy(tgt, src))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("margin", MARGINS)
@pytest.mark.parametrize("k", [1, 4, 100])
def test_xsim_errors_match_brute_force(seed: int, margin: str, k: int) -> None:
    src, tgt = noisy_pairs(seed)
    errors = xsim_errors(src, tgt, margin, k)
    assert 0 < errors < len(src)
    assert errors == brute_xsim(src, tgt, margin, k)


def hub_case() -> tuple[np.ndarray, np.ndarray]:
    """Sources e0..e3; target 0 is a hub with cosine 0.5 to every source; target i >= 1 has 0.4 to e_i.

    Plain cosine sends sources 1-3 to the hub: 3 errors. With k = 2: fwd(s0) = (0.5 + 0) / 2 = 0.25,
    fwd(s_i) = (0.5 + 0.4) / 2 = 0.45; bwd(hub) = 0.5, bwd(t_i) = (0.4 + 0) / 2 = 0.2. For s_i the ratio
    is 0.5 / 0.475 = 1.053 for the hub but 0.4 / 0.325 = 1.231 for t_i (distance: 0.025 < 0.075), and
    s0 keeps the hub (its other candidate has cosine 0): 0 errors.
    """
    eye = np.eye(7, dtype=np.float32)
    src = eye[:4]
    hub = 0.5 * eye[:4].sum(axis=0)
    gold = [0.4 * eye[i] + np.sqrt(0.84) * eye[3 + i] for i in (1, 2, 3)]
    return src, np.stack([hub, *gold]).astype(np.float32)


def test_margin_corrects_hub_errors() -> None:
    src, tgt = hub_case()
    assert retrieval_accuracy(src, tgt) == 25.0
    assert xsim_errors(src, tgt, "absolute", k=2) == 3
    assert xsim_errors(src, tgt, "ratio", k=2) == 0
    assert xsim_errors(src, tgt, "distance", k=2) == 0
    assert xsim_errors(src, tgt, "ratio", k=1) == 3  # a single candidate leaves nothing to re-rank


def test_metric_input_errors() -> None:
    src, tgt = hub_case()
    with pytest.raises(BitextmineError, match="unknown margin"):
        xsim_errors(src, tgt, "cosine")
    with pytest.raises(ValueError, match="k must be"):
        xsim_errors(src, tgt, k=0)
    with pytest.raises(ValueError, match="aligned"):
        retrieval_accuracy(src, tgt[:3])


# ---------------------------------------------------------------------------------------------------
# Reading files


def write(path: Path, data: bytes | str) -> Path:
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def one_line_error(call, *args, **kwargs) -> str:
    with pytest.raises(BitextmineError) as info:
        call(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_read_tatoeba_keeps_lines(tmp_path: Path) -> None:
    write(tmp_path / "tatoeba.deu-eng.deu", "Hallo  Welt \r\n\nÄpfel\n")
    write(tmp_path / "tatoeba.deu-eng.eng", "hello world\nempty\napples")
    xx, eng = read_tatoeba(tmp_path, "deu")
    assert (xx, eng) == (["Hallo  Welt ", "", "Äpfel"], ["hello world", "empty", "apples"])
    assert tatoeba_languages(tmp_path) == ["deu"]


def test_read_tatoeba_errors(tmp_path: Path) -> None:
    deu, eng = tmp_path / "tatoeba.deu-eng.deu", tmp_path / "tatoeba.deu-eng.eng"
    assert one_line_error(read_tatoeba, tmp_path, "deu") == f"{deu}: no such file"
    write(deu, "a\nb\n")
    assert one_line_error(read_tatoeba, tmp_path, "deu") == f"{eng}: no such file"
    write(eng, "a\n")
    assert one_line_error(read_tatoeba, tmp_path, "deu") == f"{deu}: 2 lines but {eng} has 1"
    write(eng, "")
    assert one_line_error(read_tatoeba, tmp_path, "deu") == f"{eng}: empty file"
    write(deu, b"ok\nfine\nbad \x00 byte\n")
    assert (
        one_line_error(read_tatoeba, tmp_path, "deu") == f"{deu}:3: binary data (NUL byte); not a text file"
    )


def test_read_flores_errors(tmp_path: Path) -> None:
    path = tmp_path / "deu.dev"
    assert one_line_error(read_flores, tmp_path, "deu") == f"{path}: no such file"
    write(path, b"\xc3\n")
    with pytest.warns(BitextmineWarning, match=f"{path}:1: invalid UTF-8 replaced by U\\+FFFD"):
        assert read_flores(tmp_path, "deu") == ["\ufffd"]
    write(tmp_path / "deu.devtest", "a\nb\n")
    assert read_flores(tmp_path, "deu", "devtest") == ["a", "b"]


def test_language_listings(tmp_path: Path) -> None:
    for name in ["tatoeba.fra-eng.fra", "tatoeba.fra-eng.eng", "tatoeba.deu-eng.deu", "tatoeba.x-eng.y"]:
        write(tmp_path / name, "a\n")
    for name in ["eng.dev", "zho_simpl.dev", "eng.devtest", "README.md"]:
        write(tmp_path / name, "a\n")
    assert tatoeba_languages(tmp_path) == ["deu", "fra"]
    assert flores_languages(tmp_path) == ["eng", "zho_simpl"]
    assert flores_languages(tmp_path, "devtest") == ["eng"]
    missing = tmp_path / "missing"
    assert one_line_error(tatoeba_languages, missing) == f"{missing}: no such directory"


# ---------------------------------------------------------------------------------------------------
# Whole benchmarks with a fake encoder


class BagOfWords:
    """Deterministic hashed bag-of-words unit vectors; counts its calls."""

    def __init__(self, dim: int = 1024) -> None:
        self.dim, self.calls = dim, 0

    def __call__(self, sentences: Sequence[str]) -> np.ndarray:
        self.calls += 1
        out = np.zeros((len(sentences), self.dim), dtype=np.float32)
        for i, sentence in enumerate(sentences):
            for word in sentence.split():
                out[i, int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "little") % self.dim] += 1
        return unit_rows(out)


ENG = "alpha beta\ngamma delta\nepsilon zeta\neta theta\n"
# line 4 repeats English line 1 with one extra word: its nearest English sentence is line 1
CONFUSED = "alpha beta\ngamma delta\nepsilon zeta\nalpha beta theta\n"


def test_evaluate_tatoeba(tmp_path: Path) -> None:
    for lang, text in [("deu", CONFUSED), ("fra", ENG)]:
        write(tmp_path / f"tatoeba.{lang}-eng.{lang}", text)
        write(tmp_path / f"tatoeba.{lang}-eng.eng", ENG)
    encode, messages = BagOfWords(), []
    result = evaluate_tatoeba(tmp_path, ["deu", "fra"], encode, messages.append)
    assert result.rows == [TatoebaRow("deu", 4, 75.0, 100.0), TatoebaRow("fra", 4, 100.0, 100.0)]
    assert (result.average_xx_to_eng, result.average_eng_to_xx, result.average) == (87.5, 100.0, 93.75)
    assert encode.calls == 4 and len(messages) == 2
    assert result.to_json()["average"] == 93.75
    assert result.to_json()["rows"][0] == {"lang": "deu", "pairs": 4, "xx_to_eng": 75.0, "eng_to_xx": 100.0}


def test_evaluate_tatoeba_unknown_language(tmp_path: Path) -> None:
    write(tmp_path / "tatoeba.fra-eng.fra", ENG)
    message = one_line_error(evaluate_tatoeba, tmp_path, ["fra", "xxx"], BagOfWords())
    assert message == f"{tmp_path}: no Tatoeba data for xxx; available (1): fra"


@pytest.mark.parametrize("margin", MARGINS)
def test_evaluate_xsim(tmp_path: Path, margin: str) -> None:
    for lang, text in [("eng", ENG), ("deu", CONFUSED), ("fra", ENG)]:
        write(tmp_path / f"{lang}.dev", text)
    encode = BagOfWords()
    result = evaluate_xsim(tmp_path, ["deu", "fra"], encode, margin=margin)
    assert result.rows == [XsimRow("deu", 4, 1, 25.0), XsimRow("fra", 4, 0, 0.0)]
    assert (result.target, result.margin, result.k, result.average) == ("eng", margin, 4, 12.5)
    assert encode.calls == 3  # the target once, each language once
    assert result.to_json()["rows"][0] == {"lang": "deu", "sentences": 4, "errors": 1, "error_rate": 25.0}


def test_evaluate_xsim_errors(tmp_path: Path) -> None:
    write(tmp_path / "eng.dev", ENG)
    write(tmp_path / "deu.dev", "one\ntwo\n")
    message = one_line_error(evaluate_xsim, tmp_path, ["deu"], BagOfWords())
    assert message == f"{tmp_path / 'deu.dev'}: 2 lines but {tmp_path / 'eng.dev'} has 4"
    message = one_line_error(evaluate_xsim, tmp_path, ["deu"], BagOfWords(), target="spa")
    assert message == f"{tmp_path}: no FLORES data for spa; available (2): deu, eng"
    assert one_line_error(evaluate_xsim, tmp_path, [], BagOfWords()) == "FLORES: no languages given"


def test_result_averages() -> None:
    tatoeba = TatoebaResult([TatoebaRow("a", 10, 90.0, 80.0), TatoebaRow("b", 5, 70.0, 40.0)])
    assert (tatoeba.average_xx_to_eng, tatoeba.average_eng_to_xx, tatoeba.average) == (80.0, 60.0, 70.0)
    xsim = XsimResult([XsimRow("a", 10, 1, 10.0), XsimRow("b", 4, 2, 50.0)], "eng", "ratio")
    assert xsim.average == 30.0 and xsim.to_json()["average"] == 30.0


# ---------------------------------------------------------------------------------------------------
# The shared data


def test_shared_tatoeba() -> None:
    directory = require_shared("data/tatoeba")
    langs = tatoeba_languages(directory)
    assert len(langs) == 112 and "deu" in langs and "eng" not in langs
    xx, eng = read_tatoeba(directory, "deu")
    assert len(xx) == len(eng) == 1000


def test_shared_flores() -> None:
    directory = require_shared("data/flores101/dev")
    langs = flores_languages(directory)
    assert len(langs) == 102 and "eng" in langs and "zho_simpl" in langs
    assert len(read_flores(directory, "eng")) == 985
