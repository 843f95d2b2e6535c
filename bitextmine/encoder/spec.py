"""How to load an encoder: what a job on another machine needs to rebuild it, and `LoadedEncoder`, the
encoder its owner keeps loaded for the jobs run in this process."""

from __future__ import annotations

from dataclasses import dataclass

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
        return SentenceEncoder.load(
            self.model,
            device=self.device,
            overrides=dict(self.overrides),
            max_tokens=self.max_tokens,
            packed=self.packed,
            attention=self.attention,
            precision=self.precision,
        )


class LoadedEncoder:
    """The encoder of `spec`, loaded once for its owner: the encode step loads it and hands it to its
    shard jobs, so those run in this process reuse it; a job sent to another process gets the spec alone
    and loads the encoder there."""

    def __init__(self, spec: EncoderSpec, encoder: SentenceEncoder | None = None) -> None:
        self.spec, self._encoder = spec, encoder

    def get(self) -> SentenceEncoder:
        if self._encoder is None:
            self._encoder = self.spec.load()
        return self._encoder

    def __reduce__(self) -> tuple[type[LoadedEncoder], tuple[EncoderSpec]]:
        return LoadedEncoder, (self.spec,)  # the weights stay here
