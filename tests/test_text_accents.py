"""Unaccented Latin letters: what `train --strip-accents` trains on, leaving other scripts alone."""

from __future__ import annotations

import unicodedata

import pytest

from bitextmine.text.accents import strip_latin_accents


@pytest.mark.parametrize(
    ("text", "plain"),
    [
        ("Àwọn ọmọ ṣe àgbéyẹ̀wò", "Awon omo se agbeyewo"),  # Yoruba: tone marks and dots below
        ("Müller, façade, Čech", "Muller, facade, Cech"),
        ("Tiếng Việt", "Tieng Viet"),  # two marks on one letter
        ("Ørsted in Łódź, Đà Nẵng", "Ørsted in Łodz, Đa Nang"),  # letters without a decomposition stay
        ("plain ASCII", "plain ASCII"),
    ],
)
def test_latin_letters_lose_their_accents(text, plain):
    assert strip_latin_accents(text) == plain
    assert strip_latin_accents(unicodedata.normalize("NFD", text)) == plain  # decomposed input too


@pytest.mark.parametrize("text", ["தமிழ் மொழி", "ខ្មែរ", "हिन्दी", "Ελληνικά", "Русский й", "日本語"])
def test_other_scripts_keep_their_marks(text):
    assert strip_latin_accents(text) == text
