"""Workspace fuzz test: one random corruption of one file of a finished workspace (every
JSON, `.npy`, `.faiss` and text shard it holds: cut short, bytes flipped, deleted, a value of the wrong
type, a name pointing out of its folder), then `mine`, the same `encode`s, `index`es and `mine` again.

Each command either succeeds with the uncorrupted workspace's mined pairs or stops with one `error:`
line, never a traceback; and nothing outside the workspace copy is read, written or deleted: an audit
hook watches every path the commands open, rename or remove in this process, a sentinel folder beside
the copy holds copies of the files a name could be pointed at, and the inputs, the model and the
pristine workspace are compared byte for byte.
"""

from __future__ import annotations

import fnmatch
import io
import json
import os
import re
import shutil
import sys
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from bitextmine.calibration.thresholds import ThresholdRecord, store_threshold
from tests.helpers import read_mined, sentences

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXAMPLES = int(os.environ.get("BITEXTMINE_FUZZ_EXAMPLES", "30"))
FUZZ = dict(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None, print_blob=False)
CORRUPTIBLE = {".json", ".npy", ".faiss", ".tsv"}
NAME_KEYS = {"name", "file", "lang", "plan", "pair"}
# A value a hand-edit may change without an error: the recorded input path, which the mined ids name.
FREE_VALUES = re.compile(r"sources/\d+/path")
WRONG_TYPES: list[Any] = [None, True, -1, 0, 2**70, 1.5, float("nan"), "", "x", [], [1], {}, {"a": 1}]


@dataclass(repr=False)
class Pristine:
    root: Path
    work: Path
    inputs: dict[str, Path]
    model: Path
    reference: bytes
    files: dict[str, bytes] = field(default_factory=dict)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # hypothesis prints it on failure
        printer.text(f"Pristine({self.root})")

    def commands(self) -> list[list[str]]:
        """`mine` on the damaged workspace, then what rebuilds it: the same encodes, indexes, mine."""
        mine = ["mine", "de", "en", "--threshold", "auto", "--filters", "none"]
        encodes = [
            ["encode", "--lid", "off", str(path), "-l", lang, "-m", str(self.model), "--shard-size", "7"]
            for lang, path in self.inputs.items()
        ]
        indexes = [
            ["index", "de", "--max-memory", "0.000002", "--factory", "IVF1,Flat"],
            ["index", "en"],
        ]  # 2 shards
        return [mine, *encodes, *indexes, mine]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory, tiny_model_dir) -> Pristine:
    """de and en encoded in shards of 7, de indexed in 2 shards, a calibrated threshold, mined."""
    root = tmp_path_factory.mktemp("fuzz")
    shared = sentences(10, seed=0)
    inputs = {}
    for lang, lines in (("de", shared + sentences(15, seed=1)), ("en", sentences(12, seed=2) + shared)):
        inputs[lang] = root / "inputs" / f"{lang}.txt"
        inputs[lang].parent.mkdir(exist_ok=True)
        inputs[lang].write_text("\n".join(lines) + "\n")
    ws = Pristine(root, root / "pristine", inputs, tiny_model_dir("bert"), b"")
    sys.addaudithook(_watch)  # module-scoped: once a session
    commands = ws.commands()
    for args in commands[1:-1]:
        _ok(*args, "-w", str(ws.work))
    fingerprint = json.loads((ws.work / "emb" / "de" / "manifest.json").read_text())["model"]["fingerprint"]
    record = ThresholdRecord(
        fingerprint, "tiny", "ratio", "de-en", 1.01, "dev", 90.0, 90.0, 90.0, "best F1", ""
    )
    store_threshold(ws.work / "thresholds.json", record)
    _ok(*commands[-1], "-w", str(ws.work))
    ws.reference = _mined(ws.work)
    assert 0 < len(read_mined(ws.work / "mined" / "de-en.tsv.zst")) < 18, "the threshold drops some pairs"
    ws.files = {
        str(p.relative_to(ws.work)): p.read_bytes()
        for p in sorted(ws.work.rglob("*"))
        if p.is_file() and p.suffix in CORRUPTIBLE
    }
    return ws


def _ok(*args: str) -> None:
    code, output = _invoke(*args)
    assert code == 0, output


