"""bitextmine: mine translation pairs from monolingual corpora with a cross-lingual sentence encoder.

The public Python API (docs/api.md). The workspace steps are the functions the command line runs::

    import bitextmine as bm

    work = bm.Workspace("bitextmine-work")
    bm.encode(work, ["de.txt"], "de", model="intfloat/multilingual-e5-small")
    bm.encode(work, ["en.txt"], "en", model="intfloat/multilingual-e5-small")
    bm.index(work, "de"), bm.index(work, "en")
    summary = bm.mine(work, "de", "en", bm.MineOptions(threshold=1.06))

and in memory::

    encoder = bm.load_encoder("intfloat/multilingual-e5-small")
    src, tgt = bm.embed(encoder, german), bm.embed(encoder, english)
    pairs = bm.mine_arrays(src, tgt)  # one-to-one candidates: for src, tgt, score in pairs
    pairs = bm.mine_sentences(encoder, german, english)  # in one call: for score, de, en, i, j in pairs

Names are imported on first use, so `import bitextmine` loads neither torch nor FAISS and changes no
global state (threads, logging, warning filters) until a function is called.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from bitextmine.version import __version__ as __version__  # re-exported: bitextmine.__version__

_EXPORTS = {
    "Workspace": "bitextmine.workspace.layout",
    "BitextmineError": "bitextmine.errors",
    "BitextmineWarning": "bitextmine.errors",
    "Progress": "bitextmine.progress",
    "ProgressDisplay": "bitextmine.progress",
    "encode": "bitextmine.steps.encode",
    "EncodeOptions": "bitextmine.steps.encode",
    "EncodeSummary": "bitextmine.steps.encode",
    "import_embeddings": "bitextmine.steps.encode",
    "index": "bitextmine.steps.index",
    "IndexOptions": "bitextmine.steps.index",
    "IndexInfo": "bitextmine.search.index_files",
    "mine": "bitextmine.steps.mine",
    "MineOptions": "bitextmine.steps.mine",
    "MineSummary": "bitextmine.steps.mine",
    "FilterSettings": "bitextmine.mining.filters",
    "parse_filters": "bitextmine.mining.filters",
    "score_bitext": "bitextmine.steps.score",
    "ScoreOptions": "bitextmine.steps.score",
    "ScoreSummary": "bitextmine.steps.score",
    "read_bitext": "bitextmine.text.bitext",
    "calibrate": "bitextmine.steps.calibrate",
    "CalibrateOptions": "bitextmine.steps.calibrate",
    "evaluate_bucc": "bitextmine.evaluation.bucc",
    "EvaluateOptions": "bitextmine.evaluation.bucc",
    "MiningSettings": "bitextmine.mining.settings",
    "read_bucc": "bitextmine.calibration.bucc",
    "read_aligned": "bitextmine.calibration.aligned_pairs",
    "sample_split": "bitextmine.calibration.bucc",
    "score_mined_file": "bitextmine.calibration.split_mining",
    # not "train": that is the subpackage bitextmine.train, which its import would bind over the function
    "train_encoder": "bitextmine.train.loop:train",
    "TrainConfig": "bitextmine.train.loop",
    "RECIPES": "bitextmine.train.recipes",
    "EncoderSpec": "bitextmine.encoder.spec",
    "SentenceEncoder": "bitextmine.encoder.encoder",
    "load_encoder": "bitextmine.encoder.encoder",
    "embed": "bitextmine.encoder.cache",
    "mine_arrays": "bitextmine.mining.arrays",
    "mine_sentences": "bitextmine.mining.sentences",
    "SentencePairs": "bitextmine.mining.sentences",
    "SentencePair": "bitextmine.mining.sentences",
    "Candidates": "bitextmine.mining.selection",
    "LauncherConfig": "bitextmine.launch.config",
}

__all__ = [
    "RECIPES",
    "BitextmineError",
    "BitextmineWarning",
    "CalibrateOptions",
    "Candidates",
    "EncodeOptions",
    "EncodeSummary",
    "EncoderSpec",
    "EvaluateOptions",
    "FilterSettings",
    "IndexInfo",
    "IndexOptions",
    "LauncherConfig",
    "MineOptions",
    "MineSummary",
    "MiningSettings",
    "Progress",
    "ProgressDisplay",
    "ScoreOptions",
    "ScoreSummary",
    "SentenceEncoder",
    "SentencePair",
    "SentencePairs",
    "TrainConfig",
    "Workspace",
    "calibrate",
    "embed",
    "encode",
    "evaluate_bucc",
    "import_embeddings",
    "index",
    "load_encoder",
    "mine",
    "mine_arrays",
    "mine_sentences",
    "parse_filters",
    "read_aligned",
    "read_bitext",
    "read_bucc",
    "sample_split",
    "score_bitext",
    "score_mined_file",
    "train_encoder",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'bitextmine' has no attribute {name!r}")
    module, _, attribute = _EXPORTS[name].partition(":")
    value = getattr(importlib.import_module(module), attribute or name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public API alone: not the names this module imports for itself (annotations, Any, ...)."""
    return sorted(__all__)


if TYPE_CHECKING:
    from bitextmine.calibration.bucc import read_bucc, sample_split
    from bitextmine.calibration.split_mining import score_mined_file
    from bitextmine.encoder.cache import embed
    from bitextmine.encoder.encoder import SentenceEncoder, load_encoder
    from bitextmine.encoder.spec import EncoderSpec
    from bitextmine.errors import BitextmineError, BitextmineWarning
    from bitextmine.evaluation.bucc import EvaluateOptions, evaluate_bucc
    from bitextmine.launch.config import LauncherConfig
    from bitextmine.mining.arrays import mine_arrays
    from bitextmine.mining.filters import FilterSettings, parse_filters
    from bitextmine.mining.selection import Candidates
    from bitextmine.mining.sentences import SentencePair, SentencePairs, mine_sentences
    from bitextmine.mining.settings import MiningSettings
    from bitextmine.progress import Progress, ProgressDisplay
    from bitextmine.search.index_files import IndexInfo
    from bitextmine.steps.calibrate import CalibrateOptions, calibrate
    from bitextmine.steps.encode import EncodeOptions, EncodeSummary, encode, import_embeddings
    from bitextmine.steps.index import IndexOptions, index
    from bitextmine.steps.mine import MineOptions, MineSummary, mine
    from bitextmine.steps.score import ScoreOptions, ScoreSummary, score_bitext
    from bitextmine.text.bitext import read_bitext
    from bitextmine.train.loop import TrainConfig
    from bitextmine.train.loop import train as train_encoder
    from bitextmine.train.recipes import RECIPES
    from bitextmine.workspace.layout import Workspace
