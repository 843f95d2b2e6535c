"""`bitextmine eval words` and `bitextmine eval tokens`: parsing and printing only."""

from __future__ import annotations

import glob
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table
from rich.text import Text

from bitextmine.cli.app import (
    DeviceOption,
    JsonOption,
    ModelOption,
    PairOption,
    ThreadsOption,
    info,
    out,
    require_model,
    set_threads,
    user_errors,
)
from bitextmine.cli.eval import eval_app
from bitextmine.cli.output import ProgressDisplay, json_target, print_results, results_table
from bitextmine.mining.margin import MAX_K

if TYPE_CHECKING:
    from bitextmine.encoder.encoder import SentenceEncoder
    from bitextmine.evaluation.words.word_eval import WordEvalResult

SamplingsOption = Annotated[int, typer.Option(min=1, help="Samplings; mean and std over them.")]
SeedOption = Annotated[int, typer.Option(help="Random seed of every sampling.", min=0)]


def _load(model: str | None, device: str) -> SentenceEncoder:
    from bitextmine.evaluation.words.hidden_states import load_layer_encoder

    return load_layer_encoder(require_model(model), device)


@eval_app.command("words")
def eval_words(
    pair: PairOption,
    parallel: Annotated[
        list[Path],
        typer.Option(
            help="Line-aligned PREFIX.X and PREFIX.Y, given as PREFIX (repeatable), e.g. data/news."
        ),
    ],
    dictionary: Annotated[
        Path, typer.Option("--dict", help="Bilingual dictionary, 'x_word y_word' per line (MUSE format).")
    ],
    model: ModelOption = None,
    pairs: Annotated[int, typer.Option(min=1, help="Word pairs per sampling (N), distinct types.")] = 5000,
    sentence_pairs: Annotated[int, typer.Option(min=1, help="Sentence pairs per sampling.")] = 5000,
    samplings: SamplingsOption = 10,
    k: Annotated[int, typer.Option("--k", "-k", min=1, max=MAX_K, help="CSLS neighbourhood size.")] = 10,
    sentences: Annotated[
        int, typer.Option(min=1, help="Parallel lines drawn at random as the pool (all when fewer).")
    ] = 10000,
    keep_identical: Annotated[
        bool,
        typer.Option("--keep-identical", help="Keep dictionary entries whose two words are the same string."),
    ] = False,
    seed: SeedOption = 0,
    device: DeviceOption = "auto",
    threads: ThreadsOption = None,
    json_path: JsonOption = None,
) -> None:
    """Word-level weak and strong alignment of every layer, and CLS vs mean sentence retrieval.

    Gaschi et al. 2022: translated-in-context word pairs (a unique dictionary candidate in the other
    sentence, both ways) from the parallel lines; per sampling, N pairs of distinct word types; a
    word is the mean of its subword vectors; CSLS nearest-neighbour retrieval against the other
    language's words (weak) or the query language's words (strong), in both directions. The sentence
    table is the same retrieval on the first token (CLS) or the mean of the tokens, at the first, best
    and last layer.
    """
    from bitextmine.evaluation.words.word_eval import (
        WordAlignmentData,
        WordAlignmentEvaluator,
        WordEvalSettings,
    )
    from bitextmine.text.languages import parse_pair

    set_threads(threads)
    settings = WordEvalSettings(pairs, sentence_pairs, samplings, k, seed, sentences)
    with user_errors():
        texts = [f for prefix in parallel for f in prefix.parent.glob(f"{glob.escape(prefix.name)}.*")]
        json_out = json_target(json_path, inputs=[*texts, dictionary])
        data = WordAlignmentData.read(parse_pair(pair), parallel, dictionary, keep_identical)
        encoder = _load(model, device)
        progress = ProgressDisplay(f"encoding {pair}", None)  # the total is known once sentences are planned
        with progress:
            result = WordAlignmentEvaluator(data, settings, progress.advance, progress.set_total)(encoder)
    info(
        f"pool {result.pool:,} lines: {result.extracted:,} translated-in-context pairs "
        f"({result.distinct:,} distinct); {result.encoded:,} sentences encoded"
    )
    out.print(_words_table(result))
    print_results(_sentences_table(result), result.to_json(), json_out)


def _cell(result: WordEvalResult, metric: str, layer: int, direction: int) -> str:
    stat = result.stat(metric, layer, direction)
    return f"{stat.mean:.1f} ({stat.std:.2f})"


