"""The mined file: kept pairs with their sentences and origins, in the format users load, written and
read back here alone (by `mine`, `score`, `train` and `eval bucc --mined`).

Formats (`FORMATS`, chosen by `--format` or the output's suffix):

- ``tsv.zst`` (default), ``tsv.gz``, ``tsv``: ``score<TAB>src<TAB>tgt<TAB>src id<TAB>tgt id`` and, when
  the corpora carry a meta column, ``<TAB>src meta<TAB>tgt meta``; an id is ``INPUT-PATH:LINE``.
- ``jsonl``: one object a pair with the keys of `COLUMNS` and ``translation``: ``{SRC_LANG: src,
  TGT_LANG: tgt}``, the field of Hugging Face translation datasets. Where `mine` learned its threshold on
  the regional precision (`--threshold auto`), ``precision`` too: the pair's estimated probability of
  being a translation (mining/regional_precision.py); the TSV's layout stays LASER's.
- ``parquet``: the same columns (needs pyarrow: ``pip install 'bitextmine[parquet]'``); its schema
  metadata holds, under the key ``bitextmine``, JSON saying what made the pairs (`parquet_metadata`).

Every format loads with Hugging Face ``datasets`` (``load_dataset("parquet" | "json" | "csv", ...)``;
the headerless TSV's recipe is in docs/commands.md). Compression and row groups are deterministic, so a
rerun writes the same bytes. Read back (`mined_records`), a file gives (score, src, tgt) records; a
malformed record is a one-line error naming the file and line (or row).
"""

from __future__ import annotations

import gzip
import json
import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import numpy as np
import zstandard

from bitextmine.errors import BitextmineError, Warn
from bitextmine.faults import crash_point
from bitextmine.files import OutputTarget
from bitextmine.mining.filters import FilterSettings, PairFilter
from bitextmine.text.reader import Row, read_lines
from bitextmine.version import __version__
from bitextmine.workspace.corpus import RowReader
from bitextmine.workspace.language import Language

FORMATS = ("tsv.zst", "tsv.gz", "tsv", "jsonl", "parquet")
TRANSLATION_FORMATS = ("jsonl", "parquet")  # the formats with a translation column
COLUMNS = (
    "score",
    "precision",
    "src",
    "tgt",
    "src_file",
    "src_line",
    "tgt_file",
    "tgt_line",
    "src_meta",
    "tgt_meta",
)
METADATA_KEY = (
    b"bitextmine"  # the parquet schema metadata's key (pandas writes b"pandas", datasets b"huggingface")
)
InputFiles = tuple[list[str], list[str]]  # the input paths of the source and target corpora
# scores, the source and target rows scored, and each pair's regional precision (None: not estimated)
ScoredRows = tuple[np.ndarray, list[Row], list[Row], np.ndarray | None]
KEPT_HISTOGRAM_BINS = 10
TSV_FIELDS = (5, 7)  # without and with the two meta columns
TSV_LAYOUT = "'score<TAB>src<TAB>tgt<TAB>src id<TAB>tgt id[<TAB>src meta<TAB>tgt meta]'"
NEEDED_COLUMNS = ("score", "src", "tgt")
PARQUET_BATCH_ROWS = 65_536


def output_format(path: Path, requested: str | None = None) -> str:
    """`requested`, or the format `path`'s suffix names; a one-line error if neither is known."""
    if requested is not None:
        if requested not in FORMATS:
            raise BitextmineError(f"unknown output format {requested!r}; choose one of {', '.join(FORMATS)}")
        return requested
    fmt = mined_format(path)
    if fmt is None:
        raise BitextmineError(f"{path}: cannot tell the output format from its name; pass --format")
    return fmt


def mined_format(path: Path) -> str | None:
    """The format `path`'s name ends with (None: not one of them)."""
    return next((fmt for fmt in FORMATS if Path(path).name.endswith(f".{fmt}")), None)


@dataclass
class MinedChunk:
    """Columns of kept pairs, in score order."""

    score: list[float]
    src: list[Row]
    tgt: list[Row]
    src_files: list[str]  # input paths of the source corpus, by Row.source
    tgt_files: list[str]
    langs: tuple[str, str]  # the keys of the translation column
    precision: list[float] | None = None  # each pair's regional precision, where it was estimated

    def records(self, with_meta: bool) -> Iterator[dict[str, Any]]:
        src_lang, tgt_lang = self.langs
        precisions = [None] * len(self.score) if self.precision is None else self.precision
        for score, precision, s, t in zip(self.score, precisions, self.src, self.tgt, strict=True):
            record: dict[str, Any] = {"score": round(score, 6)}
            if precision is not None:
                record["precision"] = round(precision, 6)
            record |= {
                "src": s.text,
                "tgt": t.text,
                "src_file": _printable(self.src_files[s.source]),
                "src_line": s.line,
                "tgt_file": _printable(self.tgt_files[t.source]),
                "tgt_line": t.line,
            }
            if with_meta:
                record["src_meta"], record["tgt_meta"] = s.meta, t.meta
            record["translation"] = {src_lang: s.text, tgt_lang: t.text}
            yield record


