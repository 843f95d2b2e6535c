"""Names that are not UTF-8 (a file name's bytes, as Python holds them: surrogates) and text that stdout's
encoding cannot represent are written and printed without an error."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bitextmine.cli import app
from bitextmine.files import json_text, read_json, write_json
from bitextmine.workspace.locks import file_lock
from tests.helpers import read_mined, run


def not_utf8(name: bytes) -> str:
    return os.fsdecode(name)


def test_the_lock_holder_note_keeps_an_argument_that_is_not_utf8(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["bitextmine", "encode", not_utf8(b"en\xff.txt")])
    with file_lock(tmp_path / "x.lock", exclusive=True):
        assert (tmp_path / "x.lock").read_bytes().endswith(b": bitextmine encode en\xff.txt\n")


def test_json_escapes_what_the_encoding_cannot_hold_and_reads_back_the_same(tmp_path):
    data = {"path": not_utf8(b"/data/en\xff.txt"), "text": "fährt"}
    write_json(tmp_path / "a.json", data)
    assert read_json(tmp_path / "a.json") == data
    assert json_text(data) == '{"path": "/data/en\\udcff.txt", "text": "fährt"}'
    assert json_text(data, "ascii") == '{"path": "/data/en\\udcff.txt", "text": "f\\u00e4hrt"}'


@pytest.fixture(scope="module")
def odd_names(tmp_path_factory, tiny_model_dir: Callable[[str], Path]) -> tuple[Path, Path]:
    """A workspace whose en input has a name that is not UTF-8, both languages indexed."""
    root = tmp_path_factory.mktemp("odd")
    work = root / "W"
    lines = [f"der Hund schläft n{i}" for i in range(12)]
    model = str(tiny_model_dir("bert"))
    for lang, name in (("de", "de.txt"), ("en", not_utf8(b"en\xff.txt"))):
        (root / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
        code, output = run(
            "encode", "--lid", "off", str(root / name), "-l", lang, "-m", model, "-w", str(work)
        )
        assert code == 0, output
    for lang in ("de", "en"):
        code, output = run("index", lang, "-w", str(work), "--json", str(root / not_utf8(b"i\xfa.json")))
        assert code == 0, output
    return root, work


def test_a_workspace_folder_whose_name_is_not_utf8_is_a_usage_error(tmp_path):
    code, output = run("index", "de", "-w", str(tmp_path / not_utf8(b"W\xf1")))
    flat = " ".join(output.replace("│", " ").split())  # the usage box wraps the message where the path ends
    assert code == 2 and "UTF-8 name" in flat and "--workdir" in flat and "Traceback" not in flat, output


@pytest.mark.integration
def test_mine_writes_and_names_outputs_that_are_not_utf8(odd_names):
    root, work = odd_names
    pairs, summary = root / not_utf8(b"\xff.tsv.zst"), root / not_utf8(b"\xfe.json")
    code, output = run(
        "mine", "de", "en", "-w", str(work), "-o", str(pairs), "--json", str(summary), "--filters", "none"
    )
    assert code == 0 and "Traceback" not in output, output
    assert json.loads(summary.read_text())["output"]["path"] == str(pairs)
    en_files = {row[4].rsplit(":", 1)[0] for row in read_mined(pairs)}
    assert en_files == {f"{root}/en\\xff.txt"}  # the name's bytes as escapes: the file stays UTF-8


@pytest.mark.integration
def test_an_ascii_stdout_gets_the_pairs_table_with_escapes(odd_names):
    _, work = odd_names
    result = CliRunner(charset="ascii").invoke(
        app, ["mine", "de", "en", "-w", str(work), "--filters", "none"]
    )
    assert result.exit_code == 0, result.output
    assert "schl\\xe4ft" in result.output
