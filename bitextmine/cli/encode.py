"""`bitextmine encode`: parsing and printing; the work is in bitextmine.steps.encode."""

from __future__ import annotations

from typing import Annotated, Literal

import typer
from rich.table import Table

from bitextmine.cli.app import (
    AttentionOption,
    DeviceOption,
    ForceLangOption,
    JsonOption,
    LidOption,
    ModelOption,
    PrecisionOption,
    ThreadsOption,
    WorkdirOption,
    app,
    check_known_langs,
    checked_by,
    encoder_spec,
    out,
    refuse_flags,
    require_model,
    set_threads,
    user_errors,
)
from bitextmine.cli.launcher_options import NO_FLAGS, LauncherFlags, with_launcher_options
from bitextmine.cli.output import ProgressDisplay, emit_json, fields_table, json_target
from bitextmine.errors import BitextmineError
from bitextmine.text.languages import check_lang
from bitextmine.text.lid import RULE_CONFIDENCE
from bitextmine.text.reader import Columns
from bitextmine.workspace.layout import DEFAULT_WORKDIR, Workspace

# encoder/st_files.py's POOLING_MODES (tests/cli/test_choices.py)
Pooling = Literal["cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken"]


def _summary_table(summary) -> Table:
    counts = summary.counts
    drops = {"empty": counts.empty, "duplicate": counts.duplicates}
    drops |= {  # named where they happened: their options are off by default
        why: n
        for why, n in (("by --lid", counts.wrong_language), ("too few columns", counts.missing_columns))
        if n
    }
    rows = [
        ("rows in", f"{counts.lines:,}"),
        ("rows kept", f"{summary.rows:,}"),
        ("dropped", f"{sum(drops.values()):,} ({', '.join(f'{n:,} {why}' for why, n in drops.items())})"),
        ("invalid UTF-8 (replaced)", f"{counts.invalid_utf8:,}"),
        ("cut to --max-chars", f"{counts.too_long:,}"),
        ("truncated to max length", f"{summary.truncated:,}"),
        ("shards", f"{summary.shards} ({summary.shards_encoded} encoded now)"),
        ("forward", ", ".join(summary.forwards) or "none (imported vectors)"),
        ("seconds", f"{summary.seconds:,.1f}"),
    ]
    if summary.sentences_encoded:
        rows.append(("sentences/s", f"{summary.sentences_encoded / summary.encode_seconds:,.1f}"))
    if summary.tokens_encoded:
        rows.append(("tokens/s", f"{summary.tokens_encoded / summary.encode_seconds:,.0f}"))
    rows.append(("embeddings", str(summary.embedding_dir)))
    return fields_table(f"encode {summary.lang}", rows)


