"""Shared pieces of the command line: the Typer app, consoles, common options, error handling, and
what is shown: -q/--quiet and -v/--verbose, before or after the command's name, set the level of the
package's `logging` records that are printed on stderr (progress and informational lines are INFO,
details DEBUG); -q also silences the `out` console, where every command prints its summary.

Exit status: 0 done, 1 a user error (a one-line message), 2 a usage error (click's), 130 interrupted.
"""

from __future__ import annotations

import contextlib
import copy
import glob
import inspect
import io
import logging
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn, TypeVar

import typer
from rich.console import Console, ConsoleDimensions
from rich.text import Text
from typer.core import TyperGroup

from bitextmine.cli.laser_flags import NoSuchOption, with_laser_hint
from bitextmine.cli.metavars import name_types
from bitextmine.devices import DEVICE_NAME
from bitextmine.encoder.threads import usable_cores
from bitextmine.errors import BitextmineError, BitextmineWarning, is_out_of_memory, os_error_message
from bitextmine.mining.margin import MARGINS, MAX_K
from bitextmine.mining.selection import STRATEGIES
from bitextmine.text.languages import parse_pair
from bitextmine.version import __version__
from bitextmine.workspace.layout import DEFAULT_WORKDIR

EXIT_USER_ERROR = 1
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a process that Ctrl-C ended
LOGGER = "bitextmine"  # the package's loggers, whose records the CLI prints


class _Group(TyperGroup):
    """The app's command group: every command below it also takes -q/-v after its name, its help is
    reflowed to the terminal's width and names in words what each option takes, and Ctrl-C anywhere in
    a command ends it with `interrupted` and status 130, not a traceback (typer's own handling of it has
    changed between versions)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        output_options = [param for param in self.params if param.name in _OUTPUT_LEVELS]
        name_types(self)
        for command in _commands_below(self):
            command.help = _reflowed(command.help)
            command.params += [_after_command_name(option) for option in output_options]
            name_types(command)

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        ctx.meta[_ARGS] = list(args)
        try:
            return super().parse_args(ctx, args)
        except NoSuchOption as error:
            raise with_laser_hint(error, args) from None

    def invoke(self, ctx: typer.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            err.print("interrupted", highlight=False)
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except NoSuchOption as error:  # a command's own options are parsed here
            raise with_laser_hint(error, ctx.meta[_ARGS]) from None


_ARGS = "bitextmine.args"  # in the click context's meta: the command line, for LASER's --mode VALUE


def _commands_below(group: TyperGroup) -> Iterator[Any]:
    """The commands and subgroups of `group`, at every depth (`eval` and `eval bucc`)."""
    for command in group.commands.values():
        yield command
        if isinstance(command, TyperGroup):
            yield from _commands_below(command)


def _reflowed(help_text: str | None) -> str | None:
    """A docstring with each paragraph on one line: typer's help keeps a docstring's line breaks after
    its first paragraph, which at another width leave short lines with an orphan word or two."""
    if help_text is None:
        return None
    paragraphs = inspect.cleandoc(help_text).split("\n\n")
    return "\n\n".join(" ".join(line.strip() for line in paragraph.splitlines()) for paragraph in paragraphs)


app = typer.Typer(
    cls=_Group,
    help="Bitext mining: encode monolingual corpora with a cross-lingual sentence encoder, index them "
    "with FAISS and mine translation pairs with margin scores; learn thresholds on BUCC-format data "
    "and evaluate on BUCC, Tatoeba and xsim. Every step reads and writes a workspace directory "
    f"(--workdir, default ./{DEFAULT_WORKDIR}).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

UNWRAPPED = 1_000_000  # the width of a console that is not a terminal: wider than any line printed


class _Console(Console):
    """A console that prints text as given, markup off (an error naming `news[old].txt` or `pip install
    'bitextmine[parquet]'` keeps its brackets; styles come as rich Text), and that in a pipe or a file
    does not wrap: a summary stays one line, a table's long path stays whole in its cell."""

    def __init__(self, *, stderr: bool = False) -> None:
        super().__init__(stderr=stderr, markup=False)

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        return size if self.is_terminal or self._width is not None else size._replace(width=UNWRAPPED)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)


