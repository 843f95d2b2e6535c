"""What exact mining would cost: measured, so that `index` chooses exact search or IVF by time, not size.

Exact search (search/gemm.py) costs the same for every pair of vectors: the time of `queries` against a
sample of the base, scaled to the whole mining (each language's sentences against the other's), is its
cost on this machine and device. On a CPU, `mine` searches both directions from one product per pair of
blocks (`mutual_neighbours`, where one job holds both sides: up to 1M a side by default), so the
mining costs one product per pair of sentences; elsewhere two. Up to `EXACT_BUDGET_SECONDS` of search,
exact is chosen: it needs no training and loses no pair; above it, IVF, which on real de-en text kept
nearly all of exact mining's pairs in a fraction of its time
(examples/benchmarks/results/bench_scale_real.md).
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from bitextmine.search.gemm import GemmPlan, VectorSource

EXACT_BUDGET_SECONDS = 60.0
# A pair's two indexes are built one after the other: the second reuses a rate measured within this
# many seconds (`rate_applies`); an older one is measured again, the load or the code may have changed.
RATE_REUSE_SECONDS = 3600.0
SAMPLE_BASE_ROWS = 262_144  # base rows timed: the rate no longer depends on the size beyond a few blocks
SAMPLE_QUERIES = 1000


@dataclass(frozen=True)
class ExactCost:
    """The measured rate of exact search and the time it gives for mining `rows` x `other_rows`."""

    products_per_second: float
    rows: int
    other_rows: int
    plan: str
    shared: bool = False  # both directions from one product (`mutual_neighbours`: on a CPU)
    device: str = "cpu"  # the device type searched: cpu, cuda
    measured: float = 0.0  # when the rate was measured (Unix time)

    def rate_record(self) -> dict[str, Any]:
        """The measured rate as an index records it (`IndexInfo.exact_rate`), with the host it ran on."""
        return {
            "products_per_second": self.products_per_second,
            "plan": self.plan,
            "shared": self.shared,
            "device": self.device,
            "host": socket.gethostname(),
            "measured": self.measured,
        }

    @classmethod
    def from_rate(cls, record: dict[str, Any], rows: int, other_rows: int) -> ExactCost:
        """The cost of mining `rows` x `other_rows` at a rate recorded by `rate_record`."""
        return cls(
            float(record["products_per_second"]),
            rows,
            other_rows,
            str(record["plan"]),
            bool(record["shared"]),
            str(record["device"]),
            float(record["measured"]),
        )

    @property
    def mining_seconds(self) -> float:
        """Both directions: each side's sentences searched against the other's."""
        return (1 if self.shared else 2) * self.rows * self.other_rows / self.products_per_second

    def query_seconds(self, queries: int) -> float:
        """Mining's exact search of `queries` of the other language against this one: a product with
        each row, or half of one where each product serves both directions."""
        return queries * self.rows / self.products_per_second / (2 if self.shared else 1)

    @property
    def ms_per_1000_queries(self) -> float:
        """Mining's exact search of 1000 queries against this language's `rows` (`query_seconds`)."""
        return round(1000 * self.query_seconds(1000), 1)

    def describe(self) -> str:
        return (
            f"exact mining of {self.rows:,} x {self.other_rows:,} estimated at "
            f"{self.mining_seconds:,.0f} s ({self.products_per_second:.3g} products/s, {self.plan})"
        )


def measure_exact_cost(
    base: VectorSource, queries: np.ndarray, other_rows: int | None, plan: GemmPlan
) -> ExactCost:
    """Time `queries` (at most SAMPLE_QUERIES) against at most SAMPLE_BASE_ROWS rows of `base`, once
    warmed up; `other_rows` is the other language's size (None: the same as `base`'s)."""
    from bitextmine.search.gemm import gemm_neighbours  # torch: imported where exact search runs

    queries = queries[:SAMPLE_QUERIES]
    sample = _Head(base, min(len(base), SAMPLE_BASE_ROWS))
    # warm-up (threads, kernels) over one block: the base's copy in the compute precision is made per call
    warm = _Head(base, min(len(base), plan.base_rows))
    gemm_neighbours(lambda: [(0, queries[:16])], min(16, len(queries)), warm, 4, plan)
    started = time.perf_counter()
    gemm_neighbours(lambda: [(0, queries)], len(queries), sample, 4, plan)
    seconds = max(time.perf_counter() - started, 1e-9)
    rate = len(queries) * len(sample) / seconds
    other_rows = len(base) if other_rows is None else other_rows
    shared = not plan.grouped_top
    return ExactCost(rate, len(base), other_rows, plan.describe(), shared, plan.device.type, time.time())


def rate_applies(record: dict[str, Any] | None, device: str) -> bool:
    """Whether a recorded rate (`ExactCost.rate_record`) stands for exact search here: measured on this
    host, on this device type, within RATE_REUSE_SECONDS, and complete."""
    keys = {"products_per_second", "plan", "shared", "device", "host", "measured"}
    if not isinstance(record, dict) or not keys <= set(record):
        return False
    numbers = [record[key] for key in ("products_per_second", "measured")]
    return (
        record["host"] == socket.gethostname()
        and record["device"] == device
        and all(isinstance(n, int | float) and not isinstance(n, bool) for n in numbers)
        and record["products_per_second"] > 0
        and 0 <= time.time() - record["measured"] <= RATE_REUSE_SECONDS
    )


class _Head:
    """The first `rows` rows of a vector source."""

    def __init__(self, source: VectorSource, rows: int) -> None:
        self.source, self.rows = source, rows

    def __len__(self) -> int:
        return self.rows

    def blocks(self, block_rows: int):
        for start, block in self.source.blocks(block_rows):
            yield start, block[: self.rows - start]
            if start + len(block) >= self.rows:
                return  # before the source reads its next block

    def take(self, rows: np.ndarray) -> np.ndarray:
        return self.source.take(rows)
