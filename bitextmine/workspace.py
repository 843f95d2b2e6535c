"""The workspace directory: where every step reads and writes, so commands need no paths."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from bitextmine.errors import BitextmineError

DEFAULT_WORKDIR = Path("bitextmine-work")
_LANG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")


def check_lang(lang: str) -> str:
    if not _LANG.match(lang):
        raise BitextmineError(
            f"invalid language code {lang!r}: use letters, digits, '-' or '_' (e.g. de, zho_simpl)"
        )
    return lang


@dataclass(frozen=True)
class Workspace:
    root: Path

    def corpus_dir(self, lang: str) -> Path:
        return self.root / "corpora" / check_lang(lang)

    def embedding_dir(self, lang: str) -> Path:
        return self.root / "emb" / check_lang(lang)

    def encoded_languages(self) -> list[str]:
        """Languages with an embeddings manifest, sorted."""
        root = self.root / "emb"
        return sorted(p.parent.name for p in root.glob("*/manifest.json")) if root.is_dir() else []

    def index_dir(self) -> Path:
        return self.root / "index"

    def mined_dir(self) -> Path:
        return self.root / "mined"
