"""The CPU cores and torch threads the encoder runs on (torch is imported only to count its threads)."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one: not macOS)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def thread_summary() -> str:
    import torch

    return f"{torch.get_num_threads()} threads + {torch.get_num_interop_threads()} inter-op"
