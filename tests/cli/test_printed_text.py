"""What the CLI prints is the text as given: square brackets kept (rich markup is off), lines not
wrapped in a pipe, help reflowed at 80 columns with nothing cut off, no line that says nothing."""

from __future__ import annotations

import itertools
import re
import warnings

import pytest
import typer
import typer.main
from rich.text import Text
from typer.testing import CliRunner

from bitextmine.cli import app
from bitextmine.cli.app import out, user_errors
from bitextmine.cli.output import ProgressDisplay, fields_table
from bitextmine.errors import BitextmineError, BitextmineWarning
from tests.helpers import COMMANDS, run

runner = CliRunner()

HELPS = [[], ["eval"], *COMMANDS]  # the app and its groups, and every command


@pytest.mark.integration  # the model loads before the input is read: seconds
def test_an_error_naming_a_file_with_brackets_names_it_whole(tmp_path, tiny_model_dir):
    model = str(tiny_model_dir("bert"))  # a real one: a missing model is reported first, after a hub lookup
    code, output = run(
        "encode", str(tmp_path / "news[old].txt"), "-l", "de", "-m", model, "-w", str(tmp_path)
    )
    assert code == 1 and output == f"error: {tmp_path / 'news[old].txt'}: no such file\n", output


def test_errors_warnings_tables_and_progress_keep_their_brackets(capsys):
    with pytest.raises(typer.Exit), user_errors():
        warnings.warn(BitextmineWarning("x[bold].txt: 2 empty lines"), stacklevel=1)
        raise BitextmineError("parquet output needs pyarrow: pip install 'bitextmine[parquet]'")
    assert capsys.readouterr().err == (
        "warning: x[bold].txt: 2 empty lines\n"
        "error: parquet output needs pyarrow: pip install 'bitextmine[parquet]'\n"
    )
    out.print(fields_table("inputs [de]", [("file", "news[old].txt")]))
    printed = capsys.readouterr().out
    assert "inputs [de]" in printed and "news[old].txt" in printed
    with ProgressDisplay("encoding [de]", 1) as progress:
        progress.advance(1)
    assert capsys.readouterr().err.startswith("encoding [de]: 1/1 (100%)")


@pytest.mark.integration  # an encoded workspace: seconds
def test_a_rerun_that_finds_the_work_done_prints_no_empty_progress(workspace, tiny_model_dir):
    work, _ = workspace  # encoded: a rerun finds every shard done
    args = [
        "encode",
        str(work.parent / "de.txt"),
        "-l",
        "de",
        "-w",
        str(work),
        "-m",
        str(tiny_model_dir("bert")),
    ]
    rerun = runner.invoke(app, [*args, "--shard-size", "7", "--lid", "off"])  # as `workspace` encoded
    assert rerun.exit_code == 0 and "(0 encoded now)" in rerun.stdout, rerun.output
    assert "encoding" not in rerun.stderr, rerun.stderr  # was `encoding: 0/0 (0%)`


@pytest.mark.integration  # an encoded workspace: seconds
def test_summaries_in_a_pipe_are_not_wrapped(indexed_workspace):
    work, shared = indexed_workspace  # CliRunner's stdout is not a terminal
    indexed = runner.invoke(app, ["index", "de", "-w", str(work)], env={"COLUMNS": "80"})
    mined = runner.invoke(
        app, ["mine", "de", "en", "-w", str(work), "--filters", "none"], env={"COLUMNS": "80"}
    )
    assert indexed.exit_code == 0 and mined.exit_code == 0, indexed.output + mined.output
    (line,) = indexed.stdout.splitlines()
    assert line.startswith("index de: ") and line.endswith(str(work / "index" / "de.json")), line
    assert mined.stdout.splitlines()[-1].startswith("de-en: 25 x 22 sentences")
    assert str(work / "mined" / "de-en.tsv.zst") in mined.stdout.splitlines()[-1]
    rows = [line for line in mined.stdout.splitlines() if line.startswith("│")]
    one_line_a_pair = all(any(f"│ {s} " in row for s in shared) for row in rows)
    assert rows and one_line_a_pair, mined.stdout


@pytest.mark.integration  # an encoded workspace: seconds
def test_the_index_line_names_only_the_settings_an_index_has(indexed_workspace):
    work, _ = indexed_workspace
    exact = runner.invoke(app, ["index", "de", "-w", str(work)])
    ivf = runner.invoke(app, ["index", "en", "-w", str(work), "--factory", "IVF2,Flat"])
    assert exact.exit_code == 0 and ivf.exit_code == 0, exact.output + ivf.output
    assert "None" not in exact.stdout and "nprobe" not in exact.stdout and "fetch" not in exact.stdout
    assert exact.stdout.startswith("index de: Flat, 25 vectors, recall@4 1.0000")
    # nprobe is tuned to the recall target: 1 or 2 of 2 lists, as k-means on 22 points falls
    assert re.match(r"index en: IVF2,Flat, 22 vectors, nprobe [12], fetch 4, recall@4 ", ivf.stdout), (
        ivf.stdout
    )
    assert ivf.stdout.rstrip().endswith(str(work / "index" / "en.faiss"))


@pytest.mark.parametrize("command", HELPS, ids=lambda command: " ".join(command) or "bitextmine")
def test_help_at_80_columns_reflows_and_cuts_nothing(command):
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(map(len, lines)) <= 80
    assert not [line for line in lines if "…" in line]  # a default, an env var, an option name cut short
    assert not [line for line in lines if re.search(r"<[^<>\s]*\|[^<>\s]*(\s|$)", line)]  # <a|b|c> folded
    usage = next(i for i, line in enumerate(lines) if "Usage:" in line)
    panel = next(i for i, line in enumerate(lines) if "─" in line)
    description = [line.strip() for line in lines[usage + 1 : panel]]  # paragraphs between blank lines
    for line, after in itertools.pairwise(description):
        assert not line or not after or len(line) + 1 + len(after.split()[0]) > 78, (line, after)


@pytest.mark.parametrize("command", HELPS, ids=lambda command: " ".join(command) or "bitextmine")
def test_help_names_what_options_take_in_words(command):
    """typer shows a parameter that has no metavar as its Python type: <bool>, <list[str]>, <int range>."""
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert re.findall(r"<[a-z][\w ,|\[\]]*>", result.output) == []
    assert re.search(r"--help +Show this", result.output)  # a flag takes nothing


def test_every_help_text_keeps_its_brackets():
    """typer renders help as rich markup, where an unescaped `[word]` is a style tag and vanishes."""
    texts = [
        text
        for command in _commands()
        for text in (command.help, *(getattr(param, "help", None) for param in command.params))
        if text
    ]
    assert [text for text in texts if Text.from_markup(text).plain != text.replace("\\[", "[")] == []


def _commands(command=None) -> list:
    """The app's command group and every command and group below it."""
    command = command or typer.main.get_command(app)
    return [command, *(c for sub in getattr(command, "commands", {}).values() for c in _commands(sub))]