err = _Console(stderr=True)
out = _Console()


def _print_version(asked: bool) -> None:
    if asked:
        out.print(f"bitextmine {__version__}", highlight=False)
        raise typer.Exit()


_invoked = {"command": ""}  # the command being run, for messages that depend on it


@app.callback()
def _options(
    context: typer.Context,
    show_version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet",
            "-q",
            help="Print only warnings and errors, and what was asked for on stdout (--json -, -o -): no "
            "summary, no progress, no notes.",
        ),
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose", "-v", help="Also print details: files read and written, job plans, model settings."
        ),
    ] = False,
) -> None:
    """Options for every command (-q and -v may also follow its name: bitextmine mine de en -q)."""
    if quiet and verbose:
        raise typer.BadParameter("--quiet and --verbose exclude each other")
    _invoked["command"] = context.invoked_subcommand or ""
    _print_what_cannot_be_encoded()
    chosen = "quiet" if quiet else "verbose" if verbose else None
    context.meta[_OUTPUT] = chosen
    context.call_on_close(_show_records(_OUTPUT_LEVELS.get(chosen, logging.INFO)))
    out.quiet = chosen == "quiet"
    context.call_on_close(_summary_to_stdout)  # `--json -` sends it to stderr for one command only


_OUTPUT = "bitextmine.output"  # in the click context's meta: "quiet", "verbose" or None
_OUTPUT_LEVELS = {"quiet": logging.WARNING, "verbose": logging.DEBUG}  # by option name


def _after_command_name(option: Any) -> Any:
    """The app's --quiet or --verbose as an option of a command too (`bitextmine mine de en -q`): a copy
    of typer's option for the help, whose callback sets the level the app's callback set up."""
    copied = copy.copy(option)
    copied.callback, copied.expose_value = _output_after_command_name, False
    return copied


def _output_after_command_name(ctx: typer.Context, param: Any, given: bool) -> None:
    if not given:
        return
    if ctx.meta.get(_OUTPUT) not in (None, param.name):
        raise typer.BadParameter("--quiet and --verbose exclude each other")
    ctx.meta[_OUTPUT] = param.name
    _show_level(_OUTPUT_LEVELS[param.name])
    out.quiet = param.name == "quiet"


def _print_what_cannot_be_encoded() -> None:
    """Text that stdout's encoding cannot represent (an ASCII terminal, PYTHONIOENCODING=ascii, a path
    that is not UTF-8) is printed as backslash escapes, as Python prints it on stderr, not an error."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
            stream.reconfigure(errors="backslashreplace")


def print_message(text: str, label: str = "") -> None:
    """One line on stderr, `label: text` with the label (warning, error, debug) styled."""
    style = {"warning": "yellow", "error": "bold red", "debug": "dim"}.get(label, "")
    line = Text.assemble((f"{label}:", style), " ", text) if label else Text(text)
    err.print(line, highlight=False, soft_wrap=True)


def warn(text: str) -> None:
    """`warning: text` on stderr (shown under --quiet too)."""
    print_message(text, "warning")


class _ConsoleHandler(logging.Handler):
    """The package's log records on stderr, one line each; details marked `debug:`."""

    def emit(self, record: logging.LogRecord) -> None:
        label = ""
        if record.levelno >= logging.WARNING:
            label = "warning" if record.levelno == logging.WARNING else "error"
        elif record.levelno < logging.INFO:
            label = "debug"
        print_message(record.getMessage(), label)


_console = _ConsoleHandler()  # NOTSET until a command runs: then everything is shown


def _show_records(level: int) -> Callable[[], None]:
    """Print the package's records of `level` and above for the command being run; returns what puts
    logging back as it was (the CLI may run inside a program with its own logging, or a test)."""
    logger = logging.getLogger(LOGGER)
    saved = logger.level, logger.propagate
    _show_level(level)
    logger.propagate = False  # shown here, not a second time by handlers the caller installed
    logger.addHandler(_console)

    def restore() -> None:
        logger.removeHandler(_console)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]
        _console.setLevel(logging.NOTSET)

    return restore


