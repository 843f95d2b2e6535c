"""Sentence encoders: model loading, settings, packed block-diagonal forward.

Submodules are imported directly (``bitextmine.encoder.encoder`` etc.) so that light modules such
as ``batching`` and ``settings`` can be used without importing torch.
"""
