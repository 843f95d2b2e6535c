"""`train --hard-negatives N`: the miner and its false-negative guard on hand-made pools, the contrastive
loss with extra negatives against a hand computation, and tiny training runs through the loop and the CLI."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModel, AutoTokenizer

from bitextmine.progress import Progress
from bitextmine.train import hard_negatives
from bitextmine.train.data import Pair, PairBatch
from bitextmine.train.hard_negatives import (
    BatchNegatives,
    HardNegativeMiner,
    HardNegativeSettings,
    mine_negatives,
    pool_size,
)
from bitextmine.train.loop import Reporter, TrainConfig, batch_loss, train
from bitextmine.train.model import TrainContext, TrainEncoder
from bitextmine.train.objectives.base import ObjectiveSetup
from bitextmine.train.objectives.contrastive import Contrastive
from bitextmine.train.objectives.registry import build_objectives
from bitextmine.train.objectives.settings import ContrastiveSettings
from tests.helpers import TRAINING_TEXT, run, sentences, straight_and_interrupted, unit

DIM = 8
ENGLISH = ["a cat sleeps.", "a dog barks.", "prices rose.", "kids play.", "rain falls.", "the sun shines."]


def vector(**axes: float) -> np.ndarray:
    """A positive vector (cosines between 0.5 and 1, as real sentence vectors have): 0.3 everywhere,
    plus e.g. e0=1 on axis 0."""
    x = np.full(DIM, 0.3)
    for axis, value in axes.items():
        x[int(axis[1:])] += value
    return x


def pool(**targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Six pairs, pair i's sides both on axis i; `targets` replaces some English vectors (t5=...)."""
    src = unit(np.array([vector(**{f"e{i}": 1.0}) for i in range(6)]))
    tgt = src.copy()
    for name, x in targets.items():
        tgt[int(name[1:])] = unit(x[None])[0]
    return src, tgt


def test_the_miner_returns_the_nearest_non_translation():
    src, tgt = pool(t1=vector(e1=1, e0=0.6))  # the English of pair 1 leans towards pair 0's source
    mined = mine_negatives(src, tgt, ENGLISH, 1)
    assert mined.ids[0].tolist() == [1]
    assert mined.summary() == {
        "pairs": 6,
        "negatives": 6,
        "pairs_short": 0,
        "excluded_duplicates": 0,
        "excluded_above_gold": 0,
    }


@pytest.mark.parametrize(
    ("english", "t5", "why"),
    [
        ("A cat sleeps!", vector(e0=1, e5=0.7), "the same text but for case and punctuation"),
        ("a cat sleeps.", vector(e0=1, e5=0.7), "the same text under another index"),
        ("a cat is sleeping.", vector(e0=1, e5=0.15), "a cosine of 0.996 to the gold target"),
    ],
)
def test_a_near_duplicate_of_the_gold_target_is_not_a_negative(english, t5, why):
    # pair 5's English is pair 0's gold target again, and nearer to pair 0's source (cosine 0.92 or
    # more) than the true nearest non-translation, pair 1's English
    src, tgt = pool(t1=vector(e1=1, e0=0.6), t5=t5)
    assert tgt[5] @ src[0] > tgt[1] @ src[0]
    mined = mine_negatives(src, tgt, [*ENGLISH[:5], english], 1)
    assert mined.ids[0].tolist() == [1], why
    assert 0 not in mined.ids[5]  # and the other way round
    assert mined.summary()["excluded_duplicates"] == 2


def test_a_candidate_scoring_above_the_gold_pair_is_not_a_negative():
    # pair 0's own English is a loose translation (cosine 0.91 to its source); pair 5's English, another
    # text with a cosine of 0.86 to it, scores higher against pair 0's source: a likely translation too
    src, tgt = pool(t0=vector(e0=1, e7=0.8), t5=vector(e0=1, e6=0.5))
    mined = mine_negatives(src, tgt, ENGLISH, 1)
    scores = mined.pool
    assert tgt[5] @ tgt[0] < 0.95 and src[0] @ tgt[5] > src[0] @ tgt[0]
    assert src[0] @ tgt[5] / ((scores.fwd[0] + scores.bwd[5]) / 2) >= scores.gold[0]
    assert mined.ids[0].tolist() == [1]
    assert mined.summary()["excluded_above_gold"] == 1


def test_n_larger_than_the_candidates_leaves_pairs_short():
    src, tgt = pool()
    mined = mine_negatives(src[:3], tgt[:3], ENGLISH[:3], 5)
    assert mined.ids.shape == (3, 5)
    for row, negatives in enumerate(mined.ids.tolist()):
        assert sorted(negatives[:2]) == sorted({0, 1, 2} - {row}) and negatives[2:] == [-1, -1, -1]
    assert mined.summary()["negatives"] == 6 and mined.summary()["pairs_short"] == 3


