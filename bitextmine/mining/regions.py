"""Regions of the embedding space that both languages share: spherical k-means over a sample of both
sides' vectors, run with several seeds (`Regions`), and every sentence's region in each clustering.

Margin scores mean different things in dense regions (templates, captions, short everyday sentences:
neighbours nearly as close as a translation) and sparse ones, so `mining/regional_precision.py` reads a
pair's score against the candidates and decoys of its own region. One clustering can split a dense
region or merge it with a sparse one, depending on its seed; the precision is averaged over clusterings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import faiss
import numpy as np

if TYPE_CHECKING:
    from bitextmine.search.gemm import VectorSource  # a type only: torch is not imported to mine

# A region reads its pairs' precision off its own candidates and decoys: a small corpus cut into many
# regions leaves each too few of them. More than REGIONS help a large corpus a little, cost one whose
# translations are rare its precision, and every corpus assignment time, every sentence against every
# centroid of every clustering (examples/benchmarks/results/constants.md, "Sentences a region").
REGIONS = 32
ROWS_PER_REGION = 2048  # both sides' sentences
CLUSTERINGS = 8
TRAIN_PER_REGION = 256  # sampled rows a centroid: what FAISS's k-means keeps at most
MIN_PER_REGION = 39  # FAISS warns below this many training rows a centroid
KMEANS_ITERATIONS = 20
ASSIGN_ROWS = 65_536  # rows assigned at a time (float32: 100 MB at 384 dimensions)


@dataclass(frozen=True)
class Regions:
    """`CLUSTERINGS` sets of centroids (float32 [clusterings, regions, dim], unit rows)."""

    centroids: np.ndarray

    @property
    def count(self) -> int:
        """Regions in each clustering."""
        return self.centroids.shape[1]

    def assign(self, rows: VectorSource) -> np.ndarray:
        """Each row's region in every clustering: int16 [clusterings, rows], read ASSIGN_ROWS at a time."""
        labels = np.zeros((len(self.centroids), len(rows)), np.int16)
        for start, block in rows.blocks(ASSIGN_ROWS):
            labels[:, start : start + len(block)] = self.assign_array(block)
        return labels

    def assign_array(self, vectors: np.ndarray) -> np.ndarray:
        """`assign` for vectors in memory."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        return np.stack([(vectors @ centroids.T).argmax(1) for centroids in self.centroids]).astype(np.int16)


def region_count(rows: int) -> int:
    """The regions for a corpus of `rows` sentences on its two sides together: one per ROWS_PER_REGION,
    at least one and at most REGIONS."""
    return max(1, min(REGIONS, rows // ROWS_PER_REGION))


def fit_regions(
    sources: tuple[VectorSource, VectorSource],
    regions: int = REGIONS,
    clusterings: int = CLUSTERINGS,
    seed: int = 0,
) -> Regions:
    """Regions of both languages' vectors together (`sources`), each clustering trained on its own
    sample of TRAIN_PER_REGION rows a region, drawn evenly from the two sides; fewer regions where the
    rows are too few for MIN_PER_REGION a region."""
    total = sum(len(rows) for rows in sources)
    regions = max(1, min(regions, total // MIN_PER_REGION))
    rng = np.random.default_rng(seed)
    samples = (_sample(sources, regions * TRAIN_PER_REGION, rng) for _ in range(clusterings))
    return Regions(np.stack([_kmeans(sample, regions, seed + i) for i, sample in enumerate(samples)]))


def _sample(sources: tuple[VectorSource, VectorSource], rows: int, rng: np.random.Generator) -> np.ndarray:
    """At most `rows` rows, half from each side where each has enough, in row order within a side."""
    share = [min(len(source), rows // 2) for source in sources]
    share[0] = min(len(sources[0]), rows - share[1])
    parts = [
        source.take(np.sort(rng.choice(len(source), size=take, replace=False)))
        for source, take in zip(sources, share, strict=True)
        if take
    ]
    return np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)


def _kmeans(sample: np.ndarray, regions: int, seed: int) -> np.ndarray:
    kmeans = faiss.Kmeans(
        sample.shape[1], regions, niter=KMEANS_ITERATIONS, seed=seed, spherical=True, verbose=False
    )
    kmeans.train(sample)
    return kmeans.centroids.astype(np.float32)


def region_mismatch(population: np.ndarray, weights: np.ndarray, sample: np.ndarray, regions: int) -> float:
    """How unlike a sample's regions (`sample`: int [clusterings, n]) are to a weighted population's
    (`population`: int [clusterings, rows], `weights` [rows], not all 0): the share of the sample that
    would have to change region to match it (total variation distance), averaged over the clusterings,
    less about what n rows drawn from the population itself would give (0: as alike as such a draw)."""
    n = sample.shape[1]
    distances = []
    for population_labels, sample_labels in zip(population, sample, strict=True):
        p = np.bincount(population_labels, weights=weights, minlength=regions) / weights.sum()
        q = np.bincount(sample_labels, minlength=regions) / n
        # E|q - p| of a draw, normal approximation (p * (1 - p) rounds below 0 where p rounds above 1)
        chance = 0.5 * np.sqrt(2 / np.pi * np.maximum(p * (1 - p), 0.0) / n).sum()
        distances.append(0.5 * np.abs(p - q).sum() - chance)
    return float(np.mean(distances))
