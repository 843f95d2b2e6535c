"""Sentence encoders: model loading, settings, packed block-diagonal forward."""

from bitextmine.encoder.encoder import Encoded, SentenceEncoder, pick_device
from bitextmine.encoder.settings import EncoderSettings, resolve_settings

__all__ = ["Encoded", "EncoderSettings", "SentenceEncoder", "pick_device", "resolve_settings"]
