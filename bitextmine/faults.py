"""Named crash points for fault-injection tests: `BITEXTMINE_FAULT=NAME[@N]` kills the process there.

Every atomic write passes `before-rename` (the file is complete under its temporary name) and
`after-rename`, so `before-rename@3` kills a run just before its third output file would appear;
steps add their own points where work lives outside files (e.g. between index query blocks). With
the variable unset this is one environment lookup; with it set, the N-th (default first) pass
through NAME sends SIGKILL to the process itself: no cleanup, no `finally`, like a power cut or
the out-of-memory killer. tests/product/test_faults.py uses it to prove that reruns resume byte-identically.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

FAULT_ENV = "BITEXTMINE_FAULT"
_passes: Counter[str] = Counter()


def crash_point(name: str) -> None:
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    target, _, nth = spec.partition("@")
    if target != name:
        return
    _passes[name] += 1
    if _passes[name] == int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
