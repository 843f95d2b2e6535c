"""A calibration split from any parallel set: two line-aligned files, line i of the target translating
line i of the source (FLORES dev, Tatoeba, a few hundred pairs of one's own).

A threshold needs sentences without a translation too, or every threshold has full precision: the split
keeps every line's source but the target of every second line only, so half its sources have no
translation in it, and its gold pairs are the other lines'. `calibrate --pairs` mines it like a BUCC
split; `mine` plants its gold pairs in the corpus (calibration/planted.py).
"""

from __future__ import annotations

import os
from pathlib import Path

from bitextmine.calibration.bucc import BuccError, BuccSide, BuccSplit
from bitextmine.errors import Warn, warn_user
from bitextmine.text.languages import parse_pair
from bitextmine.text.reader import display_name, read_all_lines

# Gold pairs a split needs at the least: a threshold chosen on fewer moves with every pair.
MIN_PAIRS = 20


def read_aligned(
    src_path: str | os.PathLike[str], tgt_path: str | os.PathLike[str], pair: str, warn: Warn = warn_user
) -> BuccSplit:
    """The calibration split of two line-aligned files (module docstring), named after the source file.
    Lines blank on either side are left out, with a warning; files of different line counts or of the
    same lines (one file twice), or too few pairs, are a one-line error naming the files."""
    src_lang, tgt_lang = parse_pair(pair)
    src_lines, tgt_lines = read_all_lines(src_path, warn), read_all_lines(tgt_path, warn)
    names = f"{display_name(str(src_path))} and {display_name(str(tgt_path))}"
    if len(src_lines) != len(tgt_lines):
        raise BuccError(
            f"{names} have {len(src_lines):,} and {len(tgt_lines):,} lines: "
            "--pairs takes two line-aligned files, line i of the second translating line i of the first"
        )
    if src_lines == tgt_lines:
        raise BuccError(
            f"{names} hold the same lines: --pairs takes a file and its translation, or every threshold "
            "would be learned on sentences paired with themselves"
        )
    lines = [
        (n, s, t)
        for n, (s, t) in enumerate(zip(src_lines, tgt_lines, strict=True), 1)
        if s.strip() and t.strip()
    ]
    if len(lines) < len(src_lines):
        warn(f"{names}: {len(src_lines) - len(lines):,} lines blank on one side or both; left out")
    paired = lines[::2]
    if len(paired) < MIN_PAIRS:
        raise BuccError(f"{names}: {len(lines):,} pairs; calibration needs {2 * MIN_PAIRS} or more")
    src = BuccSide(src_lang, [f"{n}" for n, _, _ in lines], [s for _, s, _ in lines])
    tgt = BuccSide(tgt_lang, [f"{n}" for n, _, _ in paired], [t for _, _, t in paired])
    gold = {(f"{n}", f"{n}") for n, _, _ in paired}
    return BuccSplit(pair=pair, split=Path(src_path).name, src=src, tgt=tgt, gold=gold)
