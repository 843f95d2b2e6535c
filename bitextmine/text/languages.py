"""Language codes and language pairs, as the command line and file names spell them."""

from __future__ import annotations

import re

from bitextmine.errors import BitextmineError

_LANG = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}")
_PAIR_LANG = re.compile(r"[A-Za-z0-9][A-Za-z0-9_]{0,31}")  # no '-': it separates the two codes


def check_lang(lang: str) -> str:
    """`lang` if it is a valid code (letters, digits, '-', '_'), else a BitextmineError."""
    if not _LANG.fullmatch(lang):
        raise BitextmineError(
            f"invalid language code {lang!r}: use letters, digits, '-' or '_' (e.g. de, zho_simpl)"
        )
    return lang


def parse_pair(pair: str) -> tuple[str, str]:
    """``"de-en"`` -> ``("de", "en")``: two distinct codes of letters, digits and '_' joined by '-'."""
    codes = pair.split("-")
    if len(codes) != 2 or not all(_PAIR_LANG.fullmatch(code) for code in codes) or codes[0] == codes[1]:
        raise BitextmineError(f"bad language pair {pair!r}: expected two distinct codes like de-en")
    return codes[0], codes[1]
