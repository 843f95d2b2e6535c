"""How a language's input files become its corpus: the settings of the corpus pass."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from bitextmine.text.lid import LidFilter
from bitextmine.text.reader import Columns


@dataclass(frozen=True)
class CorpusSettings:
    """Lines cut at `max_chars` characters, read from `columns` (TSV input), deduplicated on the sentence
    (`dedup`), kept in `lid`'s language, and written `shard_size` rows a text shard."""

    shard_size: int = 100_000
    dedup: bool = False
    max_chars: int = 10_000
    columns: Columns | None = None
    lid: LidFilter | None = None

    def row_settings(self) -> dict[str, Any]:
        """The settings that change the rows (the shard size does not): what a corpus part records."""
        settings = asdict(self)
        del settings["shard_size"]
        return settings
