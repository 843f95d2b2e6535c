"""Training checkpoints: everything a run needs to continue exactly where it stopped.

``OUT/checkpoints/step-NNNNNNNN.pt`` holds the encoder's and the objectives' weights, the optimizer and
schedule, the random states (torch, the masking generator) and the data position; it is written to a
temporary name and renamed, so a crash leaves the previous checkpoint intact. Older ones are pruned.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

import torch

from bitextmine.errors import BitextmineError
from bitextmine.files import atomic_path

_NAME = re.compile(r"^step-(\d{8})\.pt$")
_ENFORCE = re.compile(r"^\[enforce fail at [^\]]*\]\s*\.?\s*")


def checkpoint_dir(out: Path) -> Path:
    return Path(out) / "checkpoints"


def latest_checkpoint(out: Path) -> Path | None:
    found = sorted(p for p in checkpoint_dir(out).glob("step-*.pt") if _NAME.match(p.name))
    return found[-1] if found else None


def save_checkpoint(out: Path, step: int, state: dict[str, Any], keep: int = 2) -> Path:
    path = checkpoint_dir(out) / f"step-{step:08d}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        try:
            torch.save(state, tmp)
        except RuntimeError as exc:  # torch's own file writer failed (a full disk, ...); tmp is removed
            raise BitextmineError(
                f"{path}: cannot write the checkpoint (torch: {_reason(exc)}); "
                "if the disk is full, free some space and rerun"
            ) from None
    for old in sorted(checkpoint_dir(out).glob("step-*.pt"))[:-keep]:
        old.unlink()
    return path


def _reason(exc: BaseException) -> str:
    """The first line of a torch error without its ``[enforce fail at FILE:LINE] .`` prefix."""
    lines = str(exc).strip().splitlines()
    return _ENFORCE.sub("", lines[0]) if lines else type(exc).__name__


def load_checkpoint(path: Path) -> dict[str, Any]:
    try:
        # weights_only: tensors and plain containers only; a checkpoint that would run code when
        # unpickled (one planted in a shared --out folder) is refused, not executed
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BitextmineError(f"{path}: not a bitextmine checkpoint, refused to load it ({first})") from None
    except (OSError, RuntimeError, EOFError) as exc:
        raise BitextmineError(f"{path}: unreadable checkpoint ({str(exc).splitlines()[0]})") from None


def random_state(generator: torch.Generator) -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "generator": generator.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_random_state(state: dict[str, Any], generator: torch.Generator) -> None:
    torch.set_rng_state(state["torch"])
    generator.set_state(state["generator"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