def _words_table(result: WordEvalResult) -> Table:
    s = result.settings
    title = (
        f"word-level alignment, % (std) over {s.samplings} samplings of {s.pairs:,} pairs, "
        f"CSLS k={s.k}; best layer in bold"
    )
    columns = ["layer"] + [
        f"{metric} {direction.replace('->', '→')}"
        for metric in ("weak", "strong")
        for direction in result.directions
    ]
    best = {metric: result.best_layer(metric) for metric in ("weak", "strong")}
    rows = [
        [str(layer)]
        + [
            Text(_cell(result, m, layer, d), style="bold" if best[m] == layer else "")
            for m in ("weak", "strong")
            for d in (0, 1)
        ]
        for layer in range(result.scores["weak"].shape[1])
    ]
    return results_table(title, columns, rows)


def _sentences_table(result: WordEvalResult) -> Table:
    s = result.settings
    title = (
        f"sentence retrieval, % (std) over {s.samplings} samplings of {s.sentence_pairs:,} pairs, "
        f"CSLS k={s.k}"
    )
    columns = ["pooling", "layer", *(d.replace("->", "→") for d in result.directions)]
    rows = []
    for which in ("first", "best", "last"):
        for pooling in ("cls", "mean"):
            layer = result.summary(pooling)[which]
            name = f"{pooling.upper() if pooling == 'cls' else pooling} {which}"
            rows.append([name, str(layer), *(_cell(result, pooling, layer, d) for d in (0, 1))])
    return results_table(title, columns, rows)


@eval_app.command("tokens")
def eval_tokens(
    flores: Annotated[Path, typer.Option(help="Folder of N-way parallel LANG.SPLIT files (FLORES).")],
    langs: Annotated[
        str | None, typer.Option(help="Comma-separated codes, e.g. deu,fra \\[default: all in --flores].")
    ] = None,
    model: ModelOption = None,
    english: Annotated[str, typer.Option(help="Code of the query language.")] = "eng",
    split: Annotated[str, typer.Option(help="File suffix of the split.")] = "dev",
    sentences: Annotated[
        int | None, typer.Option(min=1, help="First lines of each file to use \\[default: all].")
    ] = None,
    query_sentences: Annotated[
        int, typer.Option(min=1, help="First English sentences giving queries.")
    ] = 250,
    tokens_per_sentence: Annotated[int, typer.Option(min=1, help="Random query tokens per sentence.")] = 3,
    neighbors: Annotated[int, typer.Option(min=1, help="Nearest tokens classified per query.")] = 5,
    seed: SeedOption = 0,
    device: DeviceOption = "auto",
    threads: ThreadsOption = None,
    json_path: JsonOption = None,
) -> None:
    """What last-layer tokens match: MEXMA's token matching analysis (§5.5, Table 9).

    Random tokens of the first English sentences are queries; their nearest tokens by cosine among all
    tokens of all sentences of all languages (the query excluded) are counted as same sentence,
    translation (same line, another language), same language (another English sentence) or other.
    """
    from bitextmine.evaluation.retrieval import flores_languages
    from bitextmine.evaluation.words.token_matching import (
        CATEGORIES,
        TokenMatchingEvaluator,
        TokenMatchSettings,
        read_nway,
    )

    set_threads(threads)
    settings = TokenMatchSettings(query_sentences, tokens_per_sentence, neighbors, seed)
    with user_errors():
        json_out = json_target(json_path, inputs=flores.glob("*"))
        chosen = (
            flores_languages(flores, split)
            if langs is None
            else [lang.strip() for lang in langs.split(",") if lang.strip()]
        )
        texts = read_nway(flores, chosen, english, split, sentences)
        encoder = _load(model, device)
        progress = ProgressDisplay("encoding tokens", None)
        with progress:
            result = TokenMatchingEvaluator(texts, settings, progress.advance, progress.set_total)(encoder)
    title = (
        f"token matching (last layer): {result.queries:,} queries × {neighbors} neighbours among "
        f"{result.candidates:,} tokens of {len(result.langs)} languages"
    )
    columns = [*(f"% {c.replace('_', ' ')}" for c in CATEGORIES), "same language & same token"]
    row = [*(f"{result.percent(c):.2f}" for c in CATEGORIES), f"{result.same_language_same_token:,}"]
    print_results(results_table(title, columns, [row]), result.to_json(), json_out)