def _show_level(level: int) -> None:
    _console.setLevel(level)
    logging.getLogger(LOGGER).setLevel(level)


def shows(level: int) -> bool:
    """Whether output of `level` is shown: progress is INFO (hidden by --quiet)."""
    return level >= _console.level


def info(message: str) -> None:
    """An informational line on stderr, hidden by --quiet."""
    logging.getLogger(f"{LOGGER}.cli").info(message)


def _workdir(value: Path) -> Path:
    try:
        str(value).encode()
    except UnicodeEncodeError:  # a name that is not UTF-8 holds its bytes as surrogates
        raise typer.BadParameter(f"{value}: not a UTF-8 name, and FAISS cannot open files below it") from None
    return value


WorkdirOption = Annotated[
    Path,
    typer.Option(
        "--workdir", "-w", envvar="BITEXTMINE_WORKDIR", help="Workspace directory.", callback=_workdir
    ),
]
ModelOption = Annotated[
    str | None,
    typer.Option("--model", "-m", envvar="BITEXTMINE_MODEL", help="Hugging Face model dir or hub id."),
]


def given(ctx: typer.Context, name: str) -> bool:
    """Whether parameter `name` was given (command line or environment) rather than left at its default.
    Compared by name: typer vendors its own click, whose ParameterSource is not click's."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name != "DEFAULT"


def given_names(ctx: typer.Context) -> set[str]:
    """The names of the parameters given (command line or environment), not left at their defaults."""
    return {param.name for param in ctx.command.params if param.name is not None and given(ctx, param.name)}


def refuse_flags(used: dict[str, bool], reason: str) -> None:
    """`REASON: FLAGS cannot apply`, a BitextmineError naming the flags of `used` that were used, if any
    was: options that would be ignored are refused instead."""
    flags = [flag for flag, was_used in used.items() if was_used]
    if flags:
        raise BitextmineError(f"{reason}: {', '.join(flags)} cannot apply")


def fail(exc: BitextmineError) -> NoReturn:
    print_message(str(exc), "error")
    raise typer.Exit(EXIT_USER_ERROR)


@contextmanager
def user_errors() -> Iterator[None]:
    """What a command runs in: a BitextmineError, or an OSError (unreadable or unwritable file, full
    disk), becomes a one-line message naming the file and exit status 1, and running out of memory (RAM
    or CUDA) one naming the option to lower; every BitextmineWarning is printed on one line as
    `warning: ...` (other warnings as Python prints them)."""
    with warnings.catch_warnings():
        warnings.simplefilter("always", BitextmineWarning)  # each names its own file: show them all
        show_other = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None) -> None:
            if issubclass(category, BitextmineWarning):
                warn(str(message))
            else:
                show_other(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        try:
            yield
        except BitextmineError as exc:
            fail(exc)
        except OSError as exc:
            fail(BitextmineError(os_error_message(exc)))
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            fail(BitextmineError(_out_of_memory(exc)))


_MEMORY_HINTS = {  # by command: the option that bounds its memory
    "encode": "lower --max-tokens, the tokens of one batch",
    "index": "pass --max-memory GB (or a lower one) to build the index in shards that fit",
    "mine": "lower --job-rows, or index with --max-memory so that mining loads smaller index shards",
    "train": "lower --max-tokens or --max-pairs, the size of one batch",
}


def _out_of_memory(exc: BaseException) -> str:
    """`out of memory (WHAT FAILED); HINT`, the hint naming the current command's option."""
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    reason = ". ".join(first.split(". ")[:2])  # torch's message goes on for a paragraph
    hint = _MEMORY_HINTS.get(_invoked["command"], "free some memory or use a larger machine")
    return f"out of memory ({reason}); {hint}"


