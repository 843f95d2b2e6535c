"""Cheap checks before expensive work: a missing model or tokenizer, a language code nobody knows and a
language the workspace lacks fail in one line before any text shard is built or any sentence encoded."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.helpers import run, sentences

pytestmark = pytest.mark.integration


@pytest.fixture
def text(tmp_path):
    path = tmp_path / "x.txt"
    path.write_text("\n".join(sentences(6, seed=0)) + "\n")
    return path


@pytest.fixture
def no_tokenizer(tmp_path, tiny_model_dir):
    """The tiny model's dir without its tokenizer files."""
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir("bert"), model)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (model / name).unlink()
    return model


def _mine_files(text, model, work, *options) -> tuple[int, str]:
    args = ["--src", "de", "--tgt", "en", "--lid", "off", "-o", work.parent / "pairs.tsv", "-m", model]
    return run("mine-files", str(text), str(text), *map(str, [*args, "-w", work, *options]))


@pytest.mark.parametrize("model", ["missing", "no tokenizer"])
def test_a_bad_model_fails_before_the_text_shards_are_built(tmp_path, text, no_tokenizer, model):
    model_dir = tmp_path / "missing" if model == "missing" else no_tokenizer
    work = tmp_path / "w"
    code, output = run("encode", str(text), "-l", "de", "--lid", "off", "-m", str(model_dir), "-w", str(work))
    assert code == 1 and output.startswith("error: ") and str(model_dir) in output, output
    assert not (work / "corpora").exists()
    code, output = _mine_files(text, model_dir, work)
    assert code == 1 and str(model_dir) in output, output
    assert not (work / "corpora").exists()


def test_an_unknown_language_code_is_an_error_unless_forced(tmp_path, text, tiny_model_dir):
    model, work = str(tiny_model_dir("bert")), tmp_path / "w"
    code, output = run("encode", str(text), "-l", "german", "-m", model, "-w", str(work))
    assert code == 1 and "unknown language code 'german'" in output and "--force-lang" in output, output
    assert len(output.splitlines()) == 1 and not work.exists()
    code, output = _mine_files(text, model, work, "--src", "deutsch")
    assert code == 1 and "unknown language code 'deutsch'" in output and not work.exists(), output

    for lang in (["deu"], ["zho_simpl"], ["german", "--force-lang"]):
        code, output = run("encode", str(text), "-l", *lang, "--lid", "off", "-m", model, "-w", str(work))
        assert code == 0, output


def test_mine_names_the_languages_the_workspace_has(workspace):
    work, _ = workspace
    code, output = run("mine", "deu", "eng", "-w", str(work))
    assert code == 1 and "no embeddings for 'deu'" in output and "(its languages: de, en)" in output, output


def test_a_missing_input_fails_before_the_model_loads_and_a_pipe_is_not_read(tmp_path):
    """No model named here exists: the missing file is reported, not the model; a FIFO given as input is
    not opened by the check (its writer would lose what it sent)."""
    from bitextmine.text.reader import check_readable

    code, output = run("encode", str(tmp_path / "gone.txt"), "-l", "de", "-m", str(tmp_path / "no-model"))
    assert code == 1 and output == f"error: {tmp_path / 'gone.txt'}: no such file\n", output
    code, output = run("encode", str(tmp_path), "-l", "de", "-m", str(tmp_path / "no-model"))
    assert code == 1 and "is a directory, not a corpus file" in output, output
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    check_readable(str(fifo))  # returns at once: opening a FIFO for reading would block with no writer
