"""The objectives' names and the `--objectives` syntax: no torch here, so the CLI checks them before any
work (the objectives themselves are built in registry.py)."""

from __future__ import annotations

from bitextmine.errors import BitextmineError

OBJECTIVES = ("contrastive", "mexma", "rtl", "vmsst", "xtr", "distill")


def parse_objectives(spec: str) -> dict[str, float]:
    """'contrastive,mexma=0.5' -> {'contrastive': 1.0, 'mexma': 0.5}."""
    weights: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, weight = part.partition("=")
        name = name.strip()
        if name not in OBJECTIVES:
            raise BitextmineError(f"unknown objective {name!r}: choose from {', '.join(OBJECTIVES)}")
        try:
            weights[name] = float(weight) if weight else 1.0
        except ValueError:
            raise BitextmineError(f"objective weight must be a number: {part!r}") from None
    return weights