def require_model(model: str | None) -> str:
    if not model:
        fail(BitextmineError("no model: pass --model DIR_OR_HUB_ID or set BITEXTMINE_MODEL"))
    return model


PrecisionOption = Annotated[
    Literal["auto", "fp32", "bf16", "int8"],  # encoder/precision.py's PRECISIONS (tests/cli/test_choices.py)
    typer.Option(
        help="fp32, bf16, int8 (CPU) or auto: bf16 where the GPU or CPU (AVX512-BF16/AMX) runs it "
        "natively, else fp32."
    ),
]


# A choice with a long list of values shows a METAVAR, and its help names the values: `<a|b|c|d>` would
# squeeze the help column of `--help` at 80 columns.
AttentionOption = Annotated[
    Literal["auto", "varlen", "xformers", "sdpa"],  # encoder/attention.py's ATTENTION_BACKENDS
    typer.Option(
        metavar="BACKEND",
        help="Packed attention: auto (on CUDA, PyTorch's varlen flash attention for bf16, else xFormers "
        "when installed, else SDPA), or one of them by name (an error where it cannot run).",
    ),
]


LidOption = Annotated[
    Literal["reject", "accept", "off"] | None,  # text/lid.py's LID_RULES, and off
    typer.Option(
        "--lid",
        metavar="RULE",
        help="Language identification (py3langid) before encoding: reject drops a line only when it is "
        "confidently another language, has no letter of the language's script or has no word (numbers, "
        "URLs); accept keeps only the lines identified as the language; off keeps every line \\[default: "
        "reject where py3langid knows the language, else off].",
        show_default=False,
    ),
]


ForceLangOption = Annotated[
    bool,
    typer.Option(
        "--force-lang",
        help="Take a language code that language identification and its table of codes do not know (a "
        "private or dialect code) as it is; without it such a code is an error, since `--lang german` is a "
        "typo for de.",
        rich_help_panel="TSV input and language identification",
    ),
]


def check_known_langs(langs: list[str], force: bool, lid_lang: str | None = None) -> None:
    """Before any work: each of `langs` is a code language identification knows (or one `lid_lang`,
    known, names for it), unless `force` (--force-lang)."""
    from bitextmine.text.lid import knows

    if force:
        return
    try:
        if lid_lang is not None and knows(lid_lang):
            return
        unknown = [lang for lang in langs if not knows(lang)]
    except BitextmineError as exc:  # py3langid's model could not be loaded
        fail(exc)
    if unknown:
        fail(
            BitextmineError(
                f"unknown language code {unknown[0]!r}: language identification knows ISO 639-1 and 639-3 "
                "codes (de, deu) and corpus codes (zho_simpl, deu_Latn); --force-lang takes it as it is"
            )
        )


T = TypeVar("T")


def checked_by(check: Callable[[T], object]) -> Callable[[T | None], T | None]:
    """An option's callback that runs `check` on the value given while the command line is parsed: its
    BitextmineError is a usage error (status 2) before any work, not a failure once the work started."""

    def callback(value: T | None) -> T | None:
        if value is not None:
            try:
                check(value)
            except BitextmineError as exc:
                raise typer.BadParameter(str(exc)) from None
        return value

    return callback


def positive(value: float) -> None:
    """A check for `checked_by`: the value must be above 0 (typer's min= admits the bound itself)."""
    if not value > 0:
        raise BitextmineError(f"must be above 0, not {value:g}")


def _device(value: str) -> str:
    if not DEVICE_NAME.fullmatch(value):
        raise typer.BadParameter(f"{value!r} is not one of 'auto', 'cpu', 'cuda', 'cuda:N'.")
    return value


DeviceOption = Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.", callback=_device)]
ThreadsOption = Annotated[
    int | None, typer.Option(help="CPU threads for torch and FAISS \\[default: all cores].", min=1)
]
BuccDir = Annotated[
    Path, typer.Option("--bucc", help="Folder with PAIR.SPLIT.{x,en,gold} (BUCC 2018 format).")
]
PairOption = Annotated[
    str, typer.Option("--pair", help="Language pair, e.g. de-en.", callback=checked_by(parse_pair))
]


