"""Device choice: which devices a run may name (auto, cpu, cuda, cuda:N), checked without importing
torch unless a CUDA device is asked for, and the torch device each stands for; the one home of this
choice for `encode`, `index`, `mine`, `mine_arrays` and `train` alike (FAISS's GPUs:
search/faiss_gpu.py)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from bitextmine.errors import BitextmineValueError

if TYPE_CHECKING:
    import torch

DEVICE_NAME = re.compile(r"auto|cpu|cuda(:\d+)?")  # also the command line's choices


def check_device(name: object) -> str:
    """`name` if it is auto, cpu, or a CUDA device torch sees here; else a one-line ValueError."""
    if not isinstance(name, str) or not DEVICE_NAME.fullmatch(name):
        raise BitextmineValueError(f"unknown device {name!r}: use auto, cpu, cuda or cuda:N")
    if name.startswith("cuda"):
        import torch  # only where CUDA is asked for: mining IVF indexes runs without torch

        if not torch.cuda.is_available():
            raise BitextmineValueError(f"device {name!r} asked for, but torch sees no CUDA device here")
        count = torch.cuda.device_count()
        if int(name.partition(":")[2] or 0) >= count:
            raise BitextmineValueError(f"device {name!r}: only {count} CUDA device(s) here")
    return name


def pick_device(name: str = "auto") -> torch.device:
    """The torch device `name` stands for: `auto` is CUDA when available, else the CPU."""
    import torch

    if check_device(name) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)
