"""Language identification of lines (text/lid.py): codes, labels, confidences, the floor, scripts, rules."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from bitextmine.errors import BitextmineError
from bitextmine.text import lid
from bitextmine.text.lid import (
    DEFAULT_MIN_CONFIDENCE,
    RULE_CONFIDENCE,
    LidFilter,
    accepts,
    identify,
    in_script,
    is_language,
    is_other_language,
    lid_code,
)

GERMAN = "Die Regierung hat am Dienstag neue Regeln für den Wohnungsbau beschlossen."
ENGLISH = "The government approved new rules for housing construction on Tuesday."
DUTCH = "De regering heeft dinsdag nieuwe regels voor de woningbouw goedgekeurd."
CHINESE = "政府周二批准了新的住房建设规定。"
SHORT_GERMAN = "Ich habe Hunger."


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("de", "de"),
        ("deu", "de"),
        ("ger", "de"),
        ("DE", "de"),
        ("deu_Latn", "de"),
        ("cmn", "zh"),
        ("zho_simpl", "zh"),
        ("zho_trad", "zh"),
        ("zh", "zh"),
        ("pt-BR", "pt"),
        ("nob", "no"),
        ("yue", "yue"),
        ("en", "en"),
    ],
)
def test_lid_code_maps_the_codes_users_write(code: str, expected: str) -> None:
    assert lid_code(code) == expected


@pytest.mark.parametrize("code", ["xx", "tlh", "ber", "cbk"])
def test_lid_code_names_a_language_the_identifier_does_not_know(code: str) -> None:
    with pytest.raises(BitextmineError, match=f"'{code}'") as raised:
        lid_code(code)
    assert "\n" not in str(raised.value)


def test_identify_labels_lines_with_float32_confidences_in_0_1() -> None:
    labels, confidence = identify([GERMAN, ENGLISH, DUTCH, CHINESE, SHORT_GERMAN])
    assert labels == ["de", "en", "nl", "zh", "de"]
    assert confidence.dtype == np.float32 and confidence.shape == (5,)
    assert np.all((confidence > 0.5) & (confidence <= 1))


def test_empty_and_numbers_only_lines_are_no_language() -> None:
    labels, confidence = identify(["", "   ", "12345 67.89"])
    assert labels[:2] == [lid.UNDETERMINED] * 2 and confidence[:2].tolist() == [0, 0]
    assert confidence[2] < 0.1  # no letters: nothing to go on
    for lang in ("de", "en", labels[2]):
        assert not is_language(["", "   ", "12345 67.89"], lang).any()


def test_is_language_keeps_only_the_wanted_language() -> None:
    texts = [GERMAN, ENGLISH, DUTCH, CHINESE, SHORT_GERMAN, ""]
    assert is_language(texts, "de").tolist() == [True, False, False, False, True, False]
    assert is_language(texts, "deu").tolist() == is_language(texts, "de").tolist()
    assert is_language(texts, "nld").tolist() == [False, False, True, False, False, False]
    assert is_language(texts, "zho_simpl").tolist() == [False, False, False, True, False, False]
    assert is_language([], "de").shape == (0,)


def test_the_floor_is_inclusive_and_rejects_below() -> None:
    _, confidence = identify([ENGLISH, "I am hungry."])
    for text, conf in zip([ENGLISH, "I am hungry."], confidence.tolist(), strict=True):
        assert is_language([text], "en", conf).tolist() == [True]
        assert is_language([text], "en", conf + 1e-3).tolist() == [False]
    assert is_language([ENGLISH], "en", 0.0).tolist() == [True]


def test_the_default_floor_keeps_short_lines() -> None:
    short = ["Ich habe Hunger.", "Wo ist der Bahnhof?", "Das ist mein Haus.", "Er liest ein Buch."]
    assert 0 < DEFAULT_MIN_CONFIDENCE < 0.5
    assert is_language(short, "de").all()


def test_chinese_varieties_count_as_chinese_but_not_the_other_way() -> None:
    labels, confidence = ["zh", "wuu", "yue", "ja"], np.full(4, 0.9, dtype=np.float32)
    assert accepts(labels, confidence, "zh", 0.5).tolist() == [True, True, True, False]
    assert accepts(labels, confidence, "yue", 0.5).tolist() == [False, False, True, False]
    assert accepts(labels, confidence, "cmn", 0.95).tolist() == [False] * 4


def test_the_model_is_loaded_once() -> None:
    assert lid._identifier() is lid._identifier()


@pytest.mark.integration
def test_importing_the_module_does_not_load_the_library() -> None:
    code = "import sys, bitextmine.text.lid; assert 'py3langid' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_is_other_language_wants_confidence_and_english_headlines_are_english():
    headline = "Posted by TODAY on Monday, September 14, 2015"  # py3langid: pcm (Nigerian Pidgin)
    assert is_language([headline], "en").tolist() == [True]
    lines = [
        headline,
        "De hond slaapt vandaag in de tuin achter het huis.",
        "Rumour Mill: No Celtic disharmony",
    ]
    assert is_other_language(lines, "en").tolist() == [False, True, False]
    assert is_other_language(["Der Hund schläft heute im Garten hinter dem Haus."], "de").tolist() == [False]


def test_in_script_wants_a_letter_of_the_languages_script() -> None:
    texts = [CHINESE, "Add to cart", "2019-03-04 10:00", "Привет, мир", "日本語のテキスト", ""]
    assert in_script(texts, "zh").tolist() == [True, False, False, False, True, False]
    assert in_script(texts, "ru").tolist() == [False, False, False, True, False, False]
    assert in_script(texts, "en").tolist() == [False, True, False, False, False, False]
    assert in_script(["Ово је реченица.", "Ovo je rečenica."], "sr").tolist() == [True, True]  # both scripts
    assert in_script(["12345", ""], "zxx").tolist() == [True, True]  # no script listed: no test


def test_every_language_of_the_script_table_is_a_label_of_the_identifier() -> None:
    codes = {code for codes in lid._BY_SCRIPT.values() for code in codes.split()}
    assert codes <= set(lid._identifier().labels)
    assert {"de", "en", "fr", "ru", "zh", "ja", "ko", "ar", "hi"} <= codes


def test_the_reject_rule_drops_only_another_language_another_script_or_no_word() -> None:
    reject = LidFilter("de", RULE_CONFIDENCE["reject"], lid.model_id(), "reject")
    accept = LidFilter("de", RULE_CONFIDENCE["accept"], lid.model_id(), "accept")
    unsure = "Dinamo Zagreb"  # a name: no language for sure, but words
    junk = ["+49 30 1234567", "www.example.com", "BD-9775-46", "info@example.com"]
    texts = [GERMAN, SHORT_GERMAN, ENGLISH, DUTCH, CHINESE, *junk, unsure]
    assert reject.keeps(texts).tolist() == [True, True, False, False, False, False, False, False, False, True]
    assert accept.keeps(texts).tolist() == [True, True] + [False] * 8
    _, confidence = identify([unsure])
    assert confidence[0] < RULE_CONFIDENCE["reject"]


def test_a_close_language_below_the_reject_floor_is_kept() -> None:
    russian = "Вот отчет о матче и реакция на игру."  # a bucc-like ru-en gold line; py3langid: bg, 0.67
    labels, confidence = identify([russian])
    assert labels == ["bg"] and 0.5 <= confidence[0] < RULE_CONFIDENCE["reject"]
    assert LidFilter("ru", RULE_CONFIDENCE["reject"], lid.model_id(), "reject").keeps([russian]).tolist() == [
        True
    ]
    assert LidFilter("ru", 0.5, lid.model_id(), "reject").keeps([russian]).tolist() == [False]
