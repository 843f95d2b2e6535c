"""Pair filters on hand-made lines: what each drops, the preset, the counts, dedup across chunks."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bitextmine.cli.filter_options import mine_filter_settings
from bitextmine.errors import BitextmineError, BitextmineWarning
from bitextmine.mining.builtin_filters import is_copy, length_ratio_ok, visible_length
from bitextmine.mining.filter_base import FilterRule, Setting, settings_type
from bitextmine.mining.filters import (
    FILTERS,
    NO_FILTERS,
    WEB,
    FilterSettings,
    PairFilter,
    default_filters,
    parse_filters,
    with_items,
)
from bitextmine.text.lid import has_words


def run(settings: FilterSettings, pairs, scores=None, langs=("de", "en")):
    pair_filter = PairFilter(settings, *langs)
    scores = np.array(scores if scores is not None else [1.2] * len(pairs))
    keep = pair_filter.keep(scores, [p[0] for p in pairs], [p[1] for p in pairs])
    return keep.tolist(), pair_filter.counts()


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("Der Hund schläft.", True),
        ("ICE 915", True),
        ("COVID-19 cases rose", True),
        ("北京2008年奥运会", True),
        ("好。", True),  # one ideograph can be a word
        ("2019年", False),
        ("+53 601 8443606", False),
        ("04.07.2002", False),
        ("13:11 - 17:55", False),
        ("BF-7157-40", False),
        ("http://www.kegn.com/7286/index.html", False),
        ("dfhpjnv74@mail7.net", False),
        ("", False),
    ],
)
def test_has_words(text, words):
    assert has_words(text) is words


def test_letters_drops_pairs_with_a_side_without_words():
    pairs = [("Der Hund schläft.", "The dog sleeps."), ("04.07.2002", "04.07.2002"), ("Preis: 12 €", "12")]
    keep, counts = run(FilterSettings(letters=True), pairs)
    assert keep == [True, False, False] and counts == {"letters": 2}


def test_copies_are_equal_or_nearly_equal_after_normalisation():
    assert is_copy("Privacy policy", "Privacy Policy.", 1.0)
    assert is_copy("Add to cart", "add to cart!", 0.9)
    assert is_copy("The threat is enormous", "The threat is enormous!!", 1.0)
    assert is_copy(
        "The government announced new measures today", "The government announced new measure today", 0.9
    )
    assert not is_copy(
        "The government announced new measures today", "The government announced new measure today", 1.0
    )
    assert not is_copy("Der Hund schläft im Garten.", "The dog sleeps in the garden.", 0.9)
    keep, counts = run(FilterSettings(copies=0.9), [("Add to cart", "Add to cart"), ("Hund", "dog")])
    assert keep == [False, True] and counts == {"copies": 1}


def test_length_ratio_weights_wide_characters():
    assert visible_length("abc") == 3 and visible_length("北京") == 6
    assert length_ratio_ok(["北京是中国的首都。"], ["Beijing is the capital of China."], 2.5).tolist() == [
        True
    ]
    assert length_ratio_ok(["Ja."], ["Yes, and I would like to add something long here."], 2.5).tolist() == [
        False
    ]


def test_length_bounds_apply_to_both_sides():
    pairs = [("ab", "a long enough line"), ("long enough", "also long enough"), ("x" * 50, "long enough")]
    keep, counts = run(FilterSettings(min_chars=3, max_chars=40), pairs)
    assert keep == [False, True, False] and counts == {"length": 2}


def test_score_max_drops_implausibly_high_scores():
    keep, counts = run(FilterSettings(score_max=1.5), [("a b", "c d")] * 3, scores=[1.9, 1.5, 1.1])
    assert keep == [False, True, True] and counts == {"score-max": 1}


def test_dedup_keeps_the_best_scoring_pair_across_chunks():
    pair_filter = PairFilter(FilterSettings(dedup=True), "de", "en")
    first = pair_filter.keep(
        np.array([1.3, 1.2, 1.1]),
        ["Hallo Welt", "hallo welt!", "Tschüss"],
        ["Hello world", "Hello, world", "Bye"],
    )
    second = pair_filter.keep(np.array([1.05, 1.0]), ["HALLO WELT", "Tschüss"], ["hello world.", "Bye now"])
    assert first.tolist() == [True, False, True] and second.tolist() == [False, True]
    assert pair_filter.counts() == {"dedup": 2}


def test_a_pair_is_counted_by_the_first_filter_that_drops_it():
    pairs = [("04.07.2002", "04.07.2002"), ("Add to cart", "Add to cart"), ("Der Hund.", "The dog.")]
    keep, counts = run(FilterSettings(letters=True, copies=0.9, dedup=True), pairs)
    assert keep == [False, False, True]
    assert counts == {"letters": 1, "copies": 1, "dedup": 0}


def test_language_filter_drops_sides_not_in_their_language():
    pairs = [
        (
            "Der Hund schläft heute im Garten hinter dem Haus.",
            "The dog is sleeping in the garden behind the house today.",
        ),
        (
            "The dog is sleeping in the garden behind the house today.",
            "The dog is sleeping in the garden behind the house today.",
        ),
        (
            "De hond slaapt vandaag in de tuin achter het huis.",
            "The dog is sleeping in the garden behind the house today.",
        ),
    ]
    keep, counts = run(FilterSettings(language=0.5), pairs)
    assert keep == [True, False, False] and counts == {"language": 2}


def test_no_filters_keep_everything_and_count_nothing():
    keep, counts = run(NO_FILTERS, [("", ""), ("1", "1")])
    assert keep == [True, True] and counts == {}


def test_parse_filters_preset_and_items():
    web = parse_filters("web")
    assert web.enabled() == ["length-ratio", "letters", "copies", "language", "dedup"]
    tuned = parse_filters("web", ["score-max=1.4", "copies=0.8", "dedup=off", "min-chars=3"])
    assert tuned.score_max == 1.4 and tuned.copies == 0.8 and not tuned.dedup and tuned.min_chars == 3
    assert parse_filters(None, ["letters"]).enabled() == ["letters"]
    assert parse_filters("none") == NO_FILTERS


@pytest.mark.parametrize(
    ("preset", "items", "message"),
    [
        ("webb", [], "unknown filter preset 'webb'; choose one of none, web"),
        ("none", ["lang"], "unknown filter 'lang' in --filter 'lang'; filters: score-max"),
        ("none", ["score-max"], "--filter score-max needs a value"),
        ("none", ["copies=high"], "'high' is not a valid value for copies"),
        ("none", ["copies=1.5"], "copies must be in (0, 1]"),
        ("none", ["length-ratio=0.5"], "length-ratio must be >= 1"),
    ],
)
def test_bad_filter_options_are_one_line_errors(preset, items, message):
    with pytest.raises(BitextmineError, match=None) as caught:
        parse_filters(preset, items)
    assert message in str(caught.value)


def test_mine_without_filter_options_gets_the_web_preset_and_options_go_on_top_of_it():
    assert mine_filter_settings(None, None, "de", "en") is None  # resolved by the mine step
    assert mine_filter_settings(None, ["score-max=1.3"], "de", "en") == replace(WEB, score_max=1.3)
    assert mine_filter_settings("none", None, "de", "en") == NO_FILTERS
    assert mine_filter_settings("none", ["letters"], "de", "en") == FilterSettings(letters=True)
    assert mine_filter_settings("web", None, "xx", "en") == WEB  # asked for: its check fails later


def test_filters_on_top_of_the_default_keep_its_allowance_for_an_unknown_language():
    with pytest.warns(BitextmineWarning, match="does not know 'xx'"):
        relaxed = mine_filter_settings(None, ["score-max=1.3"], "xx", "en")
    assert relaxed == replace(WEB, score_max=1.3, language=None)
    warnings: list[str] = []
    assert default_filters("xx", "en", warnings.append, ["language=0.6"]) == replace(WEB, language=0.6)
    assert warnings == []  # the check was asked for by name: PairFilter's error names the language


def test_the_default_filters_skip_the_language_check_only_for_a_language_lid_does_not_know():
    warnings: list[str] = []
    assert default_filters("de", "en", warnings.append) == WEB and warnings == []
    unknown = default_filters("xx", "en", warnings.append)
    assert unknown == replace(WEB, language=None)
    assert warnings == [
        "language identification does not know 'xx': the default filters (web) skip their language "
        "check (--filters web or none silences this)"
    ]
    pairs = [("Hallo Welt, wie geht es?", "Hello world, how are you?")]
    keep, counts = run(unknown, pairs, langs=("xx", "en"))
    assert keep == [True] and "language" not in counts


def test_an_unknown_language_for_the_language_filter_fails_before_any_work():
    with pytest.raises(BitextmineError, match="xx"):
        PairFilter(FilterSettings(language=0.5), "xx", "en")


class NoDigits(FilterRule):
    """A toy filter: drops pairs with a side holding `no_digits` digits or more."""

    name = "no-digits"
    fields = (Setting("no_digits", int, 1),)

    @classmethod
    def check(cls, settings):
        return None if settings.no_digits != 0 else "no-digits must be at least 1"

    def keep(self, scores, src, tgt):
        most = self.settings.no_digits
        digits = [max(sum(c.isdigit() for c in side) for side in pair) for pair in zip(src, tgt, strict=True)]
        return np.array(digits) < most


def test_a_new_filter_is_one_class_listed_among_the_others():
    Settings = settings_type((*FILTERS[:-1], NoDigits, FILTERS[-1]))  # before dedup, as `FILTERS` would
    settings = with_items(Settings(dedup=True), ["no-digits"])
    assert settings.enabled() == ["no-digits", "dedup"] and settings.to_json()["no_digits"] == 1
    pairs = [("Seite 12", "Page 12"), ("Hallo", "Hello"), ("hallo!", "hello")]
    keep, counts = run(settings, pairs)
    assert keep == [False, True, False] and counts == {"no-digits": 1, "dedup": 1}
    with pytest.raises(BitextmineError, match="no-digits must be at least 1"):
        with_items(Settings(), ["no-digits=0"])
    with pytest.raises(BitextmineError, match=r"unknown filter 'digits'.*no-digits, dedup"):
        with_items(Settings(), ["digits"])
