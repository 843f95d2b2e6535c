"""`calibrate` and `eval bucc` take the vectors that `encode` stored in the workspace for a split's sentences
(same model, settings, precision and forward) instead of encoding them again, and learn exactly the
threshold they learn without the workspace."""

from __future__ import annotations

import json
import shutil

import pytest

from bitextmine.encoder.encoder import SentenceEncoder
from bitextmine.workspace.layout import Workspace
from bitextmine.workspace.locks import workspace_locks
from tests.helpers import eval_bucc_dev, run, sentences, write_bucc

pytestmark = pytest.mark.integration

UNCLEAN = "Haus  und\u00a0Hof n1"  # `encode` stores it cleaned, "Haus und Hof n1": another text


@pytest.fixture
def bucc(tmp_path):
    directory = tmp_path / "bucc"
    directory.mkdir()
    write_bucc(directory, sentences(8, seed=4))
    de = directory / "de-en.dev.de"
    de.write_text(de.read_text() + f"de-x\t{UNCLEAN}\n")
    return directory


def side(bucc, lang: str) -> list[str]:
    return [line.split("\t", 1)[1] for line in (bucc / f"de-en.dev.{lang}").read_text().splitlines()]


@pytest.fixture
def encode_calls(monkeypatch) -> list[list[str]]:
    """The sentences each SentenceEncoder.encode call is given."""
    calls: list[list[str]] = []
    real = SentenceEncoder.encode

    def spy(self, texts, *args, **kwargs):
        calls.append(list(texts))
        return real(self, texts, *args, **kwargs)

    monkeypatch.setattr(SentenceEncoder, "encode", spy)
    return calls


def encode_workspace(tmp_path, work, model, corpora: dict[str, list[str]], *options: str) -> None:
    for lang, lines in corpora.items():
        path = tmp_path / f"{lang}.txt"
        path.write_text("\n".join(lines) + "\n")
        args = ["-m", str(model), "-w", str(work), "--shard-size", "7", *options]
        code, output = run("encode", "--lid", "off", str(path), "-l", lang, *args)
        assert code == 0, output


def calibrate_json(bucc, model, work, report, *options: str) -> dict:
    args = ["-m", str(model), "-w", str(work), "--json", str(report), *options]
    code, output = run("calibrate", "--bucc", str(bucc), "--pair", "de-en", *args)
    assert code == 0, output
    return json.loads(report.read_text())


def split_sentences_encoded(calls: list[list[str]], bucc) -> list[str]:
    split = side(bucc, "de") + side(bucc, "en")
    return sorted(text for call in calls for text in call if text in split)


def test_calibrate_encodes_only_what_the_workspace_does_not_hold_and_learns_the_same_threshold(
    tmp_path, bucc, tiny_model_dir, encode_calls
):
    model, work = tiny_model_dir("bert"), tmp_path / "w"
    de, en = side(bucc, "de"), side(bucc, "en")
    left_out = de[20:23]  # three de sentences the workspace lacks; the unclean one it holds cleaned
    corpora = {
        "de": sentences(9, seed=7) + [s for s in de if s not in left_out],
        "en": en[::-1] + sentences(5, seed=8),  # another order, other shards: found by text
    }
    encode_workspace(tmp_path, work, model, corpora)
    encode_calls.clear()

    reused = calibrate_json(bucc, model, work, tmp_path / "reused.json")
    encoded = split_sentences_encoded(encode_calls, bucc)
    assert encoded == sorted([*left_out, UNCLEAN])  # nothing the workspace holds is encoded again
    total = len(de) + len(en)
    assert reused["vectors"] == {"encoded": 4, "reused": total - 4, "cached": 0}

    fresh = calibrate_json(bucc, model, tmp_path / "fresh", tmp_path / "fresh.json")
    assert fresh["vectors"] == {"encoded": total, "reused": 0, "cached": 0}
    assert reused["chosen"] == fresh["chosen"] and reused["curve"] == fresh["curve"]

    shutil.rmtree(work / "cache")
    report = tmp_path / "eval.json"
    code, output = eval_bucc_dev(bucc, "-m", str(model), "-w", str(work), "--json", str(report))
    assert code == 0, output
    evaluation = json.loads(report.read_text())
    assert evaluation["vectors"] == reused["vectors"] and evaluation["f1"] == fresh["chosen"]["f1"]
    assert f"sentence vectors: 4 encoded, {total - 4:,} reused from the workspace's corpora" in output

    encode_calls.clear()
    again = calibrate_json(bucc, model, work, tmp_path / "again.json")
    assert again["vectors"] == {"encoded": 0, "reused": 0, "cached": total} and not encode_calls


@pytest.mark.parametrize(
    "encode_options, calibrate_options",
    [
        (["--prefix", "query: "], []),  # another fingerprint
        (["--precision", "bf16"], ["--precision", "fp32"]),
        (["--padded"], []),  # another forward
    ],
)
def test_vectors_of_another_encoder_setting_are_not_reused(
    tmp_path, bucc, tiny_model_dir, encode_calls, encode_options, calibrate_options
):
    model, work = tiny_model_dir("bert"), tmp_path / "w"
    encode_workspace(tmp_path, work, model, {"de": side(bucc, "de")}, *encode_options)
    encode_calls.clear()
    report = calibrate_json(bucc, model, work, tmp_path / "r.json", *calibrate_options)
    assert report["vectors"]["reused"] == 0
    assert len(split_sentences_encoded(encode_calls, bucc)) == report["vectors"]["encoded"]


def test_a_language_being_encoded_is_not_read(tmp_path, bucc, tiny_model_dir, encode_calls):
    model, work = tiny_model_dir("bert"), tmp_path / "w"
    encode_workspace(tmp_path, work, model, {"de": side(bucc, "de"), "en": side(bucc, "en")})
    with workspace_locks(Workspace(work), write=["lang-de"]):  # an `encode de` running
        report = calibrate_json(bucc, model, work, tmp_path / "r.json")
    assert report["vectors"] == {
        "encoded": len(side(bucc, "de")),
        "reused": len(side(bucc, "en")),
        "cached": 0,
    }
