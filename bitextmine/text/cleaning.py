"""Line cleaning: control characters to spaces, invisible characters removed, whitespace collapsed."""

from __future__ import annotations

import re


def _clean_table() -> dict[int, str | None]:
    table: dict[int, str | None] = {c: " " for c in range(0x20)}  # C0 controls incl. TAB CR VT FF 1C-1E
    table[0x7F] = " "
    # C1 controls in real text are cp1252 bytes mis-decoded as Latin-1 (e.g. WMT German files):
    # restore the cp1252 character; the five bytes cp1252 leaves undefined (and U+0085) become spaces.
    for c in range(0x80, 0xA0):
        char = bytes([c]).decode("cp1252", errors="replace")
        table[c] = " " if char == "\ufffd" or c == 0x85 else char
    table.update({0x2028: " ", 0x2029: " "})
    table.update({0x200B: None, 0xFEFF: None, 0x00AD: None})
    return table


CLEAN_TABLE = str.maketrans(_clean_table())


# Characters of the table that str.split() does not already treat as whitespace: a line without any of
# them (nearly every line) skips str.translate, which is slow on non-ASCII text.
_NEEDS_TRANSLATE = re.compile(
    "[" + "".join(re.escape(chr(c)) for c in sorted(CLEAN_TABLE) if not chr(c).isspace()) + "]"
)


def clean_line(text: str) -> str:
    """Normalize one line: control characters to spaces, invisible characters removed, spaces collapsed."""
    if _NEEDS_TRANSLATE.search(text):
        text = text.translate(CLEAN_TABLE)
    # str.split() with no argument splits on every Unicode space (NBSP, U+2000-U+200A, ...).
    return " ".join(text.split())
