"""The build of a language's corpus: its inputs, sifted, written as text shards and their manifest."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from bitextmine.corpus.settings import CorpusSettings
from bitextmine.corpus.sift import iter_corpus
from bitextmine.errors import Warn, warn_user
from bitextmine.text.reader import CorpusCounts, CorpusError, Row, display_name
from bitextmine.workspace.corpus import (
    CorpusManifest,
    SourceInfo,
    TextShard,
    clear_corpus,
    remove_corpus,
    write_manifest,
    write_text_shards,
)


def build_corpus(
    paths: Sequence[str],
    lang: str,
    out_dir: Path,
    settings: CorpusSettings,
    *,
    warn: Warn = warn_user,
    on_shard: Callable[[TextShard], None] | None = None,
) -> CorpusManifest:
    """Read, clean (and dedup) `paths` into text shards in `out_dir` in one pass, then write its manifest.

    Any error (bad input, a failed write, an interrupt) leaves `out_dir` without shards or manifest.
    """
    plan = plan_corpus(paths, lang, settings)
    clear_corpus(out_dir)
    counts = CorpusCounts()
    rows = iter_corpus(paths, counts, settings, warn)
    return write_corpus(plan, paths, rows, counts, out_dir, on_shard)


def plan_corpus(paths: Sequence[str], lang: str, settings: CorpusSettings) -> CorpusManifest:
    """The manifest of the corpus `paths` would make, without shards: its inputs as they are now (a
    missing input is an error) and its settings."""
    if not paths:
        raise CorpusError("no input files")
    sources = [SourceInfo.of(p) for p in paths]
    return CorpusManifest(
        lang,
        sources,
        settings.shard_size,
        settings.dedup,
        settings.max_chars,
        columns=settings.columns,
        lid=settings.lid,
    )


def write_corpus(
    plan: CorpusManifest,
    paths: Sequence[str],
    rows: Iterable[Row],
    counts: CorpusCounts,
    out_dir: Path,
    on_shard: Callable[[TextShard], None] | None = None,
) -> CorpusManifest:
    """Write `rows` (read from `paths`; `counts` is final once they are consumed) as the text shards of
    `plan`, then its manifest; any error removes them."""
    try:
        shards = write_text_shards(rows, Path(out_dir), plan.shard_size, on_shard)
        if not shards:
            raise CorpusError(_no_sentences(paths, counts))
        manifest = replace(plan, shards=shards, counts=counts, complete=True)
        write_manifest(out_dir, manifest)
    except BaseException:
        remove_corpus(out_dir)  # bad input or a failed write leaves no shards of a half-read corpus
        raise
    return manifest


def _no_sentences(paths: Sequence[str], counts: CorpusCounts) -> str:
    """Why a corpus has no sentences: every line empty, or which filters dropped the others."""
    names = ", ".join(display_name(p) for p in paths)
    dropped = {
        "empty": counts.empty,
        "by --lid": counts.wrong_language,
        "without the columns asked for": counts.missing_columns,
    }
    if counts.lines == counts.empty:
        return f"no sentences in {names}: every line is empty"
    reasons = ", ".join(f"{n:,} {why}" for why, n in dropped.items() if n)
    return f"no sentences in {names}: every line was dropped ({reasons})"
