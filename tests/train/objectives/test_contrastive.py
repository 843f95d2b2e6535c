"""Contrastive objective against a hand computation."""

from __future__ import annotations

import math

import pytest
import torch

from bitextmine.train.model import EncodedSide
from bitextmine.train.objectives.base import ObjectiveInputs
from bitextmine.train.objectives.contrastive import Contrastive
from bitextmine.train.objectives.settings import ContrastiveSettings

U = torch.tensor([[1.0, 0.0], [0.0, 2.0]])  # norms differ on purpose: the loss uses cosines
V = torch.tensor([[3.0, 0.0], [1.0, 1.0]])
R = 1 / math.sqrt(2)  # the cosine of 45 degrees


def hand_loss(temperature: float, margin: float) -> float:
    # cosines: S = [[1, R], [0, R]]; the margin comes off the diagonal before dividing by temperature
    s = [[1 - margin, R], [0.0, R - margin]]
    t = temperature

    def ce(logits: list[float], gold: int) -> float:
        return -logits[gold] / t + math.log(sum(math.exp(x / t) for x in logits))

    rows = (ce(s[0], 0) + ce(s[1], 1)) / 2
    cols = (ce([s[0][0], s[1][0]], 0) + ce([s[0][1], s[1][1]], 1)) / 2
    return (rows + cols) / 2


@pytest.mark.parametrize(("temperature", "margin"), [(1.0, 0.0), (0.05, 0.0), (0.1, 0.3)])
def test_symmetric_infonce_with_margin_matches_hand_computation(temperature, margin):
    loss, accuracy = Contrastive(2, ContrastiveSettings(temperature=temperature, margin=margin)).loss(U, V)
    assert float(loss) == pytest.approx(hand_loss(temperature, margin), rel=1e-5)
    # rows: u0 -> v0 (right), u1 -> v1 (right); columns: v0 -> u0 (right), v1 -> u0 or u1 (tie: first)
    assert accuracy == pytest.approx(0.75)


def test_projection_is_two_layers_down_to_a_smaller_space_and_learns():
    torch.manual_seed(0)
    objective = Contrastive(256, ContrastiveSettings(temperature=0.1, projection=True))
    first, last = objective.projection[0], objective.projection[2]
    assert (first.in_features, first.out_features, last.out_features) == (256, 256, 128)
    u, v = torch.randn(8, 256), torch.randn(8, 256)
    before = objective.loss(u, v)[0].item()
    optimizer = torch.optim.SGD(objective.parameters(), lr=0.5)
    for _ in range(20):
        optimizer.zero_grad()
        objective.loss(u, v)[0].backward()
        optimizer.step()
    assert objective.loss(u, v)[0].item() < before


def _side(sentences: list[list[int]], pooled: torch.Tensor) -> EncodedSide:
    ids = torch.tensor([i for s in sentences for i in s])
    return EncodedSide(ids, [len(s) for s in sentences], torch.zeros(len(ids), 2), pooled, torch.zeros(2))


def test_copies_of_a_rows_pair_are_not_its_negatives():
    # pair 0 twice (same token ids), pair 1 once; cosines 1 within pair 0's copies, 0 across
    u = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    src, tgt = _side([[5, 6], [5, 6], [7]], u), _side([[8], [8], [9, 9]], u.clone())
    terms = Contrastive(2, ContrastiveSettings(temperature=1.0))(ObjectiveInputs(src, tgt, None)).terms
    # rows and columns of the copies: [1, -inf, 0] (the copy left out); of pair 1: [0, 0, 1]
    copy, other = math.log(1 + 1 / math.e), math.log(1 + 2 / math.e)
    assert terms["contrastive"] == pytest.approx((2 * copy + other) / 3, rel=1e-5)
    assert terms["in_batch_accuracy"] == 1.0