def test_a_batch_row_does_not_see_a_negative_that_duplicates_its_own_target():
    src, tgt = pool(t1=vector(e1=1, e0=0.6), t5=vector(e0=1, e5=0.7))
    mined = mine_negatives(src, tgt, [*ENGLISH[:5], "A cat sleeps!"], 1)
    assert mined.ids[[1, 5]].tolist() == [[0], [2]]
    negatives, allowed = mined.for_rows(np.array([1, 5]))
    assert negatives.tolist() == [0, 2]
    # pair 0's English, mined for pair 1, is pair 5's own target in other punctuation: not pair 5's column
    assert allowed.tolist() == [[True, True], [False, True]]


U = torch.tensor([[1.0, 0.0], [0.0, 2.0]])  # norms differ on purpose: the loss uses cosines
V = torch.tensor([[3.0, 0.0], [1.0, 1.0]])
EXTRA = torch.tensor([[0.0, 5.0], [2.0, 0.0]])  # cosines: to u0 0 and 1, to u1 1 and 0
R = 1 / math.sqrt(2)


def cross_entropy(logits: list[float], gold: int, temperature: float) -> float:
    return -logits[gold] / temperature + math.log(sum(math.exp(x / temperature) for x in logits))


@pytest.mark.parametrize(("temperature", "margin"), [(1.0, 0.0), (0.1, 0.3)])
def test_contrastive_loss_with_extra_negatives_matches_hand_computation(temperature, margin):
    allowed = torch.tensor([[True, False], [True, True]])  # row 0 may not see the second negative
    u = U.clone().requires_grad_()
    loss, accuracy = Contrastive(2, ContrastiveSettings(temperature=temperature, margin=margin)).loss(
        u, V, None, EXTRA, allowed
    )
    rows = [[1 - margin, R, 0.0], [0.0, R - margin, 1.0, 0.0]]  # in-batch cosines, then allowed negatives
    columns = [[1 - margin, 0.0], [R, R - margin]]  # each English vector against both sources: unchanged
    row_terms = sum(cross_entropy(row, gold, temperature) for gold, row in enumerate(rows)) / 2
    column_terms = sum(cross_entropy(col, gold, temperature) for gold, col in enumerate(columns)) / 2
    assert loss.item() == pytest.approx((row_terms + column_terms) / 2, rel=1e-5)
    # rows: u0 -> v0 (right), u1 -> the first negative (wrong); columns: v0 -> u0, v1 -> u0 (a tie: wrong)
    assert accuracy == pytest.approx(0.5)
    loss.backward()
    assert torch.isfinite(u.grad).all()  # the left-out column adds nothing, not NaN


