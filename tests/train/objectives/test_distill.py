"""Distillation: the loss against a hand computation, the frozen teacher and its cache of vectors, the
dimension check, a `train --objectives contrastive,distill` run, and the data such a run reads (FLORES
N-way folders, Tatoeba files, held-out lines)."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertModel
from typer.testing import CliRunner

from bitextmine.cli import app
from bitextmine.encoder.encoder import Encoded, SentenceEncoder
from bitextmine.errors import BitextmineError
from bitextmine.train.data import Pair, find_sources, pair_stream, read_excluded, read_source, token_batches
from bitextmine.train.loop import TrainConfig, batch_loss
from bitextmine.train.model import EncodedSide, TrainContext, TrainEncoder
from bitextmine.train.objectives.base import ObjectiveInputs, ObjectiveSetup
from bitextmine.train.objectives.distill import (
    TEACHER_DIR,
    Distill,
    TeacherVectors,
    distill_loss,
    load_teacher,
)
from bitextmine.train.objectives.registry import build_objectives
from tests.helpers import TRAINING_TEXT

R = 1 / math.sqrt(2)
STUDENT_XX = torch.tensor([[3.0, 4.0], [1.0, 0.0]])  # unit: [0.6, 0.8], [1, 0]
STUDENT_EN = torch.tensor([[0.0, 2.0], [1.0, 1.0]])  # unit: [0, 1], [R, R]
TEACHER = torch.tensor([[0.0, 1.0], [1.0, 0.0]])


class FakeTeacher:
    """A teacher whose vector of a sentence is [len, 1], normalised; it records what it encodes."""

    dim, fingerprint, precision = 2, "fake", "fp32"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def encode(self, sentences: list[str]) -> Encoded:
        self.calls.append(list(sentences))
        vectors = np.array([[len(s), 1.0] for s in sentences], dtype=np.float32)
        return Encoded(vectors / np.linalg.norm(vectors, axis=1, keepdims=True), 0, 0)


def test_the_loss_matches_a_hand_computation_on_unit_vectors():
    loss, xx, en = distill_loss(STUDENT_XX, STUDENT_EN, TEACHER)
    # xx: |[0.6, 0.8] - [0, 1]|^2 = 0.36 + 0.04, |[1, 0] - [1, 0]|^2 = 0; en: 0 and (R - 1)^2 + R^2 = 2 - 2R
    assert float(xx) == pytest.approx(0.4 / 2)
    assert float(en) == pytest.approx((2 - 2 * R) / 2)
    assert float(loss) == pytest.approx((0.2 + 1 - R) / 2)


def test_without_normalisation_the_loss_is_the_papers_mse_times_the_dimension():
    loss, xx, en = distill_loss(STUDENT_XX, STUDENT_EN, TEACHER, normalize=False)
    # xx: |[3, 4] - [0, 1]|^2 = 18 and 0; en: |[0, 2] - [0, 1]|^2 = 1 and |[1, 1] - [1, 0]|^2 = 1
    assert (float(xx), float(en), float(loss)) == pytest.approx((9.0, 1.0, 5.0))
    mse = torch.nn.functional.mse_loss
    paper = (mse(STUDENT_XX, TEACHER) + mse(STUDENT_EN, TEACHER)) / 2
    assert float(loss) == pytest.approx(2 * float(paper))


def _side(pooled: torch.Tensor) -> EncodedSide:
    return EncodedSide(torch.zeros(0, dtype=torch.long), [], torch.zeros(0, 2), pooled, torch.zeros(2))


def test_the_objective_targets_the_teachers_vectors_of_the_english_sentences(tmp_path):
    teacher = FakeTeacher()
    objective = Distill(TeacherVectors(teacher, tmp_path), student_dim=2)
    xx = STUDENT_XX.clone().requires_grad_()
    output = objective(
        ObjectiveInputs(_side(xx), _side(STUDENT_EN), None, english=["", "a"])
    )  # [0, 1] and [R, R]
    want = distill_loss(STUDENT_XX, STUDENT_EN, torch.tensor([[0.0, 1.0], [R, R]]))[0]
    assert output.loss.item() == pytest.approx(float(want))
    assert output.terms["distill"] == pytest.approx(float(want))
    output.loss.backward()
    assert xx.grad is not None and list(objective.parameters()) == []  # nothing of the teacher trains


def test_teacher_vectors_are_encoded_once_per_sentence_and_reused_from_disk(tmp_path):
    teacher = FakeTeacher()
    cache = TeacherVectors(teacher, tmp_path)
    first = cache.vectors(["a", "bb", "a"])
    cache.vectors(["bb", "ccc"])
    assert teacher.calls == [["a", "bb"], ["ccc"]]
    cache.save()
    again, reread = FakeTeacher(), None
    reread = TeacherVectors(again, tmp_path).vectors(["a", "bb", "ccc"])
    assert again.calls == [] and np.array_equal(reread[:2], first[:2])
    other = FakeTeacher()
    other.fingerprint = "another model"
    TeacherVectors(other, tmp_path).vectors(["a"])
    assert other.calls == [["a"]]  # the cache is per teacher


@pytest.mark.parametrize("damage", ["empty", "garbage", "truncated"])
def test_a_damaged_teacher_cache_shard_is_a_one_line_error_naming_it(tmp_path, damage):
    cache = TeacherVectors(FakeTeacher(), tmp_path)
    cache.vectors(["a"])
    cache.save()
    (shard,) = cache.folder.glob("*.npz")
    whole = shard.read_bytes()
    shard.write_bytes(
        {"empty": b"", "garbage": b"not an npz file", "truncated": whole[: len(whole) // 2]}[damage]
    )
    with pytest.raises(BitextmineError, match=rf"^{shard}: unreadable teacher vectors .*delete it") as info:
        TeacherVectors(FakeTeacher(), tmp_path)
    assert "\n" not in str(info.value)


def test_a_teacher_of_another_size_is_a_one_line_error(tmp_path):
    with pytest.raises(
        BitextmineError, match="teacher's vectors have 2 dimensions, the student's 32"
    ) as info:
        Distill(TeacherVectors(FakeTeacher(), tmp_path), student_dim=32)
    assert "\n" not in str(info.value)


def test_distill_settings_are_checked_before_any_work(tmp_path):
    common = dict(data=["x"], out=tmp_path, max_steps=1)
    with pytest.raises(BitextmineError, match="add distill to --objectives"):
        TrainConfig(objectives={"contrastive": 1.0}, base="b", options={"teacher": "t"}, **common)
    with pytest.raises(BitextmineError, match="distill from scratch needs --teacher"):
        TrainConfig(objectives={"distill": 1.0}, from_scratch=True, **common)
    assert TrainConfig(objectives={"distill": 1.0}, base="b", **common).teacher == "b"


def test_the_teacher_is_frozen_while_the_student_learns(tiny_model_dir, tmp_path):
    model_dir = tiny_model_dir("bert")
    teacher = load_teacher(str(model_dir), torch.device("cpu"), tmp_path)
    frozen = {k: v.clone() for k, v in teacher.teacher.loaded.model.state_dict().items()}
    student = TrainEncoder(BertModel.from_pretrained(model_dir))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    ctx = TrainContext(student, 0, frozenset(), len(tokenizer), ["de", "en"], torch.Generator())
    objectives = build_objectives({"distill": 1.0}, ObjectiveSetup(student, ctx, teacher))
    optimizer = torch.optim.AdamW([*student.parameters(), *objectives.parameters()], lr=1e-3)
    pairs = itertools.cycle(
        [Pair("de", de, en) for en, de in zip(TRAINING_TEXT[0::2], TRAINING_TEXT[1::2], strict=True)]
    )
    batch = next(token_batches(pairs, lambda texts: tokenizer(texts)["input_ids"], max_tokens=200, chunk=4))
    losses, terms = [], []
    for _ in range(5):
        loss, logged = batch_loss(student, objectives, {"distill": 1.0}, batch, ctx)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        terms.append(logged)
    assert terms[0]["distill/en"] == pytest.approx(0, abs=1e-6)  # the student starts as its teacher
    assert losses[-1] < losses[0] / 2  # the student moves towards the teacher's vectors
    model = teacher.teacher.loaded.model
    assert all(not p.requires_grad and p.grad is None for p in model.parameters())
    assert all(torch.equal(v, frozen[k]) for k, v in model.state_dict().items())


def _smaller_bert(model_dir: Path, out: Path) -> Path:
    """A BERT with the tiny model's tokenizer but 16 hidden dimensions (the tiny one has 32)."""
    config = BertConfig.from_pretrained(model_dir)
    config.hidden_size, config.intermediate_size = 16, 32
    BertModel(config).save_pretrained(out)
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(out)
    return out