def _mined(work: Path) -> bytes:
    return (work / "mined" / "de-en.tsv.zst").read_bytes()


@dataclass(frozen=True)
class Corruption:
    """What was done to which file; `content` None deletes it."""

    target: str
    what: str
    content: bytes | None = field(repr=False)
    keep_neighbours: bool
    checked: bool = True  # False: a successful run may mine other pairs (values changed in place)


def _npy_header_size(data: bytes) -> int:
    """Bytes before the values of a version 1 `.npy` file (magic, version, header length, header)."""
    return 10 + int.from_bytes(data[8:10], "little")


def _only_free_values_changed(original: bytes, damaged: bytes) -> bool:
    """Whether `damaged` is still JSON of the same shape that differs only in FREE_VALUES (same types)."""
    try:
        old, new = _leaves(json.loads(original)), _leaves(json.loads(damaged))
    except ValueError:
        return False
    changed = [path for path in old if path not in new or old[path] != new[path]]
    return old.keys() == new.keys() and all(
        FREE_VALUES.fullmatch(path) and type(old[path]) is type(new[path]) for path in changed
    )


def _leaves(data: Any) -> dict[str, Any]:
    """Every scalar of a JSON document by its path (``a/0/b``)."""
    return {
        "/".join(map(str, path)): value
        for path in _json_paths(data)
        if not isinstance(value := _get(data, path), (dict, list))
    }


def _json_paths(data: Any, path: tuple = ()) -> list[tuple]:
    """Every place in a JSON document (keys of dicts, indexes of lists), outermost first."""
    found = [path] if path else []
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, value in items:
        found += _json_paths(value, (*path, key))
    return found


def _name_paths(data: Any) -> list[tuple]:
    """Places holding a file or language name: a string under a name key, or a key of "checksums"."""
    found = []
    for path in _json_paths(data):
        value = _get(data, path)
        if isinstance(value, str) and path[-1] in NAME_KEYS:
            found.append(path)
        elif len(path) >= 2 and path[-2] == "checksums":
            found.append((*path, None))  # None: the key itself
    return found


def _get(data: Any, path: tuple) -> Any:
    for key in path:
        data = data[key]
    return data


def _set(data: Any, path: tuple, value: Any) -> None:
    _get(data, path[:-1])[path[-1]] = value


def _rename_key(data: Any, path: tuple, new: str) -> None:
    parent = _get(data, path[:-1])
    parent[new] = parent.pop(path[-1])


def _escapes(target: str, name: str) -> list[str]:
    """Names that leave the target's folder for the sentinel beside the workspace, or for other places."""
    up = "../" * (target.count("/") + 1)  # from the target's folder to the folder holding the workspace
    return [f"{up}sentinel/{name}", "SENTINEL/" + name, "..", "../" + name, f"sub/{name}", "/", "", "."]


@st.composite
def corruptions(draw, files: dict[str, bytes]) -> Corruption:
    kind = draw(st.sampled_from(["truncate", "flip", "delete", "retype", "drop key", "rename"]))
    targets = (
        sorted(files)
        if kind in ("truncate", "flip", "delete")
        else sorted(p for p in files if p.endswith(".json"))
    )
    target = draw(st.sampled_from(targets))
    original = files[target]
    keep = "/.neighbours/" in target or draw(st.booleans())
    if kind == "truncate":
        at = draw(st.integers(0, len(original) - 1))
        return Corruption(target, f"truncate at {at}", original[:at], keep)
    if kind == "flip":
        data = bytearray(original)
        places = draw(st.lists(st.integers(0, len(original) - 1), min_size=1, max_size=4, unique=True))
        for place in places:
            data[place] ^= draw(st.integers(1, 255))
        # vector values changed in place are not detected (docs/failure-modes.md: that would cost a pass
        # over every vector on every command); such damage must still never be a traceback
        in_values = target.endswith(".npy") and max(places) >= _npy_header_size(original)
        edited = target.endswith(".json") and _only_free_values_changed(original, bytes(data))
        return Corruption(
            target, f"flip bytes {places}", bytes(data), keep, checked=not (in_values or edited)
        )
    if kind == "delete":
        return Corruption(target, "delete", None, keep)
    data = json.loads(original)
    if kind == "rename" and _name_paths(data):
        path = draw(st.sampled_from(_name_paths(data)))
        old = path[-2] if path[-1] is None else _get(data, path)
        new = draw(st.sampled_from(_escapes(target, old)))
        if path[-1] is None:
            _rename_key(data, path[:-1], new)
        else:
            _set(data, path, new)
        what = f"{'/'.join(map(str, path))} = {new!r}"
    else:
        path = draw(st.sampled_from(_json_paths(data)))
        if kind == "drop key" and isinstance(path[-1], str):
            del _get(data, path[:-1])[path[-1]]
            what = f"drop {'/'.join(map(str, path))}"
        else:
            old = _get(data, path)
            value = draw(st.sampled_from([v for v in WRONG_TYPES if _json_type(v) != _json_type(old)]))
            _set(data, path, value)
            what = f"{'/'.join(map(str, path))} = {value!r}"
    return Corruption(target, what, json.dumps(data, indent=2).encode(), keep)


