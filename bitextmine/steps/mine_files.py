"""`mine-files A B`: two text files mined in one call, as LASER's mine_bitexts.py does, by the workspace
steps: encode both files, index both languages, mine. The workspace is kept, so a rerun reuses what each
step finds done (text and embedding shards, an index that covers the vectors, neighbour lists)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from bitextmine.calibration.thresholds import parse_threshold
from bitextmine.encoder.spec import EncoderSpec, encoder_kept
from bitextmine.errors import BitextmineError
from bitextmine.mining.output import output_format
from bitextmine.search.index_files import IndexInfo, load_index_info
from bitextmine.steps.encode import EncodeOptions, EncodeReporter, EncodeSummary, encode
from bitextmine.steps.index import index
from bitextmine.steps.mine import MineOptions, MineSummary, check_pair, mine
from bitextmine.workspace.language import open_language
from bitextmine.workspace.layout import Workspace

WORKDIR_SUFFIX = "-work"  # the default workspace: OUTPUT's folder / NAME-work


class MineFilesReporter(EncodeReporter):
    """What `mine_files` tells as it goes: the encode step's reports, then each index build and the
    search, announced by `step_started` and counted by `advance`."""

    def step_started(self, name: str, total: int, deferred: bool = False) -> None:
        """A step after the encoding begins: `name` ("indexing de", "mining de-en") over `total` rows;
        `deferred`: its work starts at its first `advance`, if any (an exact index has none)."""

    def index_ready(self, lang: str, built: IndexInfo | None) -> None:
        """`lang`'s index is ready: `built` now, or (None) the one there covered the vectors already."""


@dataclass
class MineFilesSummary:
    workspace: Path
    encoded: dict[str, EncodeSummary]  # by language
    indexed: dict[str, IndexInfo | None]  # by language; None: its index covered the vectors already
    mined: MineSummary


def default_workdir(output: Path, fmt: str | None = None) -> Path:
    """The workspace kept beside the output: ``out/pairs.jsonl`` -> ``out/pairs-work``."""
    output = Path(output)
    name = output.name.removesuffix(f".{output_format(output, fmt)}")
    return output.with_name(name + WORKDIR_SUFFIX)


def mine_files(
    src_file: str | Path,
    tgt_file: str | Path,
    langs: tuple[str, str],
    model: str | EncoderSpec,
    output: Path,
    workspace: Workspace | None = None,
    options: MineOptions | None = None,
    encode_options: EncodeOptions | None = None,
    reporter: MineFilesReporter | None = None,
) -> MineFilesSummary:
    """Mine `src_file` (language `langs[0]`) against `tgt_file` (`langs[1]`) with `model` (a model dir or
    hub id, or an EncoderSpec) into `output`: `encode`, `index` and `mine` in `workspace` (default:
    `default_workdir(output)`), each reusing what it finds done. `options` are mine's (their `output`
    is `output`)."""
    src, tgt = langs
    check_pair(src, tgt)
    options = replace(options or MineOptions(), output=Path(output))
    workspace = workspace or Workspace(default_workdir(output, options.format))
    reporter = reporter or MineFilesReporter()
    if isinstance(options.threshold, str):
        parse_threshold(options.threshold)  # a mistyped one fails before the encoding, not after it
    options.output_target(workspace, src, tgt, inputs=[src_file, tgt_file])
    with encoder_kept():  # both files: one model load
        encoded = {
            lang: encode([path], lang, workspace, model, encode_options, reporter)
            for path, lang in ((src_file, src), (tgt_file, tgt))
        }
    indexed = {lang: _index_unless_current(workspace, lang, reporter) for lang in langs}
    queries = sum(len(open_language(workspace, lang).vectors) for lang in langs)
    reporter.step_started(f"mining {src}-{tgt}", queries)
    mined = mine(workspace, src, tgt, options, reporter.advance)
    return MineFilesSummary(workspace.root, encoded, indexed, mined)


def _index_unless_current(workspace: Workspace, lang: str, reporter: MineFilesReporter) -> IndexInfo | None:
    """Index `lang` unless its index covers its vectors (None then)."""
    vectors = open_language(workspace, lang).vectors
    try:
        load_index_info(workspace.index_dir(), lang, vectors)
        built = None
    except BitextmineError:  # none, stale or unreadable: `index` builds it again
        reporter.step_started(f"indexing {lang}", len(vectors), deferred=True)
        built = index(workspace, lang, progress=reporter.advance)
    reporter.index_ready(lang, built)
    return built