@app.command()
@with_launcher_options
def encode(
    files: Annotated[
        list[str],
        typer.Argument(help="Corpus files (.txt, .gz, .zst, .xz; '-' for stdin), one sentence a line."),
    ],
    lang: Annotated[
        str,
        typer.Option(
            "--lang",
            "-l",
            help="Language code the sentences belong to, e.g. de.",
            callback=checked_by(check_lang),
        ),
    ],
    workdir: WorkdirOption = DEFAULT_WORKDIR,
    model: ModelOption = None,
    max_tokens: Annotated[
        int | None,
        typer.Option(help="Token budget of one packed batch \\[default: 4096 on CPU, 32768 on CUDA].", min=1),
    ] = None,
    shard_size: Annotated[
        int, typer.Option(help="Sentences per shard (the unit of resume).", min=1)
    ] = 100_000,
    device: DeviceOption = "auto",
    precision: PrecisionOption = "auto",
    dedup: Annotated[
        bool, typer.Option("--dedup", help="Drop exact duplicate sentences (after cleaning).")
    ] = False,
    max_chars: Annotated[int, typer.Option(help="Cut longer lines to this many characters.", min=1)] = 10_000,
    corpus_workers: Annotated[
        int,
        typer.Option(
            help="Input files read at once, in that many processes (with --launcher local; another "
            "launcher runs one job a file).",
            min=1,
        ),
    ] = 1,
    text_column: Annotated[
        int | None,
        typer.Option(
            help="TAB-separated input: the sentence is this column (1-based); lines with fewer columns are "
            "skipped and counted \\[default: the whole line].",
            min=1,
            rich_help_panel="TSV input and language identification",
        ),
    ] = None,
    meta_column: Annotated[
        int | None,
        typer.Option(
            help="With --text-column: carry this column (e.g. a URL or an id) through to the text shards and "
            "the mined pairs.",
            min=1,
            rich_help_panel="TSV input and language identification",
        ),
    ] = None,
    lid: LidOption = None,
    lid_lang: Annotated[
        str | None,
        typer.Option(
            help="The language --lid identifies, as an ISO 639-1 or 639-3 code, when --lang is a code it "
            "does not know \\[default: --lang].",
            rich_help_panel="TSV input and language identification",
        ),
    ] = None,
    force_lang: ForceLangOption = False,
    lid_min_confidence: Annotated[
        float | None,
        typer.Option(
            help="The probability from which --lid reject takes a line for another language, and --lid "
            f"accept for --lang \\[default: {RULE_CONFIDENCE['reject']} for reject, "
            f"{RULE_CONFIDENCE['accept']} for accept].",
            min=0.0,
            max=1.0,
            show_default=False,
            rich_help_panel="TSV input and language identification",
        ),
    ] = None,
    pooling: Annotated[
        Pooling | None,
        typer.Option(
            metavar="MODE",
            help="cls, max, mean, mean_sqrt_len_tokens, weightedmean or lasttoken (sentence-transformers' "
            "modes) \\[default: from the model dir, else mean].",
        ),
    ] = None,
    prefix: Annotated[
        str | None, typer.Option(help="Text put before every sentence, e.g. 'query: '.")
    ] = None,
    max_length: Annotated[
        int | None, typer.Option(help="Max tokens per sentence; longer ones are truncated.", min=2)
    ] = None,
    threads: ThreadsOption = None,
    attention: AttentionOption = "auto",
    padded: Annotated[
        bool, typer.Option("--padded", help="Use the padded forward instead of packing.")
    ] = False,
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite", help="Rebuild this language even if it exists with other inputs or another model."
        ),
    ] = False,
    embeddings: Annotated[
        str | None,
        typer.Option(
            help="Import these vectors instead of encoding: a .npy \\[lines, dim], or raw rows (LASER's "
            "layout, with --dim); one row per line of the single input file, empty lines included.",
            rich_help_panel="Bring your own embeddings",
        ),
    ] = None,
    dim: Annotated[
        int | None,
        typer.Option(
            help="Values per row of a raw --embeddings file.",
            min=1,
            rich_help_panel="Bring your own embeddings",
        ),
    ] = None,
    embeddings_dtype: Annotated[
        Literal["float32", "float16"] | None,  # workspace/external.py's DTYPES
        typer.Option(
            help="float32 or float16: the values of a raw --embeddings file \\[default: float32].",
            rich_help_panel="Bring your own embeddings",
        ),
    ] = None,
    model_name: Annotated[
        str | None,
        typer.Option(
            help="The model that made the --embeddings: languages imported under the same name can be mined "
            "together.",
            rich_help_panel="Bring your own embeddings",
        ),
    ] = None,
    json_path: JsonOption = None,
    cluster: LauncherFlags = NO_FLAGS,
) -> None:
    """Encode corpora of one language into the workspace.

    Reads FILES, cleans and optionally deduplicates the lines, writes text shards to
    WORK/corpora/LANG/ (shard-N.tsv: source index, line number, sentence) and L2-normalized float16
    embeddings to WORK/emb/LANG/ (shard-N.npy), each with a manifest.json. A rerun skips complete
    shards, so an interrupted run resumes where it stopped. Model defaults (pooling, prefix, max length)
    come from the model dir's bitextmine.json, else its sentence-transformers files, else the flags.
    With --embeddings, the vectors come from that file instead of a model (--model-name names it).
    With --text-column, each line is TAB-separated and one column is the sentence (--meta-column: one
    more is carried along, e.g. a URL). Lines confidently in another language are dropped (--lid).
    """
    from bitextmine.steps.encode import EncodeOptions
    from bitextmine.steps.encode import encode as encode_files

    check_known_langs([lang], force_lang, lid_lang)
    workspace = Workspace(workdir)
    with user_errors():
        options = EncodeOptions(
            shard_size=shard_size,
            dedup=dedup,
            max_chars=max_chars,
            overwrite=overwrite,
            columns=_columns(text_column, meta_column),
            lid=lid,
            lid_lang=lid_lang,
            lid_min_confidence=lid_min_confidence,
            corpus_workers=corpus_workers,
        )
        json_out = json_target(json_path, inputs=[*files, embeddings], workspace=workspace)
        if embeddings is not None:
            used = _model_flags_used(
                pooling, prefix, max_length, padded, attention, precision, device, cluster
            )
            refuse_flags(used, "--embeddings imports vectors in this process, without a model")
    if embeddings is not None:
        summary = _import(workspace, files, lang, embeddings, model_name, dim, embeddings_dtype, options)
    else:
        model = require_model(model)
        set_threads(threads)
        overrides = {"pooling": pooling, "prefix": prefix, "max_length": max_length}
        with user_errors():
            spec = encoder_spec(
                model, device, precision, overrides, max_tokens=max_tokens, padded=padded, attention=attention
            )
            config = cluster.config("encode", workspace.logs_dir("encode"))
            with ProgressDisplay() as progress:
                summary = encode_files(workspace, files, lang, spec, options, progress, launcher=config)
    out.print(_summary_table(summary))
    emit_json(json_out, summary.to_json())


def _model_flags_used(
    pooling: str | None,
    prefix: str | None,
    max_length: int | None,
    padded: bool,
    attention: str,
    precision: str,
    device: str,
    cluster: LauncherFlags,
) -> dict[str, bool]:
    """Whether each flag of encoding with a model (or in other processes) was used, by flag."""
    return {
        "--pooling": pooling is not None,
        "--prefix": prefix is not None,
        "--max-length": max_length is not None,
        "--padded": padded,
        "--attention": attention != "auto",
        "--precision": precision != "auto",
        "--device": device != "auto",
        "--launcher": cluster.launcher not in (None, "local"),
    }


def _columns(text_column: int | None, meta_column: int | None) -> Columns | None:
    if text_column is None:
        if meta_column is not None:
            raise BitextmineError("--meta-column needs --text-column: which column holds the sentence?")
        return None
    return Columns(text_column, meta_column)


def _import(workspace, files, lang, embeddings, model_name, dim, dtype, options):
    """`encode --embeddings`: the corpus pass, then the rows of the vectors file instead of a model."""
    from bitextmine.steps.encode import import_embeddings

    with user_errors(), ProgressDisplay() as progress:
        return import_embeddings(
            workspace,
            files,
            lang,
            embeddings,
            model_name=model_name or "",
            dim=dim,
            dtype=dtype,
            options=options,
            progress=progress,
        )
