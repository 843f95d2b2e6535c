"""The `--objectives` syntax: no torch here, so the CLI checks the names before any work."""

from __future__ import annotations

from bitextmine.errors import BitextmineError
from bitextmine.train.objectives.settings import settings_class


def parse_objectives(spec: str) -> dict[str, float]:
    """'contrastive,mexma=0.5' -> {'contrastive': 1.0, 'mexma': 0.5}."""
    weights: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, weight = part.partition("=")
        name = name.strip()
        settings_class(name)  # refuses an unknown name
        try:
            weights[name] = float(weight) if weight else 1.0
        except ValueError:
            raise BitextmineError(f"objective weight must be a number: {part!r}") from None
    return weights