def check_translation_pair(fmt: str, src_lang: str, tgt_lang: str) -> None:
    """The translation column of jsonl and parquet is keyed by language: one language twice cannot be."""
    if fmt in TRANSLATION_FORMATS and src_lang == tgt_lang:
        raise BitextmineError(
            f"{fmt} output has a translation column keyed by language, and both sides are '{src_lang}': "
            "write tsv.zst, tsv.gz or tsv"
        )


class Threshold(Protocol):
    """The threshold a command applied (calibration's `ThresholdChoice`): its value, where it came from and
    what it thresholds (the margin, or the regional precision)."""

    value: float
    source: str
    scale: str


def mining_settings(
    model: str,
    fingerprint: str,
    margin: str,
    k: int,
    threshold: Threshold | None,
    filters: FilterSettings,
) -> dict[str, Any]:
    """The `settings` of `write_pairs`: what made the scores and what kept the pairs."""
    return {
        "model": model,
        "fingerprint": fingerprint,
        "margin": margin,
        "k": k,
        "threshold": None if threshold is None else threshold.value,
        "threshold_source": None if threshold is None else threshold.source,
        "threshold_scale": None if threshold is None else threshold.scale,
        "filters": asdict(filters),
    }


def parquet_metadata(src_lang: str, tgt_lang: str, settings: dict[str, Any]) -> dict[str, Any]:
    """What the parquet file says made its pairs: the languages, `settings` (model, fingerprint, margin,
    k, threshold, filters) and the bitextmine version."""
    return {"src_lang": src_lang, "tgt_lang": tgt_lang, **settings, "bitextmine_version": __version__}


def _printable(path: str) -> str:
    """`path` as valid UTF-8 in every format: the bytes of a name that is not UTF-8 as `\\xNN`."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


class _Writer(Protocol):
    def write(self, chunk: MinedChunk) -> None: ...
    def close(self) -> None: ...


class _TsvWriter:
    def __init__(self, raw: BinaryIO, with_meta: bool) -> None:
        self.raw, self.with_meta = raw, with_meta

    def write(self, chunk: MinedChunk) -> None:
        lines = []
        for r in chunk.records(self.with_meta):
            fields = [
                f"{r['score']:.6f}",
                r["src"],
                r["tgt"],
                _id(r["src_file"], r["src_line"]),
                _id(r["tgt_file"], r["tgt_line"]),
            ]
            if self.with_meta:
                fields += [r["src_meta"] or "", r["tgt_meta"] or ""]
            lines.append("\t".join(fields) + "\n")
        self.raw.write("".join(lines).encode())

    def close(self) -> None:
        pass


def _id(path: str, line: int) -> str:
    if "\t" in path or "\n" in path:
        raise BitextmineError(f"{path!r}: an input path with a TAB or newline cannot be an id in a TSV")
    return f"{path}:{line}"


class _JsonlWriter:
    def __init__(self, raw: BinaryIO, with_meta: bool) -> None:
        self.raw, self.with_meta = raw, with_meta

    def write(self, chunk: MinedChunk) -> None:
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in chunk.records(self.with_meta))
        self.raw.write(text.encode())

    def close(self) -> None:
        pass


class _ParquetWriter:
    def __init__(self, raw: BinaryIO, layout: Layout, metadata: dict[str, Any]) -> None:
        pa, pq = _pyarrow("parquet output")
        self.pa, self.with_meta = pa, layout.with_meta
        columns = [("score", pa.float64())] + [("precision", pa.float64())] * layout.with_precision
        columns += [("src", pa.string()), ("tgt", pa.string())]
        columns += [("src_file", pa.string()), ("src_line", pa.int64())]
        columns += [("tgt_file", pa.string()), ("tgt_line", pa.int64())]
        if layout.with_meta:
            columns += [("src_meta", pa.string()), ("tgt_meta", pa.string())]
        langs = (metadata["src_lang"], metadata["tgt_lang"])
        columns += [("translation", pa.struct([(lang, pa.string()) for lang in langs]))]
        described = {METADATA_KEY: json.dumps(metadata, sort_keys=True, ensure_ascii=False).encode()}
        self.schema = pa.schema(columns, metadata=described)
        self.writer = pq.ParquetWriter(raw, self.schema, compression="zstd")

    def write(self, chunk: MinedChunk) -> None:
        table = self.pa.Table.from_pylist(list(chunk.records(self.with_meta)), schema=self.schema)
        self.writer.write_table(table)

    def close(self) -> None:
        self.writer.close()


def _pyarrow(needed_for: str) -> tuple[Any, Any]:
    """pyarrow and pyarrow.parquet; without them a one-line error saying what `needed_for` them."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise BitextmineError(f"{needed_for} needs pyarrow: pip install 'bitextmine[parquet]'") from None
    return pa, pq


