"""bitextmine: bitext mining with cross-lingual sentence encoders."""

__version__ = "0.1.0"