def bucc_files(bucc: Path, pair: str, split: str) -> list[Path]:
    """The files of a BUCC split there are (BUCC/PAIR.SPLIT.*): what an output may not overwrite."""
    return sorted(Path(bucc).glob(f"{glob.escape(pair)}.{glob.escape(split)}.*"))


def _json_target(value: Path | None) -> Path | None:
    """`--json -`: stdout carries the JSON alone, so the summary printed for people goes to stderr (and
    under --quiet nowhere: `out` is quiet then)."""
    if value is not None and str(value) == "-":
        out.stderr = True
    return value


def _summary_to_stdout() -> None:
    out.stderr = out.quiet = False


JsonOption = Annotated[
    Path | None,
    typer.Option(
        "--json",
        metavar="PATH|-",
        callback=_json_target,
        help="Also write the summary as JSON to PATH, or to stdout with '-' (the printed summary then "
        "goes to stderr).",
    ),
]
ThresholdsOption = Annotated[
    Path | None,
    typer.Option(help="File of calibrated thresholds, by model and pair \\[default: WORK/thresholds.json]."),
]
MinPrecisionOption = Annotated[
    float | None,
    typer.Option(
        min=0.0,
        max=1.0,
        help="With --threshold auto: keep the pairs whose regional precision (the estimated chance that a "
        "pair scoring as it does in its regions is a translation) is at least this, in place of the "
        "threshold learned for the best F1; jsonl and parquet output give each pair's \\[default: learned].",
    ),
]
MarginOption = Annotated[
    Literal[MARGINS],
    typer.Option(
        metavar="MARGIN",
        help="ratio (LASER's), distance (cos minus the neighbourhood mean), csls (2 cos minus both "
        "neighbourhood means) or absolute (cosine).",
    ),
]
KOption = Annotated[
    int, typer.Option("--k", "-k", min=1, max=MAX_K, help="Neighbours per sentence for the margin.")
]
StrategyOption = Annotated[
    Literal[STRATEGIES],
    typer.Option(
        metavar="STRATEGY", help="max (best of both directions), intersect (mutual best), fwd or bwd."
    ),
]


def set_threads(threads: int | None) -> None:
    """Intra-op threads = the cores this process may use (or `threads`); one inter-op thread, since
    encoder layers run one after another and extra inter-op threads only compete for the cores.
    `threads` bounds FAISS's OpenMP threads too."""
    import torch

    torch.set_num_threads(threads or usable_cores())
    with contextlib.suppress(RuntimeError):  # already set, or parallel work has started in this process
        torch.set_num_interop_threads(1)
    if threads is not None:
        import faiss

        faiss.omp_set_num_threads(threads)


def bound_threads(threads: int | None) -> None:
    """`set_threads` where `threads` is given: what commands that search but do not encode (index, mine)
    run, leaving torch and FAISS their own defaults otherwise."""
    if threads is not None:
        set_threads(threads)


def encoder_spec(
    model: str,
    device: str,
    precision: str = "auto",
    overrides: dict | None = None,
    max_tokens: int | None = None,
    padded: bool = False,
    attention: str = "auto",
):
    """How the CLI's options load the encoder (an EncoderSpec: shard jobs elsewhere load it too)."""
    from bitextmine.encoder.spec import EncoderSpec

    return EncoderSpec(
        model,
        device,
        precision,
        tuple((overrides or {}).items()),
        max_tokens,
        False if padded else None,
        attention,
    )


def load_encoder(model: str, device: str, precision: str = "auto"):
    """A SentenceEncoder for the CLI's options (torch is imported only when a command needs it)."""
    encoder = encoder_spec(model, device, precision).load()
    print_precision_check(encoder)
    return encoder


def print_precision_check(encoder) -> None:
    """Print a precision self-check run now (not one read back from an earlier run)."""
    check = encoder.precision_check
    if check is not None and not check.cached:
        info(check.describe())
