"""`mine-files A B`: two text files mined in one call, as LASER's mine_bitexts.py does, by the workspace
steps: encode both files, index both languages, mine. The workspace is kept, so a rerun reuses what each
step finds done (text and embedding shards, an index that covers the vectors, neighbour lists)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bitextmine.calibration.thresholds import encoder_threshold, parse_threshold
from bitextmine.encoder.spec import EncoderSpec
from bitextmine.errors import BitextmineError
from bitextmine.files import is_stream
from bitextmine.mining.mined_file import output_format
from bitextmine.progress import Progress
from bitextmine.search.index_files import IndexInfo, load_index_info
from bitextmine.steps.encode import EncodeOptions, EncodeSummary, encode, loaded_encoder
from bitextmine.steps.index import index
from bitextmine.steps.mine import MineOptions, MineSummary, check_pair, mine
from bitextmine.workspace.language import open_language
from bitextmine.workspace.layout import Workspace, check_workspace

_log = logging.getLogger(__name__)
WORKDIR_SUFFIX = "-work"  # the default workspace: OUTPUT's folder / NAME-work


@dataclass
class MineFilesSummary:
    workspace: Path
    encoded: dict[str, EncodeSummary]  # by language
    indexed: dict[str, IndexInfo | None]  # by language; None: its index covered the vectors already
    mined: MineSummary

    def to_json(self) -> dict[str, Any]:
        return {
            "workspace": str(self.workspace),
            "encoded": {lang: encoded.to_json() for lang, encoded in self.encoded.items()},
            "indexed": {lang: built and built.to_json() for lang, built in self.indexed.items()},
            "mined": self.mined.to_json(),
        }


def default_workdir(output: Path, fmt: str | None = None, pair: str = "mined") -> Path:
    """The workspace kept beside the output: ``out/pairs.jsonl`` -> ``out/pairs-work``; beside a stream
    (stdout, a FIFO, a device: ``/dev/stdout-work`` would be on devtmpfs), ``./PAIR-work``."""
    output = Path(output)
    if is_stream(output):
        return Path(pair + WORKDIR_SUFFIX)
    name = output.name.removesuffix(f".{output_format(output, fmt)}")
    return output.with_name(name + WORKDIR_SUFFIX)


def mine_files(
    workspace: Workspace,
    files: tuple[str | Path, str | Path],
    langs: tuple[str, str],
    model: str | EncoderSpec,
    options: MineOptions | None = None,
    progress: Progress | None = None,
    *,
    encode_options: EncodeOptions | None = None,
) -> MineFilesSummary:
    """Mine `files[0]` (language `langs[0]`) against `files[1]` (`langs[1]`) with `model` (a model dir or
    hub id, or an EncoderSpec): `encode`, `index` and `mine` in `workspace` (by the command line:
    `default_workdir` of the output), each reusing what it finds done. `options` are mine's: the pairs
    go to `options.output`, by default the workspace's."""
    check_workspace(workspace, "mine_files")
    src, tgt = langs
    check_pair(src, tgt)
    options, progress = options or MineOptions(), progress or Progress()
    if isinstance(options.threshold, str):
        parse_threshold(options.threshold)  # a mistyped one fails before the model loads
    options.output_target(workspace, src, tgt, inputs=files)
    shared = loaded_encoder(model)  # one load for both files
    store = options.thresholds or workspace.thresholds_file()
    # "auto" without a calibration for this model fails now, not after the encoding and indexing
    encoder_threshold(
        options.threshold, store, shared.get(), margin=options.margin, k=options.k, pair=f"{src}-{tgt}"
    )
    encoded = {
        lang: encode(workspace, [path], lang, shared, encode_options, progress)
        for path, lang in zip(files, langs, strict=True)
    }
    del shared  # the model's memory is free for indexing and mining
    indexed = {lang: _index_unless_current(workspace, lang, progress) for lang in langs}
    mined = mine(workspace, src, tgt, options, progress)
    return MineFilesSummary(workspace.root, encoded, indexed, mined)


def _index_unless_current(workspace: Workspace, lang: str, progress: Progress) -> IndexInfo | None:
    """Index `lang` unless its index covers its vectors (None then)."""
    vectors = open_language(workspace, lang).vectors
    try:
        load_index_info(workspace.index_dir(), lang, vectors)
    except BitextmineError:  # none, stale or unreadable: `index` builds it again
        built = index(workspace, lang, progress=progress)
        _log.info("index %s: %s, %s vectors", lang, built.factory, f"{built.count:,}")
        return built
    _log.info("index %s: reused", lang)
    return None
