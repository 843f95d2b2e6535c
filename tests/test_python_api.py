"""The public Python API: what `bitextmine` exports, that importing it changes nothing, and the runnable
example in examples/python_api.py on the shared model and data."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import bitextmine
from tests.helpers import REPO, require_shared


def test_every_exported_name_resolves():
    assert sorted(bitextmine.__all__) == sorted(bitextmine._EXPORTS)
    for name in bitextmine.__all__:
        assert getattr(bitextmine, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'mine_workspace'"):
        bitextmine.mine_workspace  # noqa: B018


def test_no_exported_name_is_shadowed_by_a_subpackage_import():
    """Importing bitextmine.X binds X on the package: an export named like a subpackage would flip between
    the two with import order (once `bm.train`, the function, broke `import bitextmine.train.data as d`)."""
    import importlib
    import pkgutil

    subpackages = {module.name for module in pkgutil.iter_modules(bitextmine.__path__)}
    assert not subpackages & set(bitextmine.__all__)
    importlib.import_module("bitextmine.train.recipes")  # binds bitextmine.train, the subpackage
    assert bitextmine.train_encoder.__module__ == "bitextmine.train.loop"
    assert importlib.import_module("bitextmine.train.data").__name__ == "bitextmine.train.data"


@pytest.mark.integration
def test_import_loads_nothing_heavy_and_changes_no_global_state():
    """In a fresh interpreter: no torch, FAISS or transformers, the same warning and logging setup."""
    probe = """
import logging, sys, warnings
def state():
    loggers = dict(logging.root.manager.loggerDict)
    return warnings.showwarning, list(warnings.filters), logging.root.level, loggers
before = state()
import bitextmine
bitextmine.Workspace, bitextmine.__all__
after = state()
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "faiss", "transformers", "numpy"))
print(before == after, heavy)
"""
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "True []"


@pytest.mark.integration
def test_the_python_api_example_mines_what_calibration_measured(tmp_path):
    """The example's workspace steps and its calibration score the same vectors: equal F1."""
    model = require_shared("models/multilingual-e5-small-q4")
    bucc = require_shared("data/bucc-like/de-en")
    shared_before = {p.name: p.stat().st_mtime_ns for p in model.iterdir()}
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "examples" / "python_api.py"),
            "--model",
            str(model),
            "--bucc",
            str(bucc),
            "--work",
            str(tmp_path / "work"),
            "--sentences",
            "300",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    calibrated = re.search(r"calibrated: threshold ([\d.]+), F1 ([\d.]+)", result.stdout)
    mined = re.search(r"mined: ([\d,]+) pairs -> (\S+), F1 ([\d.]+)", result.stdout)
    assert calibrated and mined, result.stdout + result.stderr
    assert mined[3] == calibrated[2] and float(mined[3]) > 80
    assert Path(mined[2]).is_file() and Path(mined[2]).parent == tmp_path / "work" / "mined"
    assert re.search(r"in memory: [\d,]+ pairs at the calibrated threshold", result.stdout)
    assert {p.name: p.stat().st_mtime_ns for p in model.iterdir()} == shared_before  # the model is only read
