"""Language codes and pairs: the one parser every command and reader uses."""

from __future__ import annotations

import pytest

from bitextmine.errors import BitextmineError
from bitextmine.text.languages import check_lang, parse_pair


def test_parse_pair() -> None:
    assert parse_pair("de-en") == ("de", "en")
    assert parse_pair("zh_Hans-en") == ("zh_Hans", "en")


@pytest.mark.parametrize("bad", ["de", "de_en", "de-", "-en", "en-en", "de-en-fr", "de en", "de-en\n", ""])
def test_malformed_pairs_are_one_line_errors(bad: str) -> None:
    with pytest.raises(
        BitextmineError, match=r"bad language pair .*expected two distinct codes like de-en"
    ) as excinfo:
        parse_pair(bad)
    assert "\n" not in str(excinfo.value)


def test_language_codes() -> None:
    assert check_lang("zho_simpl") == "zho_simpl" and check_lang("zh-Hans") == "zh-Hans"
    for bad in ["", "de/en", "../de", "de\n", "-de", "x" * 33]:
        with pytest.raises(BitextmineError, match="invalid language code"):
            check_lang(bad)