def todays_loss(u: torch.Tensor, v: torch.Tensor, temperature: float, margin: float) -> torch.Tensor:
    """The contrastive loss as it was before extra negatives."""
    sims = F.normalize(u.float(), dim=-1) @ F.normalize(v.float(), dim=-1).T
    logits = (sims - margin * torch.eye(len(sims))) / temperature
    target = torch.arange(len(sims))
    return (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2


def test_contrastive_loss_without_extra_negatives_is_unchanged():
    torch.manual_seed(0)
    u, v = torch.randn(16, 32), torch.randn(16, 32)
    objective = Contrastive(32, ContrastiveSettings(temperature=0.05, margin=0.3))
    assert torch.equal(objective.loss(u, v)[0], todays_loss(u, v, 0.05, 0.3))  # bit for bit
    left_out = torch.zeros(16, 3, dtype=torch.bool)  # negatives no row may see: the same loss
    with_none = objective.loss(u, v, None, torch.randn(3, 32), left_out)[0]
    assert float(with_none) == pytest.approx(float(todays_loss(u, v, 0.05, 0.3)), rel=1e-6)


@pytest.mark.integration  # training steps on a tiny model: seconds
def test_batch_loss_encodes_the_negatives_with_the_targets_for_contrastive_only(tiny_model_dir):
    model_dir = tiny_model_dir("bert")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    ids = tokenizer(TRAINING_TEXT, truncation=True, max_length=30)["input_ids"]
    batch = PairBatch(ids[1:6:2], ids[0:6:2], ["de"] * 3, 3)  # three pairs; the fourth English: a negative
    negatives = BatchNegatives([ids[6]], np.array([[True], [False], [True]]))
    encoder = TrainEncoder(AutoModel.from_pretrained(model_dir).eval())  # eval: no dropout
    special = frozenset(tokenizer.all_special_ids)
    ctx = TrainContext(
        encoder, tokenizer.mask_token_id, special, len(tokenizer), ["de", "en"], torch.Generator()
    )
    weights = {"contrastive": 1.0, "xtr": 1.0}
    objectives = build_objectives(weights, ObjectiveSetup(encoder, ctx))
    with torch.no_grad():
        _, terms = batch_loss(encoder, objectives, weights, batch, ctx, negatives=negatives)
        _, plain = batch_loss(encoder, objectives, weights, batch, ctx)
        src, tgt = encoder.encode_pair(
            batch.src_ids, batch.tgt_ids, torch.zeros(3).long(), torch.ones(3).long()
        )
        extra = encoder.encode(torch.tensor(ids[6]), [len(ids[6])], torch.ones(1).long()).pooled
        allowed = torch.from_numpy(negatives.allowed)
        want, _ = objectives["contrastive"].loss(src.pooled, tgt.pooled, None, extra, allowed)
    assert terms["contrastive/contrastive"] == pytest.approx(want.item(), rel=1e-5)
    assert terms["contrastive/contrastive"] > plain["contrastive/contrastive"]  # a column more to beat
    assert terms["xtr/xtr"] == pytest.approx(plain["xtr/xtr"], rel=1e-5)  # xtr sees the three pairs only


def fake_vectors(texts: list[str]) -> np.ndarray:
    """s<i> and t<i> (pair i's sides) get the same random positive vector."""
    return np.array([np.random.default_rng(int(t[1:])).random(DIM) + 0.1 for t in texts], np.float32)


def batches(first_pair: int, sizes: list[int]) -> list[PairBatch]:
    out, position = [], first_pair
    for size in sizes:
        position += size
        out.append(PairBatch([[1]] * size, [[1]] * size, ["de"] * size, position))
    return out


def miner(mined_at: list[int]) -> HardNegativeMiner:
    pairs = (Pair("de", f"s{i}", f"t{i}") for i in itertools.count())
    return HardNegativeMiner(
        HardNegativeSettings(n=1, refresh=5, pool=6),
        pairs,
        fake_vectors,
        lambda texts: [[int(t[1:])] for t in texts],  # "token ids": the pair numbers of the negatives
        report=lambda step, summary: mined_at.append(step),
    )


def given(negatives: BatchNegatives | None) -> tuple[list[list[int]], list[list[bool]]] | None:
    return None if negatives is None else (negatives.ids, negatives.allowed.tolist())


def test_the_miner_mines_every_refresh_steps_and_when_a_batch_leaves_the_pool():
    mined_at: list[int] = []
    straight = miner(mined_at)
    got = [given(straight.for_batch(batch, step)) for step, batch in enumerate(batches(0, [2] * 9))]
    # every 5 steps, and at steps 3 and 8, whose batches begin where the 6-pair pool ended
    assert mined_at == [0, 3, 5, 8]
    assert any(got) and all(len(allowed) == 2 for _, allowed in filter(None, got))
    # a run resumed at step 5 (pairs 10 on) mines there again, and gives the same negatives
    resumed_at: list[int] = []
    again = miner(resumed_at)
    resumed = [given(again.for_batch(batch, step)) for step, batch in enumerate(batches(10, [2] * 4), 5)]
    assert resumed_at == [5, 8] and resumed == got[5:]


@pytest.fixture
def toy_pairs(tmp_path, monkeypatch) -> Path:
    """24 made-up sentences, each its own "translation". The tiny random model puts different sentences
    within cosines of 0.90-0.98 of each other: only identical vectors count as duplicates here."""
    monkeypatch.setattr(hard_negatives, "DUPLICATE_COSINE", 0.99)
    lines = "\n".join(sentences(24, seed=1)) + "\n"
    (tmp_path / "toy.de").write_text(lines)
    (tmp_path / "toy.en").write_text(lines)
    return tmp_path / "toy.de"


def toy_config(toy_pairs: Path, tiny_model_dir, out: Path, **settings) -> TrainConfig:
    """A contrastive run on `toy_pairs` with two hard negatives a pair, and `settings`."""
    return TrainConfig(
        data=[str(toy_pairs)],
        out=out,
        objectives={"contrastive": 1.0},
        base=str(tiny_model_dir("bert")),
        max_tokens=400,
        max_pairs=8,
        bf16="off",
        device="cpu",
        hard_negatives=2,
        **settings,
    )


@pytest.mark.integration
def test_train_with_hard_negatives_records_them_and_refuses_other_settings_on_resume(
    tiny_model_dir, toy_pairs, tmp_path
):
    out = tmp_path / "model"
    args = ["train", "--data", str(toy_pairs), "--base", str(tiny_model_dir("bert")), "--out", str(out)]
    args += ["--max-tokens", "400", "--max-pairs", "8", "--bf16", "off", "--device", "cpu"]
    mining = ["--hard-negatives", "2", "--negative-refresh", "2", "--negative-pool", "24"]
    code, output = run(*args, *mining, "--max-steps", "3")
    assert code == 0 and "trained 3 steps" in output, output
    assert "hard negatives for step 1:" in output and "hard negatives for step 3:" in output
    records = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    refreshes = [r for r in records if "hard_negatives" in r]
    assert [r["step"] for r in refreshes] == [1, 3]  # steps 0 and 2 done: before steps 1 and 3
    assert all(r["hard_negatives"]["pairs"] == 24 and r["hard_negatives"]["negatives"] > 0 for r in refreshes)
    assert all(math.isfinite(r["loss"]) for r in records if "loss" in r)
    training = json.loads((out / "bitextmine.json").read_text())["training"]
    assert training["hard_negatives"] == {"n": 2, "refresh": 2, "pool": 24}
    code, output = run(*args, "--hard-negatives", "1", "--max-steps", "4")
    assert code == 1 and "written by a run with other settings" in output, output


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--objectives", "xtr"], "--hard-negatives feeds the contrastive loss: add contrastive"),
        (
            ["--max-pairs", "16", "--negative-pool", "8"],
            "--negative-pool 8 is smaller than a batch",
        ),
    ],
)
def test_hard_negatives_are_refused_without_contrastive_or_with_a_pool_under_a_batch(
    options, message, tmp_path
):
    args = ["train", "--data", "x.de", "--base", "m", "--out", str(tmp_path), "--max-steps", "1"]
    code, output = run(*args, "--hard-negatives", "2", *options)
    assert code == 1 and message in output and "Traceback" not in output, output


