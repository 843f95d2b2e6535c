"""The package's version: written once here, read by pyproject.toml, `--version` and the mined files'
settings, imported by any module without loading the public API (`bitextmine/__init__.py`)."""

__version__ = "0.1.0"
