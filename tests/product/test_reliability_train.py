"""`train` against itself and against models it cannot run: one run at a time per OUT (a second is
refused with the holder named), temporaries of killed runs removed, and models the packed forward cannot
take trained padded or refused in one line."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from bitextmine.train.loop import LOCK_FILE
from bitextmine.workspace.locks import file_lock
from tests.helpers import _tiny_tokenizer, run, toy_pairs

pytestmark = pytest.mark.integration  # the CLI end to end, with a model


@pytest.fixture
def pairs(tmp_path) -> Path:
    return toy_pairs(tmp_path, repeats=6)


def train(pairs: Path, base: Path, out: Path, *extra: str) -> tuple[int, str]:
    common = ["--max-steps", "2", "--max-tokens", "120", "--bf16", "off", "--device", "cpu"]
    return run("train", "--data", str(pairs), "--base", str(base), "--out", str(out), *common, *extra)


def one_line_error(code: int, output: str) -> str:
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert code == 1 and len(errors) == 1 and "Traceback" not in output, output
    return " ".join(output[output.index("error:") :].split())


def test_a_second_run_into_the_same_out_is_refused_naming_the_first(pairs, tiny_model_dir, tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    with file_lock(out / LOCK_FILE, exclusive=True):  # a run in progress (this process)
        message = one_line_error(*train(pairs, tiny_model_dir("bert"), out))
        assert f"in use by pid {os.getpid()}" in message
        assert f"cannot write {out} (another train run is writing it) until that run ends" in message
        assert not (out / "checkpoints").exists() and not (out / "train_log.jsonl").exists()
    code, output = train(pairs, tiny_model_dir("bert"), out)  # once it has ended
    assert code == 0, output


def test_temporaries_of_a_killed_run_are_removed_by_the_next(pairs, tiny_model_dir, tmp_path):
    out = tmp_path / "model"
    leftovers = [out / "checkpoints" / ".step-00000007.pt.tmp-4242-0a1b", out / ".train_log.jsonl.tmp-4242"]
    leftovers[0].parent.mkdir(parents=True)
    for path in leftovers:
        path.write_bytes(b"half")
    code, output = train(pairs, tiny_model_dir("bert"), out, "--checkpoint-every", "0")
    assert code == 0, output
    assert not any(path.exists() for path in leftovers)
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-00000002.pt"]


def _save(make_model: Callable[[int], torch.nn.Module], directory: Path) -> Path:
    """A model of `make_model(vocabulary size)` and its tokenizer (one instance: training one twice can
    give two sizes)."""
    tokenizer = _tiny_tokenizer("xlm-roberta")
    make_model(len(tokenizer)).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory) -> Path:
    """A decoder-only model without a pad token: the packed forward cannot run it, the padded one can."""
    from transformers import GPT2Config, GPT2Model

    def make(vocab: int) -> torch.nn.Module:
        return GPT2Model(GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=4, n_positions=64))

    return _save(make, tmp_path_factory.mktemp("gpt2"))


def test_a_model_that_cannot_be_packed_asks_for_padded_and_trains_with_it(pairs, gpt2_dir, tmp_path):
    message = one_line_error(*train(pairs, gpt2_dir, tmp_path / "a"))
    assert "not a 'gpt2' model: pass --padded" in message
    for objective in ("contrastive", "xtr"):
        code, output = train(pairs, gpt2_dir, tmp_path / objective, "--padded", "--objectives", objective)
        assert code == 0 and "trained 2 steps" in output, output
    message = one_line_error(*train(pairs, gpt2_dir, tmp_path / "b", "--padded", "--objectives", "mexma"))
    assert "objective mexma needs a BERT-family encoder" in message and "use contrastive, xtr" in message


def test_an_encoder_decoder_is_refused_in_one_line(pairs, tmp_path):
    from transformers import T5Config, T5EncoderModel

    def make(vocab: int) -> torch.nn.Module:
        return T5EncoderModel(
            T5Config(vocab_size=vocab, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4)
        )

    t5 = _save(make, tmp_path / "t5")  # AutoModel loads it back as a whole T5Model
    for extra in ([], ["--padded"]):
        message = one_line_error(*train(pairs, t5, tmp_path / "out", *extra))
        assert "not a 't5' encoder-decoder" in message


@pytest.mark.parametrize(("lines", "refused"), [(["der Hund schläft"] * 3, True), (["a", "b", "c"], False)])
def test_too_few_distinct_pairs_are_refused_or_warned_about(tiny_model_dir, tmp_path, lines, refused):
    data = tmp_path / "toy.de"
    data.write_text("\n".join(lines) + "\n")
    data.with_suffix(".en").write_text("the dog sleeps\n" * 3)
    code, output = train(data, tiny_model_dir("bert"), tmp_path / "out")
    if refused:  # one pair three times: no pair has a negative
        message = one_line_error(code, output)
        assert f"{data}, {data.with_suffix('.en')}: 1 distinct pair (after --exclude)" in message
        assert "needs at least 2" in message
    else:
        assert code == 0, output
        assert "only 3 distinct pairs, fewer than one batch takes" in " ".join(output.split())
