"""`mine-files A B` mines two text files in one command (encode, index, mine in a workspace it
keeps), as the five commands do by hand; a rerun reuses the workspace; bad options fail before any work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import bitextmine
from bitextmine.encoder.encoder import SentenceEncoder
from bitextmine.files import STDOUT_FILE
from bitextmine.steps.mine_files import default_workdir
from tests.helpers import REPO, run, sentences

SHARED = sentences(10, seed=0)
CORPORA = {"de": SHARED + sentences(15, seed=1), "en": sentences(12, seed=2) + SHARED}


@pytest.fixture
def texts(tmp_path) -> dict[str, Path]:
    paths = {lang: tmp_path / f"{lang}.txt" for lang in CORPORA}
    for lang, path in paths.items():
        path.write_text("\n".join(CORPORA[lang]) + "\n")
    return paths


def mine_files(texts: dict[str, Path], model: Path, output: Path, *options: str) -> tuple[int, str]:
    """mine-files on the word salad of CORPORA, with --lid off unless `options` name --lid."""
    files = (str(texts["de"]), str(texts["en"]))
    lid = [] if "--lid" in options else ["--lid", "off"]
    return run(
        "mine-files",
        *files,
        "--src",
        "de",
        "--tgt",
        "en",
        "-m",
        str(model),
        "-o",
        str(output),
        *lid,
        *options,
    )


def test_default_workdir_sits_beside_the_output_named_after_it():
    assert default_workdir(Path("out/pairs.jsonl")) == Path("out/pairs-work")
    assert default_workdir(Path("out/de-en.tsv.zst")) == Path("out/de-en-work")
    assert default_workdir(Path("pairs.out"), "parquet") == Path("pairs.out-work")


def test_default_workdir_beside_a_stream_is_in_the_current_folder(tmp_path):
    """`-o /dev/stdout` made /dev/stdout-work, a whole workspace on devtmpfs."""
    fifo = tmp_path / "pairs.fifo"
    os.mkfifo(fifo)
    for stream in (fifo, STDOUT_FILE):  # pytest's stdout is a file: /dev/stdout is it, a stream here
        assert default_workdir(stream, "tsv", "de-en") == Path("de-en-work")


@pytest.mark.integration
def test_pairs_to_stdout_alone_the_summary_to_stderr_and_the_workspace_in_the_current_folder(
    tmp_path, texts, tiny_model_dir
):
    files = [str(texts["de"]), str(texts["en"])]
    command = [*files, "--src", "de", "--tgt", "en", "-m", str(tiny_model_dir("bert")), "--lid", "off"]
    for output in ("-", "/dev/stdout"):
        done = subprocess.run(
            [sys.executable, "-m", "bitextmine", "mine-files", *command, "-o", output, "--format", "tsv"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines and all(len(line.split("\t")) == 5 for line in lines), done.stdout
        summary = " ".join(done.stderr.split())
        assert f"{len(lines)} pairs -> /dev/stdout" in summary and "workspace de-en-work kept" in summary
        assert (tmp_path / "de-en-work" / "mined" / "de-en.stats.json").is_file()


@pytest.mark.integration
def test_two_files_in_one_command_mine_what_the_five_commands_mine_and_a_rerun_reuses(
    tmp_path, texts, tiny_model_dir
):
    model = tiny_model_dir("bert")
    by_hand = tmp_path / "by-hand"
    for lang, path in texts.items():
        assert (
            run("encode", str(path), "-l", lang, "--lid", "off", "-m", str(model), "-w", str(by_hand))[0] == 0
        )
    for lang in texts:
        assert run("index", lang, "-w", str(by_hand))[0] == 0
    expected = tmp_path / "expected.jsonl"
    assert run("mine", "de", "en", "-w", str(by_hand), "--threshold", "1.0", "-o", str(expected))[0] == 0

    output = tmp_path / "pairs.jsonl"
    code, printed = mine_files(texts, model, output, "--threshold", "1.0")
    assert code == 0, printed
    assert output.read_bytes() == expected.read_bytes()
    work = tmp_path / "pairs-work"
    assert f"workspace {work} kept" in " ".join(printed.split())
    made = {path: path.stat().st_mtime_ns for path in (work / "emb").rglob("*.npy")}
    index_records = {lang: (work / "index" / f"{lang}.json").read_text() for lang in texts}

    code, printed = mine_files(texts, model, tmp_path / "pairs.parquet")  # the same workspace: pairs-work
    assert code == 0, printed
    assert "reusing 1 text shard(s), 25 sentences of 'de'" in printed and "index en: reused" in printed
    assert "no threshold: the" in printed  # mine's summary, with its note on the missing threshold
    assert {path: path.stat().st_mtime_ns for path in made} == made
    assert {lang: (work / "index" / f"{lang}.json").read_text() for lang in texts} == index_records


@pytest.mark.integration
def test_a_named_workdir_and_the_json_of_the_steps(tmp_path, texts, tiny_model_dir):
    report, work = tmp_path / "r.json", tmp_path / "w"
    code, printed = mine_files(
        texts, tiny_model_dir("bert"), tmp_path / "p.tsv.zst", "-w", str(work), "--json", str(report)
    )
    assert code == 0, printed
    result = json.loads(report.read_text())
    assert result["workspace"] == str(work) and not (tmp_path / "p-work").exists()
    assert sorted(result["encoded"]) == ["de", "en"] and result["encoded"]["de"]["rows"] == 25
    assert result["indexed"]["de"]["factory"] == "Flat" and result["mined"]["counts"]["src_sentences"] == 25
    assert "indexing" not in printed  # an exact index: nothing built, no progress line


@pytest.mark.integration
def test_mine_files_identifies_languages_as_encode_does(tmp_path, texts, tiny_model_dir):
    report = tmp_path / "r.json"
    output = tmp_path / "p.tsv"
    code, printed = mine_files(
        texts, tiny_model_dir("bert"), output, "--lid", "reject", "--json", str(report)
    )
    assert code == 0, printed
    dropped = json.loads(report.read_text())["encoded"]["de"]["counts"]["wrong_language"]
    expected = len(CORPORA["de"]) - int(
        bitextmine.EncodeOptions().lid_filter("de").keeps(CORPORA["de"]).sum()
    )
    assert dropped == expected > 0  # English word salad under a German label


@pytest.mark.integration
def test_the_model_is_loaded_once_for_both_files_and_released_after(
    tmp_path, texts, tiny_model_dir, monkeypatch
):
    loads = []
    load = SentenceEncoder.load.__func__

    def counted(cls, name_or_path, **settings):
        loads.append(name_or_path)
        return load(cls, name_or_path, **settings)

    monkeypatch.setattr(SentenceEncoder, "load", classmethod(counted))
    model = tiny_model_dir("bert")
    assert mine_files(texts, model, tmp_path / "pairs.jsonl")[0] == 0
    assert loads == [str(model)]
    assert mine_files(texts, model, tmp_path / "pairs.parquet")[0] == 0  # the same workspace, a new load
    assert loads == [str(model)] * 2


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--threshold", "abc"], "--threshold must be a number, auto or auto:PAIR"),
        (["--src", "en"], "mine en en: the source and the target are one corpus"),
        (["-o", "{de}", "--format", "tsv"], "de.txt: the same file as"),
        (["-o", "{out}/pairs.csv"], "pairs.csv: cannot tell the output format from its name; pass --format"),
    ],
)
def test_bad_options_fail_before_any_work(tmp_path, texts, options, message):
    """No model is loaded and no workspace written: the model named here does not exist."""
    options = [o.format(de=texts["de"], out=tmp_path) for o in options]
    args = [str(texts["de"]), str(texts["en"]), "--src", "de", "--tgt", "en", "-m", str(tmp_path / "none")]
    code, printed = run("mine-files", *args, "-o", str(tmp_path / "pairs.jsonl"), *options)
    assert code == 1 and message in printed, printed
    assert [line for line in printed.splitlines() if line.startswith("error:")] == [printed.strip()]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["de.txt", "en.txt"]


def test_threshold_auto_without_a_calibration_fails_before_anything_is_encoded(
    tmp_path, texts, tiny_model_dir
):
    output = tmp_path / "pairs.jsonl"
    code, printed = mine_files(texts, tiny_model_dir("bert"), output, "--threshold", "auto")
    assert code == 1 and "no calibrated threshold for de-en" in printed, printed
    assert "bitextmine calibrate" in printed and "--threshold FLOAT" in printed
    workspace = default_workdir(output)
    assert not (workspace / "corpora").exists() and not (workspace / "emb").exists()


@pytest.mark.integration  # the CLI end to end
def test_threshold_auto_with_a_calibration_mines(tmp_path, texts, tiny_model_dir):
    """The calibration `calibrate` stores for the model serves mine-files' `auto`, resolved up front."""
    from bitextmine.calibration.thresholds import ThresholdRecord, store_threshold
    from bitextmine.steps.encode import loaded_encoder

    model = tiny_model_dir("bert")
    output = tmp_path / "pairs.jsonl"
    store = tmp_path / "thresholds.json"
    fingerprint = loaded_encoder(str(model)).get().fingerprint
    record = ThresholdRecord(
        fingerprint, str(model), "ratio", "de-en", 1.0, "dev", 100, 100, 100, "best F1", ""
    )
    store_threshold(store, record)
    code, printed = mine_files(texts, model, output, "--threshold", "auto", "--thresholds", str(store))
    assert code == 0, printed
    given = tmp_path / "given.jsonl"
    assert mine_files(texts, model, given, "--threshold", "1.0")[0] == 0
    assert output.read_text() and output.read_text() == given.read_text()
