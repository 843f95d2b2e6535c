"""A LASER user's command line (source/mine_bitexts.py's flags) is answered with the equivalent here, as a
usage error (status 2); every command that computes takes --threads."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from bitextmine.cli import app
from tests.helpers import COMMANDS

runner = CliRunner()


def usage_error(*args: str) -> str:
    """The one-line message of a usage error (status 2), unwrapped from its box."""
    result = runner.invoke(app, list(args))
    assert result.exit_code == 2, result.output
    return " ".join(result.stderr.replace("│", " ").replace("╰", " ").replace("─", " ").split())


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["mine-files", "a", "b", "--src-lang", "de"], "for LASER's --src-lang, use --src"),
        (["mine-files", "a", "b", "--trg-lang=en"], "for LASER's --trg-lang, use --tgt"),
        (["score", "a", "b", "--trg-lang", "en"], "use --tgt"),
        (["mine", "de", "en", "--src-lang", "de"], "use SRC, the first argument"),
        (["encode", "x", "--src-lang", "de"], "use --lang"),
        (["mine-files", "a", "b", "--mode", "score"], "use the `score` command"),
        (["mine-files", "a", "b", "--mode=search"], "use --strategy fwd"),
        (["mine-files", "a", "b", "--mode", "mine"], "drop it: `mine-files` mines"),
        (["mine-files", "a", "b", "--retrieval", "max"], "use --strategy"),
        (["mine-files", "a", "b", "--neighborhood", "4"], "use -k"),
        (["mine-files", "a", "b", "--unify"], "`encode --dedup`"),
        (["mine-files", "a", "b", "--gpu"], "use --device cuda"),
        (["--gpu", "mine", "de", "en"], "use --device cuda"),
        (["mine-files", "a", "b", "--src-embeddings", "x.bin"], "`encode FILE --lang LANG --embeddings"),
        (["mine-files", "a", "b", "--dim", "1024"], "--embeddings VECS --dim N"),
        (["mine-files", "a", "b", "--encoding", "latin-1"], "read as UTF-8"),
    ],
)
def test_a_laser_flag_names_its_equivalent(args, hint):
    message = usage_error(*args)
    assert hint in message and "LASER's" in message, message
    assert "Possible options" not in message  # the hint, not guesses by spelling


def test_an_unknown_flag_not_laser_s_keeps_click_s_guesses():
    message = usage_error("mine-files", "a", "b", "--sorc", "de")
    assert "No such option: --sorc" in message and "--src" in message and "LASER" not in message


COMPUTING = COMMANDS  # each encodes, searches or trains


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)  # each one computes
def test_every_command_that_computes_takes_threads(command):
    result = runner.invoke(app, [*command, "--help"])
    assert result.exit_code == 0 and "--threads" in result.stdout, result.output


@pytest.mark.integration  # an indexed workspace, the CLI
def test_index_threads_bounds_faiss(indexed_workspace):
    import faiss

    work, _ = indexed_workspace
    before = faiss.omp_get_max_threads()
    try:
        result = runner.invoke(app, ["index", "de", "-w", str(work), "--threads", "1"])
        assert result.exit_code == 0, result.output
        assert faiss.omp_get_max_threads() == 1
    finally:
        faiss.omp_set_num_threads(before)