@dataclass(frozen=True)
class Layout:
    """The optional columns a mined file has: the corpora's meta columns, each pair's regional precision
    (in jsonl and parquet)."""

    with_meta: bool = False
    with_precision: bool = False


def _open_writer(
    raw: BinaryIO, fmt: str, layout: Layout, metadata: dict[str, Any]
) -> tuple[_Writer, BinaryIO]:
    """The writer of `fmt` over `raw`, and the stream it writes to (`raw`, or a compressor over it)."""
    stream: BinaryIO = raw
    if fmt == "tsv.zst":
        stream = zstandard.ZstdCompressor().stream_writer(raw, closefd=False)
    elif fmt == "tsv.gz":
        stream = gzip.GzipFile("", "wb", fileobj=raw, mtime=0)  # no name, no time: reruns give the same bytes
    if fmt == "jsonl":
        return _JsonlWriter(stream, layout.with_meta), stream
    if fmt == "parquet":
        return _ParquetWriter(stream, layout, metadata), stream
    return _TsvWriter(stream, layout.with_meta), stream


@dataclass
class MinedOutput:
    path: Path
    format: str
    kept: int  # pairs written
    preview: list[tuple[float, str, str]]  # the best pairs written
    histogram: dict[str, list[float]]  # of the written scores, KEPT_HISTOGRAM_BINS bins


def write_mined(
    target: OutputTarget,
    fmt: str,
    pairs: np.ndarray,
    src: Language,
    tgt: Language,
    pair_filter: PairFilter,
    settings: dict[str, Any],
    precision: np.ndarray | None = None,
    chunk: int = 500_000,
) -> MinedOutput:
    """Write the candidate records (CANDIDATE_DTYPE, by decreasing score) that pass `pair_filter` to
    `target` in `fmt`, with each one's regional `precision` where given, looking sentences up `chunk`
    pairs at a time; `settings` say how they were mined (see `write_pairs`)."""

    readers = RowReader(src.corpus_dir, src.corpus), RowReader(tgt.corpus_dir, tgt.corpus)

    def chunks() -> Iterator[ScoredRows]:
        for first in range(0, len(pairs), chunk):
            part = pairs[first : first + chunk]
            part_precision = None if precision is None else precision[first : first + chunk]
            yield part["score"], readers[0].rows(part["src"]), readers[1].rows(part["tgt"]), part_precision

    files: InputFiles = [s.path for s in src.corpus.sources], [s.path for s in tgt.corpus.sources]
    span = (float(pairs["score"][-1]), float(pairs["score"][0])) if len(pairs) else (0.0, 1.0)
    layout = Layout(_has_meta(src) or _has_meta(tgt), precision is not None)
    return write_pairs(target, fmt, chunks(), files, pair_filter, span, layout, settings=settings)


