"""The exception and warning types that the CLI prints as one-line messages instead of tracebacks."""

from __future__ import annotations

import errno
import math
import numbers
import os
import sys
import warnings
from collections.abc import Callable


class BitextmineError(Exception):
    """A user-facing error: bad input, a mismatched workspace, a missing model.

    The message is complete on its own (it names the file and, when it applies, the line).
    """


class BitextmineValueError(BitextmineError, ValueError):
    """A bad argument of a Python API function (mine_arrays' vectors, embed's batch size): a ValueError,
    as Python callers expect, and a BitextmineError, which the CLI prints on one line."""


def whole_number(name: str, value: object, low: int = 1, high: int | None = None) -> int:
    """`value` as an int from `low` to `high`, else a BitextmineValueError naming the argument `name`."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        number = int(value)
        if low <= number and (high is None or number <= high):
            return number
    bounds = f"from {low} to {high}" if high is not None else f">= {low}"
    raise BitextmineValueError(f"{name} must be a whole number {bounds}, not {value!r}")


def real_number(name: str, value: object, low: float | None = None, high: float | None = None) -> float:
    """`value` as a finite float from `low` to `high` (None: unbounded), else a BitextmineValueError
    naming `name` (nan compares false with every bound: it would silently keep or drop everything)."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        number = float(value)
        if math.isfinite(number) and (low is None or number >= low) and (high is None or number <= high):
            return number
    bounds = [f" >= {low:g}"] if low is not None else []
    bounds += [f" <= {high:g}"] if high is not None else []
    raise BitextmineValueError(f"{name} must be a finite number{' and'.join(bounds)}, not {value!r}")


class BitextmineWarning(UserWarning):
    """Something the user should know that does not stop the run; the CLI prints it on one line."""


Warn = Callable[[str], None]  # a sink for what the user should know: `warn_user`, a list in tests


def warn_user(message: str) -> None:
    """The default `Warn`: a BitextmineWarning (the CLI prints it on one line)."""
    warnings.warn(message, BitextmineWarning, stacklevel=3)


_RAN_OUT = {  # what a write ran out of, and what to do
    errno.ENOSPC: "free some space and rerun",
    errno.EDQUOT: "the disk quota is used up: free some space or raise the quota, and rerun",
    errno.EFBIG: "past the largest file allowed (ulimit -f, or the file system's): raise the limit or "
    "write elsewhere, and rerun",
}


def os_error_message(exc: OSError, path: str | os.PathLike[str] | None = None, action: str = "") -> str:
    """``FILE: [ACTION: ]REASON`` for an OSError about `path` (default: the file the error names).

    A full disk, quota or file size limit says what ran out and what to do (encode and train resume
    where they stopped).
    """
    where = path if path is not None else exc.filename
    reason = exc.strerror or str(exc) or type(exc).__name__
    message = f"{action}: {reason}" if action else reason
    if exc.errno in _RAN_OUT:
        message += f"; {_RAN_OUT[exc.errno]}"
    return message if where is None else f"{os.fsdecode(where)}: {message}"


def is_out_of_memory(exc: BaseException) -> bool:
    """A MemoryError, or torch's CUDA out-of-memory error (looked up only where torch is loaded)."""
    if isinstance(exc, MemoryError):
        return True
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(exc, torch.cuda.OutOfMemoryError)
