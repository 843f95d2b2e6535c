"""Latin letters without their accents: the spelling much web text uses ("Awon" for Yoruba "Àwọn").

Only marks on Latin letters go: in Tamil, Khmer or Devanagari the combining marks are vowels, and
dropping them would make another word. Letters with no decomposition (ø, ł, đ) stay as they are.
"""

from __future__ import annotations

import unicodedata
from functools import cache


def strip_latin_accents(text: str) -> str:
    """`text` with the combining marks of its Latin letters removed (NFC in, NFC out)."""
    if text.isascii():
        return text
    kept: list[str] = []
    for char in unicodedata.normalize("NFD", text):
        if unicodedata.category(char) == "Mn" and kept and _is_latin(kept[-1]):
            continue
        kept.append(char)
    return unicodedata.normalize("NFC", "".join(kept))


@cache
def _is_latin(char: str) -> bool:
    return unicodedata.name(char, "").startswith("LATIN ")