@pytest.mark.integration  # training steps on a tiny model: seconds
def test_a_resume_at_a_mining_step_continues_with_identical_losses(tiny_model_dir, toy_pairs, tmp_path):
    def config(out: Path) -> TrainConfig:
        return toy_config(
            toy_pairs,
            tiny_model_dir,
            out,
            max_steps=4,
            lr=1e-3,
            warmup_steps=1,
            shuffle_buffer=16,
            checkpoint_every=2,
            hard_negative_refresh=2,
            hard_negative_pool=24,
        )

    straight, interrupted = straight_and_interrupted(config, tmp_path, 3)
    assert train(config(interrupted)).resumed_from == 2

    def logged(out: Path) -> list[tuple[int, object]]:
        records = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
        return [(r["step"], r.get("loss"), r.get("hard_negatives", {}).get("negatives")) for r in records]

    assert any(negatives for _, _, negatives in logged(straight))
    assert logged(interrupted) == logged(straight)  # losses bit for bit, each mining logged once


def test_the_pool_is_never_larger_than_the_distinct_pairs():
    pairs = [Pair("de", f"s{i % 5}", f"t{i % 5}") for i in range(12)]  # 5 distinct, some twice
    assert pool_size(20_000, pairs) == 5
    assert pool_size(3, pairs) == 3
    assert pool_size(3, itertools.cycle(pairs)) == 3  # stops at the pool: an endless stream is fine


class _Recorder(Reporter):
    """The notes and the progress stages a training run reports."""

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.stages: list[tuple[str, int | None]] = []

    def note(self, message: str) -> None:
        self.notes.append(message)

    def progress(self) -> Progress:
        stages = self.stages

        class Stages(Progress):
            def start(self, description: str, total: int | None, *, rates: bool = False) -> None:
                stages.append((description, total))

        return Stages()


def test_a_pool_larger_than_the_data_is_cut_to_it_and_its_encoding_reported(
    tiny_model_dir, toy_pairs, tmp_path
):
    config = toy_config(toy_pairs, tiny_model_dir, tmp_path / "model", max_steps=1, hard_negative_pool=20_000)
    reporter = _Recorder()
    train(config, reporter)
    records = [json.loads(line) for line in (tmp_path / "model" / "train_log.jsonl").read_text().splitlines()]
    assert [r["hard_negatives"]["pairs"] for r in records if "hard_negatives" in r] == [24]  # not 20,000
    assert any("a pool of 24 pairs, every distinct training pair" in note for note in reporter.notes)
    assert reporter.stages == [("hard negatives: encoding the pool", 48)]
