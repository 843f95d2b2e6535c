"""How to load an encoder: what a job on another machine needs to rebuild it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from bitextmine.encoder.encoder import SentenceEncoder


@dataclass(frozen=True)
class EncoderSpec:
    """How to load the encoder: what a job on another machine needs to rebuild it (hashable, picklable)."""

    model: str
    device: str = "auto"
    precision: str = "auto"  # bf16 where the device runs it natively, else fp32
    overrides: tuple[tuple[str, object], ...] = ()
    max_tokens: int | None = None  # None: default_max_tokens of the device
    packed: bool | None = None
    attention: str = "auto"  # the packed attention backend (encoder/attention.py)

    def load(self) -> SentenceEncoder:
        """The encoder, loaded once until `release_encoder`: the jobs of a step run here reuse the step's."""
        if self not in _loaded:
            _loaded.clear()  # one encoder in memory at a time
            encoder = self._load()
            # the spec with "auto" resolved (what a step sends its jobs) names the same encoder
            _loaded[self] = _loaded[replace(self, precision=encoder.precision)] = encoder
        return _loaded[self]

    def _load(self) -> SentenceEncoder:
        return SentenceEncoder.load(
            self.model,
            device=self.device,
            overrides=dict(self.overrides),
            max_tokens=self.max_tokens,
            packed=self.packed,
            attention=self.attention,
            precision=self.precision,
        )


_loaded: dict[EncoderSpec, SentenceEncoder] = {}
_kept = 0  # `encoder_kept` scopes open: `release_encoder` waits for the last to close


def release_encoder() -> None:
    """Free the encoder kept loaded by `EncoderSpec.load`, unless an `encoder_kept` scope is open."""
    if not _kept:
        _loaded.clear()


@contextmanager
def encoder_kept() -> Iterator[None]:
    """Keep the encoder `EncoderSpec.load` loads across the steps run within (each `encode` releases it
    when it ends), so that several of them load the model once; released at the end."""
    global _kept
    _kept += 1
    try:
        yield
    finally:
        _kept -= 1
        release_encoder()