def write_pairs(
    target: OutputTarget,
    fmt: str,
    chunks: Iterable[ScoredRows],
    files: InputFiles,
    pair_filter: PairFilter,
    span: tuple[float, float],
    layout: Layout = Layout(),
    preview: int = 10,
    *,
    settings: dict[str, Any] | None = None,
) -> MinedOutput:
    """Write the pairs of `chunks` that pass `pair_filter` to `target` in `fmt`, their translation column
    keyed by the filter's language pair; the histogram of what was written spans `span`, and the first
    `preview` pairs written come back. `settings` (model, fingerprint, margin, k, threshold, filters) go
    into a parquet file's schema metadata."""
    langs = pair_filter.langs
    check_translation_pair(fmt, *langs)
    counts = np.zeros(KEPT_HISTOGRAM_BINS, dtype=np.int64)
    shown: list[tuple[float, str, str]] = []
    kept = 0
    with target.open("wb") as raw:
        writer, stream = _open_writer(raw, fmt, layout, parquet_metadata(*langs, settings or {}))
        for scores, src_rows, tgt_rows, precision in chunks:
            mask = pair_filter.keep(scores, [r.text for r in src_rows], [r.text for r in tgt_rows])
            written = MinedChunk(
                np.asarray(scores)[mask].tolist(),
                [r for r, k in zip(src_rows, mask, strict=True) if k],
                [r for r, k in zip(tgt_rows, mask, strict=True) if k],
                *files,
                langs,
                None if precision is None else np.asarray(precision)[mask].tolist(),
            )
            writer.write(written)
            counts += np.histogram(written.score, bins=KEPT_HISTOGRAM_BINS, range=span)[0]
            kept += len(written.score)
            best = zip(written.score, written.src, written.tgt, strict=True)
            shown += [(score, s.text, t.text) for score, s, t in best][: preview - len(shown)]
            crash_point("mine.write-chunk")
        writer.close()
        if stream is not raw:
            stream.close()  # the compressor's end of stream; target.open closes `raw`
    edges = np.histogram_bin_edges(np.zeros(0), bins=KEPT_HISTOGRAM_BINS, range=span)
    histogram = {"edges": [round(float(e), 6) for e in edges], "counts": counts.tolist()}
    return MinedOutput(target.path, fmt, kept, shown, histogram)


def _has_meta(language: Language) -> bool:
    columns = language.corpus.columns
    return columns is not None and columns.meta is not None


def mined_records(path: Path, fmt: str, warn: Warn) -> Iterator[tuple[float, str, str]]:
    """(score, src, tgt) of every record; a malformed one is an error naming file and line (or row)."""
    if fmt == "parquet":
        return _parquet_records(path)
    if fmt == "jsonl":
        return _jsonl_records(path, warn)
    return _tsv_records(path, warn)


def _tsv_records(path: Path, warn: Warn) -> Iterator[tuple[float, str, str]]:
    for number, line in read_lines(path, warn):
        fields = line.split("\t")
        if len(fields) not in TSV_FIELDS:
            raise BitextmineError(f"{path}:{number}: expected mine's {TSV_LAYOUT}, got {len(fields)} fields")
        yield parse_score(fields[0], f"{path}:{number}"), fields[1], fields[2]


def _jsonl_records(path: Path, warn: Warn) -> Iterator[tuple[float, str, str]]:
    for number, line in read_lines(path, warn):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BitextmineError(f"{path}:{number}: not JSON ({exc.msg})") from None
        yield _fields(record, f"{path}:{number}")


def _parquet_records(path: Path) -> Iterator[tuple[float, str, str]]:
    pa, pq = _pyarrow(f"{path}: reading parquet")
    number = 0
    try:
        table = pq.ParquetFile(path)
        missing = [c for c in NEEDED_COLUMNS if c not in table.schema_arrow.names]
        if missing:
            raise BitextmineError(
                f"{path}: no {', '.join(missing)} column; mine's output has score, src, tgt"
            )
        for batch in table.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=list(NEEDED_COLUMNS)):
            for record in batch.to_pylist():
                number += 1
                yield _fields(record, f"{path}: row {number}")
    except (OSError, pa.ArrowException) as exc:
        raise BitextmineError(f"{path}: not a readable parquet file ({exc})") from None


def _fields(record: Any, where: str) -> tuple[float, str, str]:
    """(score, src, tgt) of a JSON object or parquet row."""
    if not isinstance(record, dict):
        raise BitextmineError(f"{where}: expected a JSON object with score, src and tgt")
    missing = [key for key in NEEDED_COLUMNS if record.get(key) is None]
    if missing:
        raise BitextmineError(f"{where}: no {', '.join(missing)}")
    score, src, tgt = (record[key] for key in NEEDED_COLUMNS)
    if isinstance(score, bool) or not isinstance(score, int | float):
        raise BitextmineError(f"{where}: score {score!r} is not a number")
    if not isinstance(src, str) or not isinstance(tgt, str):
        raise BitextmineError(f"{where}: src and tgt must be strings")
    return _finite(float(score), score, where), src, tgt


def parse_score(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise BitextmineError(f"{where}: score {text!r} is not a number") from None
    return _finite(value, text, where)


def _finite(value: float, shown: Any, where: str) -> float:
    if not math.isfinite(value):
        raise BitextmineError(f"{where}: score {shown!r} is not a finite number")
    return value
