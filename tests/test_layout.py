"""The package layout: data flows one way between the stage subpackages (docs/design.md), and the
repository refers to nothing outside itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "bitextmine"

# A module may import its own subpackage and those of a lower rank, never a higher one. The base
# modules (errors, files, faults, progress, unit_vectors) and `launch` (jobs and where they run)
# serve every stage.
RANKS = {
    "errors": 0,
    "files": 0,
    "faults": 0,
    "progress": 0,
    "unit_vectors": 0,
    "launch": 0,
    "text": 1,
    "workspace": 2,
    "corpus": 3,  # the corpus pass, writing text shards; ranked with encoder, so neither imports the other
    "encoder": 3,
    "search": 4,
    "mining": 5,
    "calibration": 6,  # BUCC splits and the threshold store, for the mine, score and calibrate steps
    "evaluation": 7,  # the evaluators, which `eval` and train's evaluation run
    "train": 8,
    "steps": 9,
    "cli": 10,
}


def _stage(module: str) -> str:
    """The subpackage (or base module) of a dotted bitextmine module name."""
    return module.split(".")[1]


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every bitextmine module the file imports, at the top or inside functions."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("bitextmine."):
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("bitextmine.")]
    return found


def _modules() -> list[Path]:
    return sorted(
        p for p in PACKAGE.rglob("*.py") if p.parent != PACKAGE or p.stem not in ("__init__", "__main__")
    )


def test_every_module_belongs_to_a_ranked_stage():
    stages = {
        _stage("bitextmine." + ".".join(p.relative_to(PACKAGE).with_suffix("").parts)) for p in _modules()
    }
    assert stages == set(RANKS)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_flow_one_way(path: Path):
    own = _stage("bitextmine." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts))
    against = [
        f"{path.relative_to(REPO)}:{line} imports {module}"
        for line, module in _imports(path)
        if _stage(module) != own and RANKS[_stage(module)] >= RANKS[own] and RANKS[_stage(module)] > 0
    ]
    assert not against, "imports against the data flow:\n" + "\n".join(against)


def test_the_rule_catches_a_search_module_importing_mining(tmp_path):
    module = tmp_path / "knn.py"
    module.write_text("from bitextmine.mining.margin import margin_scores\n")
    assert _imports(module) == [(1, "bitextmine.mining.margin")]
    assert RANKS[_stage("bitextmine.mining.margin")] > RANKS["search"]


def test_nothing_points_outside_the_repository():
    outside = ["../shared/" + "DESIGN", "../shared/" + "papers"]  # split so this file does not match
    files = [p for p in REPO.rglob("*") if p.is_file() and p.suffix in {".py", ".md", ".toml", ".cfg", ""}]
    files = [p for p in files if not {".git", ".venv", "bitextmine-work", "bench-work"} & set(p.parts)]
    files = [p for p in files if not any(part.endswith(".egg-info") for part in p.parts)]
    offenders = [
        str(p.relative_to(REPO)) for p in files if any(o in p.read_text(errors="ignore") for o in outside)
    ]
    assert not offenders


def _imports_a_test_module(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        found += [name for name in names if name.startswith("tests.test_")]
    return found


def test_no_test_module_imports_another():
    """What tests share lives in tests/helpers.py, tests/st_models.py and conftest.py."""
    tests = Path(__file__).parent
    offenders = {path.name: _imports_a_test_module(path.read_text()) for path in tests.glob("test_*.py")}
    assert {name: found for name, found in offenders.items() if found} == {}
    assert _imports_a_test_module("from tests.test_faults import outputs") == ["tests.test_faults"]
