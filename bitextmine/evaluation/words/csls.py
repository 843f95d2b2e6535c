"""CSLS retrieval and the weak / strong alignment scores of Gaschi et al. 2022 (§III-C, §III-D).

Given N pairs (u_i, v_i), cosines on L2-normalised vectors and r_V(u), the mean cosine of u to its k
nearest neighbours in V (k clamped to |V|), CSLS (Eq. 2, Conneau et al. 2018) is

    s(u_i, v_j) = 2 cos(u_i, v_j) - r_V(u_i) - r_U(v_j)

(bitextmine.margin's "csls" margin; computed here in place, the matrices being N x N).

- weak alignment (Eq. 1): the share of i with s(u_i, v_i) > max_{j != i} s(u_i, v_j); the translation
  beats every other word of the other language.
- strong alignment (Eq. 3): the share of i with s(u_i, v_i) > max_{j != i} s(u_i, u_j); the translation
  beats every other word of the query's own language. s(u_i, u_j) is Eq. 2 with v_j replaced by u_j:
  2 cos(u_i, u_j) - r_V(u_i) - r_U(u_j), where N_U^k(u_j), the k nearest neighbours of u_j in U,
  contains u_j itself, as in the authors' implementation.

Inequalities are strict, so ties are misses (identical vectors, such as the first token at layer 0,
score 0, as in the paper's Table I). Every score is given in both directions (u -> v and v -> u), in
percent.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Directions:
    forward: float  # u -> v, percent
    backward: float  # v -> u, percent


def knn_mean(cos: torch.Tensor, k: int) -> torch.Tensor:
    """Row-wise mean of the k largest entries (k clamped to the row length)."""
    return torch.topk(cos, min(k, cos.shape[1]), dim=1).values.mean(dim=1)


def csls(cos: torch.Tensor, query_knn: torch.Tensor, candidate_knn: torch.Tensor) -> torch.Tensor:
    """CSLS of every (query, candidate) from their cosines and neighbourhood means (a new tensor)."""
    scores = cos * 2
    scores -= query_knn[:, None]
    scores -= candidate_knn[None, :]
    return scores


def weak_alignment(u: torch.Tensor, v: torch.Tensor, k: int = 10) -> Directions:
    """S_weak(U, V) and S_weak(V, U)."""
    return _Pairs(u, v, k).weak()


def word_alignment(u: torch.Tensor, v: torch.Tensor, k: int = 10) -> tuple[Directions, Directions]:
    """(weak, strong) alignment, sharing the cross-lingual cosines."""
    pairs = _Pairs(u, v, k)
    return pairs.weak(), pairs.strong()


class _Pairs:
    """Cosines and neighbourhoods of N pairs (u_i, v_i)."""

    def __init__(self, u: torch.Tensor, v: torch.Tensor, k: int) -> None:
        self.u, self.v, self.k = _unit(u), _unit(v), k
        self.cos = self.u @ self.v.T  # [i, j] = cos(u_i, v_j)
        self.cos_t = self.cos.T.contiguous()
        self.u_knn = knn_mean(self.cos, k)  # r_V(u_i)
        self.v_knn = knn_mean(self.cos_t, k)  # r_U(v_i)
        self.gold = 2 * self.cos.diagonal() - self.u_knn - self.v_knn  # s(u_i, v_i) = s(v_i, u_i)

    def weak(self) -> Directions:
        return Directions(
            _percent(self.gold > _best_rival(self.cos, self.u_knn, self.v_knn)),
            _percent(self.gold > _best_rival(self.cos_t, self.v_knn, self.u_knn)),
        )

    def strong(self) -> Directions:
        return Directions(self._strong(self.u, self.u_knn), self._strong(self.v, self.v_knn))

    def _strong(self, queries: torch.Tensor, query_knn: torch.Tensor) -> float:
        same = queries @ queries.T
        return _percent(self.gold > _best_rival(same, query_knn, knn_mean(same, self.k)))


def _best_rival(cos: torch.Tensor, query_knn: torch.Tensor, candidate_knn: torch.Tensor) -> torch.Tensor:
    """max over j != i of the CSLS of query i and candidate j."""
    return csls(cos, query_knn, candidate_knn).fill_diagonal_(-torch.inf).max(dim=1).values


def _percent(hits: torch.Tensor) -> float:
    return 100.0 * int(hits.sum()) / hits.numel()


def _unit(x: torch.Tensor) -> torch.Tensor:
    return F.normalize(x.float(), dim=-1)