def _json_type(value: Any) -> str:
    """JSON's type of a value: one number type, bool apart."""
    return "number" if type(value) in (int, float) else type(value).__name__


def _snapshot(root: Path, skip: Path) -> dict[str, bytes]:
    """Every file under `root` but those under `skip`, with its bytes."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and skip not in p.parents
    }


class _PathWatch:
    """An audit hook: records every path under `fence` but outside `allowed` that is opened, listed,
    renamed or removed while armed. Hooks cannot be removed, so one is installed and armed per case."""

    def __init__(self) -> None:
        self.fence: str | None = None
        self.allowed = ""
        self.seen: list[str] = []

    def arm(self, fence: Path, allowed: Path) -> None:
        self.fence, self.allowed, self.seen = str(fence) + os.sep, str(allowed) + os.sep, []

    def __call__(self, event: str, args: tuple) -> None:
        if self.fence is None or not event.startswith(("open", "os.", "shutil.")):
            return
        for arg in args:
            if isinstance(arg, (str, bytes, os.PathLike)):
                path = os.path.normpath(os.path.abspath(os.fsdecode(arg))) + os.sep
                if path.startswith(self.fence) and not path.startswith(self.allowed):
                    self.seen.append(f"{event} {path[:-1]}")


_watch = _PathWatch()


def _run_case(ws: Pristine, corruption: Corruption) -> list[str]:
    """Copy, damage, run every command; the problems found (empty when all is well)."""
    case = Path(tempfile.mkdtemp(dir=ws.root, prefix="case-"))
    try:
        return _damage_and_run(ws, case, corruption)
    finally:
        shutil.rmtree(case)


def _damage_and_run(ws: Pristine, case: Path, corruption: Corruption) -> list[str]:
    work, sentinel = case / "work", case / "sentinel"
    shutil.copytree(ws.work, work)
    target = work / corruption.target
    shutil.copytree(target.parent, sentinel)  # what a name pointing out of the folder would reach
    if not corruption.keep_neighbours:
        shutil.rmtree(work / "mined" / ".neighbours")
    if corruption.content is None:
        target.unlink()
    else:
        content = corruption.content.replace(b"SENTINEL", str(sentinel).encode())
        target.write_bytes(content)
    before = _snapshot(ws.root, work), _snapshot(ws.model, ws.model)
    problems = []
    _watch.arm(case, work)
    try:
        for args in ws.commands():
            code, output = _invoke(*args, "-w", str(work))
            problems += _judge(args, code, output, work, ws, corruption)
    finally:
        _watch.fence = None
    problems += [f"touched outside the workspace: {seen}" for seen in _watch.seen[:3]]
    if (_snapshot(ws.root, work), _snapshot(ws.model, ws.model)) != before:
        problems.append("a file outside the workspace copy was created, changed or deleted")
    return problems


def _invoke(*args: str) -> tuple[int, str]:
    """`bitextmine ARGS...` in this process: (exit code, output and the traceback of an uncaught exception,
    which the test runner catches)."""
    from bitextmine.cli import app

    result = CliRunner().invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        return result.exit_code, result.output + "".join(traceback.format_exception(*result.exc_info))
    return result.exit_code, result.output


def _judge(
    args: list[str], code: int, output: str, work: Path, ws: Pristine, corruption: Corruption
) -> list[str]:
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    where = f"`bitextmine {' '.join(args)}` after {corruption}"
    if "Traceback" in output or code not in (0, 1) or (code == 1 and len(errors) != 1):
        return [f"{where}: exit {code}, {len(errors)} error lines:\n{output[-3000:]}"]
    if code == 0 and args[0] == "mine" and corruption.checked and _mined(work) != ws.reference:
        return [f"{where}: mined other pairs than the uncorrupted workspace"]
    return []


@settings(
    **FUZZ,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: a failing case is one small corruption already
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_a_damaged_workspace_gives_one_line_errors_or_the_right_pairs(pristine, data):
    corruption = data.draw(corruptions(pristine.files), label="corruption")
    assert not (problems := _run_case(pristine, corruption)), "\n".join(problems)


def _json_edit(path: tuple, value: Any) -> Callable[[bytes], bytes]:
    def edit(original: bytes) -> bytes:
        data = json.loads(original)
        _set(data, path, value)
        return json.dumps(data).encode()

    return edit


def _first_id(value: int) -> Callable[[bytes], bytes]:
    def edit(original: bytes) -> bytes:
        lists = np.load(io.BytesIO(original))
        lists["id"][0, 0] = value
        out = io.BytesIO()
        np.save(out, lists)
        return out.getvalue()

    return edit


def _half(original: bytes) -> bytes:
    return original[: len(original) // 2]


# What this test found (each was a traceback, other pairs mined without an error, or a read outside the
# workspace), kept as fixed cases: (file, damage, keep the saved neighbour lists).
FOUND: dict[str, tuple[str, Callable[[bytes], bytes], bool]] = {
    "text shard, a letter changed": (
        "corpora/de/shard-00000.tsv",
        lambda b: b.replace(b"n0x0\n", b"n0x9\n"),
        True,
    ),
    "text shard, invalid UTF-8": ("corpora/en/shard-00001.tsv", lambda b: b[:-2] + b"\xff\n", False),
    "text shard, cut short": ("corpora/de/shard-00001.tsv", _half, False),
    "neighbour list, cut short": ("mined/.neighbours/*/bwd-*.npy", _half, True),
    "neighbour list, header garbled": (
        "mined/.neighbours/*/fwd-*.npy",
        lambda b: b[:20] + b"X" + b[21:],
        True,
    ),
    "neighbour list, an id out of range": ("mined/.neighbours/*/fwd-*.npy", _first_id(10**6), True),
    "shard record, a count an object": ("emb/de/shard-00001.json", _json_edit(("truncated",), {}), True),
    "embeddings manifest, the model name a number": (
        "emb/de/manifest.json",
        _json_edit(("model", "name"), 7),
        False,
    ),
    "corpus manifest, a count null": (
        "corpora/en/manifest.json",
        _json_edit(("counts", "duplicates"), None),
        True,
    ),
    "corpus manifest, a shard named outside its folder": (
        "corpora/de/manifest.json",
        _json_edit(("shards", 0, "name"), "../../../sentinel/shard-00000.tsv"),
        True,
    ),
    "corpus manifest, a shard at another row": (
        "corpora/de/manifest.json",
        _json_edit(("shards", 1, "first_row"), 0),
        True,
    ),
    "corpus manifest, a row past int64": (
        "corpora/de/manifest.json",
        _json_edit(("shards", 0, "first_row"), 2**70),
        True,
    ),
    "index record, a shard file an object": ("index/de.json", _json_edit(("shards", 0, "file"), {}), False),
    "index record, shards overlapping": ("index/de.json", _json_edit(("shards", 1, "start"), 0), False),
}


@pytest.mark.parametrize("case", FOUND)
def test_what_the_fuzz_test_found(pristine, case):
    pattern, damage, keep = FOUND[case]
    [target] = fnmatch.filter(pristine.files, pattern)
    corruption = Corruption(target, case, damage(pristine.files[target]), keep)
    assert not (problems := _run_case(pristine, corruption)), "\n".join(problems)


def test_a_damaged_text_shard_is_named_and_mended_as_the_error_says(pristine, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(pristine.work, work)
    shard = work / "corpora" / "de" / "shard-00000.tsv"
    shard.write_bytes(shard.read_bytes().replace(b"n0x0\n", b"n0x9\n"))
    mine, encode_de = pristine.commands()[:2]
    code, output = _invoke(*mine, "-w", str(work))
    message = " ".join(output.split())
    manifest = work / "corpora" / "de" / "manifest.json"
    assert code == 1 and f"{shard}: damaged text shard" in message and f"delete {manifest}" in message, output
    manifest.unlink()
    code, output = _invoke(*encode_de, "-w", str(work))
    assert code == 0 and "0 encoded now" in " ".join(output.split()), output  # the embeddings are kept
    code, output = _invoke(*mine, "-w", str(work))
    assert code == 0 and _mined(work) == pristine.reference, output


# ---------------------------------------------------------------------------------------------------
# the Python API's options: random MineOptions and filters on the finished workspace

# (valid values, invalid values) of each MineOptions field drawn; the rest keep their defaults
OPTION_VALUES: dict[str, tuple[list[Any], list[Any]]] = {
    "k": ([1, 3, 4, 4096], [0, -1, 4097, 1.5, True, "4", None]),
    "margin": (["ratio", "distance", "csls", "absolute"], ["Ratio", "", None]),
    "strategy": (["max", "intersect", "fwd", "bwd"], ["min", None]),
    "threshold": ([None, -1.0, 0.5, 1.01, 3, "auto"], [float("nan"), float("inf"), "abc", "auto:x", True]),
    "nprobe": ([None, 1, 50], [0, -3, 2.0]),
    "max_codes": ([None, 1, 10**6], [0, float("nan")]),
    "block_rows": ([None, 1, 7], [0, -1]),
    "job_rows": ([1, 5, 10**6], [0, None, 2.5]),
    "device": (["auto", "cpu"], ["gpu", "cuda:99", "", 0]),
}
# (valid, invalid) --filter items; `parse_filters` reads them
FILTER_ITEMS = (
    [
        "score-max=1.2",
        "score-max=-5",
        "min-chars=3",
        "max-chars=0",
        "length-ratio=1",
        "letters",
        "dedup=off",
        "copies=0.5",
        "copies=1",
        "language=0",
    ],
    [
        "score-max=nan",
        "score-max=inf",
        "length-ratio=nan",
        "length-ratio=0.5",
        "copies=nan",
        "copies=0",
        "language=2",
        "min-chars=-1",
        "max-chars=1.5",
        "lang",
        "score-max",
    ],
)


@st.composite
def mine_settings(draw) -> tuple[dict[str, Any], list[str], bool]:
    """Drawn MineOptions keyword arguments and --filter items, and whether all of them are valid."""
    options, valid = {}, True
    for name in draw(st.lists(st.sampled_from(sorted(OPTION_VALUES)), unique=True, max_size=4)):
        good = draw(st.booleans())
        options[name] = draw(st.sampled_from(OPTION_VALUES[name][0 if good else 1]))
        valid &= good
    items = []
    for good in draw(st.lists(st.booleans(), max_size=3)):
        items.append(draw(st.sampled_from(FILTER_ITEMS[0 if good else 1])))
        valid &= good
    return options, items, valid


@pytest.fixture(scope="module")
def options_work(pristine, tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("options") / "work"
    shutil.copytree(pristine.work, work)
    return work


@settings(**FUZZ, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(drawn=mine_settings())
def test_random_api_options_give_a_result_or_one_line_error_before_any_work(options_work, drawn):
    """`MineOptions(k=0)` wrote an empty output, `threshold=nan` kept 0 pairs, `score-max=nan` dropped
    every pair, `k=-1` failed in a job with numpy's "negative dimensions"."""
    import bitextmine as bm

    given_options, items, valid = drawn
    stats = options_work / "mined" / "de-en.stats.json"
    stats.unlink(missing_ok=True)
    try:
        options = bm.MineOptions(**given_options, filters=bm.parse_filters("none", items))
    except (ValueError, bm.BitextmineError) as error:
        assert not valid and "\n" not in str(error), f"{drawn}: {error}"
        return
    assert valid, f"{drawn}: accepted"
    try:
        summary = bm.mine(bm.Workspace(options_work), "de", "en", options)
    except bm.BitextmineError as error:  # a valid setting may still not fit the workspace (auto:x-y)
        assert "\n" not in str(error) and not stats.exists(), f"{drawn}: {error}"
        return
    assert summary.counts["one_to_one_candidates"] > 0 and stats.exists(), drawn
