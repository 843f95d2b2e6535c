"""A line-aligned bitext: two files whose line i translate each other, or one TAB-separated file."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from bitextmine.errors import Warn, warn_user
from bitextmine.text.cleaning import clean_line
from bitextmine.text.reader import CorpusError, display_name, read_lines


@dataclass
class Bitext:
    """The pairs of a bitext whose sides are both non-empty once cleaned, with their line numbers."""

    src_file: str
    tgt_file: str
    src: list[str] = field(default_factory=list)
    tgt: list[str] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)  # 1-based, in the input (both files share it)
    empty: int = 0  # pairs left out: a side was empty once cleaned

    def __len__(self) -> int:
        return len(self.src)


def read_bitext(paths: Sequence[str], columns: tuple[int, int] = (1, 2), warn: Warn = warn_user) -> Bitext:
    """Read `paths`: two line-aligned files (source, target), or one file whose 1-based TAB-separated
    `columns` hold the source and the target. Sentences are cleaned as `encode` cleans them."""
    if len(paths) == 2:
        bitext = Bitext(str(paths[0]), str(paths[1]))
        pairs = _aligned(paths[0], paths[1], warn)
    elif len(paths) == 1:
        bitext = Bitext(str(paths[0]), str(paths[0]))
        pairs = _columns(paths[0], columns, warn)
    else:
        raise CorpusError(f"a bitext is two line-aligned files or one TSV file, not {len(paths)} files")
    for line, src, tgt in pairs:
        src, tgt = clean_line(src), clean_line(tgt)
        if not src or not tgt:
            bitext.empty += 1
            continue
        bitext.src.append(src)
        bitext.tgt.append(tgt)
        bitext.lines.append(line)
    if not bitext.src:
        raise CorpusError(f"{display_name(bitext.src_file)}: no pair with two non-empty sides")
    return bitext


def _aligned(src_path: str, tgt_path: str, warn: Warn) -> Iterator[tuple[int, str, str]]:
    for src, tgt in itertools.zip_longest(read_lines(src_path, warn), read_lines(tgt_path, warn)):
        if src is None or tgt is None:
            longer, shorter = (src_path, tgt_path) if tgt is None else (tgt_path, src_path)
            raise CorpusError(
                f"{display_name(longer)} has more lines than {display_name(shorter)}: the two files of "
                "a bitext must be line-aligned"
            )
        yield src[0], src[1], tgt[1]


def check_columns(columns: tuple[int, int]) -> None:
    """The source and target columns of a TSV bitext: two different 1-based numbers."""
    if min(columns) < 1 or columns[0] == columns[1]:
        raise CorpusError(f"bad bitext columns {columns}: two different 1-based column numbers")


def _columns(path: str, columns: tuple[int, int], warn: Warn) -> Iterator[tuple[int, str, str]]:
    check_columns(columns)
    for line, text in read_lines(path, warn):
        fields = text.split("\t")
        if len(fields) < max(columns):
            raise CorpusError(
                f"{display_name(path)}:{line}: expected at least {max(columns)} TAB-separated columns, "
                f"found {len(fields)}"
            )
        yield line, fields[columns[0] - 1], fields[columns[1] - 1]
