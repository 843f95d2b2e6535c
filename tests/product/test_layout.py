"""The package layout: data flows one way between the stage subpackages (docs/design.md), and the
repository refers to nothing outside itself."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "bitextmine"

# A module may import its own subpackage and those of a lower rank, never a higher one. The base
# modules (errors, files, faults, progress, unit_vectors, version, devices) and `launch` (jobs and where
# they run) serve every stage; the package itself (`bitextmine/__init__.py`, the public API) is above all.
RANKS = {
    "errors": 0,
    "files": 0,
    "faults": 0,
    "progress": 0,
    "unit_vectors": 0,
    "version": 0,
    "devices": 0,
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
    "__init__": 11,
}


def _stage(module: str) -> str:
    """The subpackage (or base module) of a dotted bitextmine module name; `__init__` for the package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path, package: Path = PACKAGE, typing: bool = True) -> list[tuple[int, str]]:
    """(line, module) of every bitextmine module the file imports, at the top or inside functions (and,
    with `typing`, under `if TYPE_CHECKING:`): `from bitextmine.P import X` is module `bitextmine.P.X`
    where X is one, else `bitextmine.P` itself."""
    found = []
    tree = ast.parse(path.read_text(), str(path))
    skipped = set() if typing else _type_only(tree)
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "bitextmine":
            found += dict.fromkeys(
                (node.lineno, _from_package(node.module, a.name, package)) for a in node.names
            )
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "bitextmine"]
    return found


def _type_only(tree: ast.AST) -> set[int]:
    """The ids of the nodes under `if TYPE_CHECKING:`: imports that never run."""
    blocks = [n for n in ast.walk(tree) if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]
    return {id(node) for block in blocks for statement in block.body for node in ast.walk(statement)}


def _from_package(module: str, name: str, package: Path) -> str:
    folder = package.joinpath(*module.split(".")[1:])
    is_module = (folder / f"{name}.py").is_file() or (folder / name / "__init__.py").is_file()
    return f"{module}.{name}" if is_module else module


def _modules(package: Path = PACKAGE) -> list[Path]:
    return sorted(
        p for p in package.rglob("*.py") if p.parent != package or p.stem not in ("__init__", "__main__")
    )


def _name(path: Path, package: Path = PACKAGE) -> str:
    return "bitextmine." + ".".join(path.relative_to(package).with_suffix("").parts)


def _against_the_flow(path: Path, package: Path = PACKAGE) -> list[str]:
    """The imports of one module that go up the table (or sideways to another stage of its rank)."""
    own = _stage(_name(path, package))
    return [
        f"{path.relative_to(package.parent)}:{line} imports {module}"
        for line, module in _imports(path, package)
        if _stage(module) != own and RANKS[_stage(module)] >= RANKS[own] and RANKS[_stage(module)] > 0
    ]


def test_every_module_belongs_to_a_ranked_stage():
    assert {_stage(_name(p)) for p in _modules()} == set(RANKS) - {"__init__"}


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_flow_one_way(path: Path):
    against = _against_the_flow(path)
    assert not against, "imports against the data flow:\n" + "\n".join(against)


def _plant(root: Path, sources: dict[str, str]) -> Path:
    """A fake package `bitextmine` under `root` of these files (path in the package: source)."""
    package = root / "bitextmine"
    for name, source in sources.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(source)
    return package


def test_the_rule_catches_upward_imports_planted_in_a_copy_of_the_package(tmp_path):
    """Each way of writing an upward import, planted in a fake package beside one that is allowed."""
    planted = {
        "search/knn.py": "from bitextmine.mining.margin import margin_scores\n",
        "mining/mined_file.py": "def version():\n    from bitextmine import __version__\n",
        "text/reader.py": "import bitextmine.cli.app\n",
        "workspace/layout.py": "from bitextmine import steps\n",
        "encoder/loading.py": "from bitextmine import errors, progress\nfrom bitextmine.text import lid\n",
    }
    package = _plant(tmp_path, {**planted, "steps/__init__.py": "", "errors.py": "", "progress.py": ""})
    found = {str(p.relative_to(package)): _against_the_flow(p, package) for p in _modules(package)}
    assert found == {
        "errors.py": [],
        "progress.py": [],
        "search/knn.py": ["bitextmine/search/knn.py:1 imports bitextmine.mining.margin"],
        "mining/mined_file.py": ["bitextmine/mining/mined_file.py:2 imports bitextmine"],
        "text/reader.py": ["bitextmine/text/reader.py:1 imports bitextmine.cli.app"],
        "workspace/layout.py": ["bitextmine/workspace/layout.py:1 imports bitextmine.steps"],
        "encoder/loading.py": [],
        "steps/__init__.py": [],
    }


def _graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Each module's imports of the package's other modules that run (top-level and in functions, not
    those for type checkers only), a subpackage's `__init__` named as the subpackage."""
    names = {path: _name(path, package).removesuffix(".__init__") for path in _modules(package)}
    known = set(names.values())
    return {
        name: {module for _, module in _imports(path, package, typing=False) if module in known} - {name}
        for path, name in names.items()
    }


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle, as the modules along it back to the first; empty when there is none."""
    acyclic: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str]:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in acyclic:
            return []
        for imported in sorted(graph[module]):
            if found := visit(imported, [*path, module]):
                return found
        acyclic.add(module)
        return []

    return next((found for module in sorted(graph) if (found := visit(module, []))), [])


def test_no_import_cycle():
    assert _cycle(_graph()) == []


def test_the_cycle_check_catches_one_planted_in_a_fake_package(tmp_path):
    """A cycle closed by an import inside a function, through a subpackage's `__init__`; an import for
    type checkers only closes none."""
    package = _plant(
        tmp_path,
        {
            "launch/__init__.py": "from bitextmine.launch import runner\n",
            "launch/runner.py": "from bitextmine.launch.job import Job\n",
            "launch/job.py": "def run():\n    from bitextmine import launch\n",
            "launch/config.py": "if TYPE_CHECKING:\n    from bitextmine.launch import job\n",
        },
    )
    launch = ["bitextmine.launch", "bitextmine.launch.runner", "bitextmine.launch.job"]
    assert _cycle(_graph(package)) == [*launch, "bitextmine.launch"]
    (package / "launch/job.py").write_text("from bitextmine.launch import config\n")
    assert _cycle(_graph(package)) == []


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
        found += [name for name in names if re.fullmatch(r"tests\.(\w+\.)*test_\w+", name)]
    return found


def test_no_test_module_imports_another():
    """What tests share lives in tests/helpers.py, tests/st_models.py and conftest.py."""
    tests = REPO / "tests"
    offenders = {path.name: _imports_a_test_module(path.read_text()) for path in tests.rglob("test_*.py")}
    assert {name: found for name, found in offenders.items() if found} == {}
    assert _imports_a_test_module("from tests.product.test_faults import outputs") == [
        "tests.product.test_faults"
    ]