@pytest.mark.integration
def test_train_contrastive_with_distill_end_to_end(tiny_model_dir, tmp_path, monkeypatch):
    en, de = TRAINING_TEXT[0::2] * 6, TRAINING_TEXT[1::2] * 6
    (tmp_path / "toy.de").write_text("\n".join(f"{s} {i}" for i, s in enumerate(de)) + "\n")
    (tmp_path / "toy.en").write_text("\n".join(f"{s} {i}" for i, s in enumerate(en)) + "\n")
    encoded: list[str] = []
    real_encode = SentenceEncoder.encode
    monkeypatch.setattr(
        SentenceEncoder, "encode", lambda self, s, *a, **k: encoded.extend(s) or real_encode(self, s, *a, **k)
    )
    out, base = tmp_path / "model", str(tiny_model_dir("bert"))
    args = ["train", "--data", str(tmp_path / "toy.de"), "--base", base, "--out", str(out), "--bf16", "off"]
    args += ["--objectives", "contrastive,distill=0.5", "--max-tokens", "120", "--checkpoint-every", "2"]
    runner = CliRunner()
    result = runner.invoke(app, [*args, "--max-steps", "3"])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "distill/distill" in r] == [1, 2, 3]
    assert len(encoded) == len(set(encoded)) > 0  # each English sentence once
    first = set(encoded)
    assert (out / TEACHER_DIR).is_dir()

    result = runner.invoke(app, [*args, "--max-steps", "8"])  # resumes at step 3
    assert result.exit_code == 0, result.output
    assert not first & set(encoded[len(first) :])  # the sentences of steps 1-3 came from the cache

    small = _smaller_bert(Path(base), tmp_path / "small")
    result = runner.invoke(
        app, [*args, "--max-steps", "1", "--teacher", str(small), "--out", str(tmp_path / "m")]
    )
    assert result.exit_code == 1
    assert "teacher's vectors have 16 dimensions, the student's 32" in result.output
    assert not (tmp_path / "m" / "checkpoints").exists() or not any(
        (tmp_path / "m" / "checkpoints").iterdir()
    )


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_flores_nway_folders_and_tatoeba_files_are_training_data(tmp_path):
    flores = tmp_path / "flores"
    flores.mkdir()
    for lang in ("eng", "amh", "zho_simpl"):
        _write(flores / f"{lang}.dev", [f"{lang} {i}" for i in range(5)])
    tatoeba = tmp_path / "tatoeba"
    tatoeba.mkdir()
    _write(tatoeba / "tatoeba.amh-eng.amh", ["selam", "ameseginalehu"])
    _write(tatoeba / "tatoeba.amh-eng.eng", ["hello", "thank you"])
    sources = find_sources([str(flores), str(tatoeba / "tatoeba.amh-eng.amh")])
    assert [(s.lang, Path(s.paths[1]).name) for s in sources] == [
        ("amh", "eng.dev"),
        ("zho_simpl", "eng.dev"),
        ("amh", "tatoeba.amh-eng.eng"),
    ]
    assert find_sources([str(flores / "amh.dev")]) == sources[:1]
    assert list(read_source(sources[2])) == [
        Pair("amh", "selam", "hello"),
        Pair("amh", "ameseginalehu", "thank you"),
    ]


def test_excluding_the_last_lines_copied_out_holds_out_exactly_those_pairs(tmp_path):
    """The documented hold-out: `tail -n N` copies of the evaluation files, given to --exclude."""
    flores, held = tmp_path / "flores", tmp_path / "held"
    flores.mkdir(), held.mkdir()
    for lang in ("eng", "amh"):
        lines = (
            _write(flores / f"{lang}.dev", [f"{lang} sentence {i}" for i in range(10)])
            .read_text()
            .splitlines()
        )
        _write(held / f"{lang}.dev", lines[-3:])
    sources = find_sources([str(flores)])
    stream = pair_stream(sources, seed=0, buffer=4, excluded=read_excluded([str(held)]))
    trained = {next(stream).src for _ in range(7)}
    assert trained == {f"amh sentence {i}" for i in range(7)}
