"""Training checkpoints: tensors and plain containers are loaded; anything that would run code is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bitextmine.errors import BitextmineError
from bitextmine.train.checkpoint import load_checkpoint


class _Planted:
    """What a hostile checkpoint holds: unpickling it calls `Path.touch` (it could call anything)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_checkpoint_that_would_run_code_is_refused_not_executed(tmp_path):
    """`torch.load(weights_only=False)` on resume ran whatever a checkpoint in OUT held."""
    marker, path = tmp_path / "executed", tmp_path / "step-00000001.pt"
    torch.save({"step": 1, "payload": _Planted(marker)}, path)
    with pytest.raises(
        BitextmineError, match=r"step-00000001.pt: not a bitextmine checkpoint, refused to load"
    ) as info:
        load_checkpoint(path)
    assert "\n" not in str(info.value)
    assert not marker.exists()


def test_tensors_and_plain_state_load(tmp_path):
    state = {
        "step": 3,
        "encoder": {"w": torch.ones(2)},
        "random": {"torch": torch.get_rng_state()},
        "x": [1.5, "a"],
    }
    torch.save(state, tmp_path / "ok.pt")
    loaded = load_checkpoint(tmp_path / "ok.pt")
    assert (
        loaded["step"] == 3
        and torch.equal(loaded["encoder"]["w"], torch.ones(2))
        and loaded["x"] == [1.5, "a"]
    )
