"""Shared pieces of the command line: the Typer app, consoles, common options, error handling."""

from __future__ import annotations

import contextlib
import os
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path
from typing import Annotated, Literal, NoReturn

import typer
from rich.console import Console

from bitextmine.errors import BitextmineError, BitextmineWarning, os_error_message
from bitextmine.mining.margin import MARGINS
from bitextmine.mining.selection import STRATEGIES
from bitextmine.workspace.layout import DEFAULT_WORKDIR

app = typer.Typer(
    help="Bitext mining: encode monolingual corpora with a cross-lingual sentence encoder, index them "
    "with FAISS and mine translation pairs with margin scores; learn thresholds on BUCC-format data "
    "and evaluate on BUCC, Tatoeba and xsim. Every step reads and writes a workspace directory "
    f"(--workdir, default ./{DEFAULT_WORKDIR}).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
err = Console(stderr=True)
out = Console()


def _print_version(asked: bool) -> None:
    if asked:
        out.print(f"bitextmine {version('bitextmine')}", highlight=False)
        raise typer.Exit()


@app.callback()
def _options(
    show_version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Options for every command."""


WorkdirOption = Annotated[
    Path, typer.Option("--workdir", "-w", envvar="BITEXTMINE_WORKDIR", help="Workspace directory.")
]
ModelOption = Annotated[
    str | None,
    typer.Option("--model", "-m", envvar="BITEXTMINE_MODEL", help="Hugging Face model dir or hub id."),
]


def fail(exc: BitextmineError) -> NoReturn:
    err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
    raise typer.Exit(1)


@contextmanager
def user_errors() -> Iterator[None]:
    """What a command runs in: a BitextmineError, or an OSError (unreadable or unwritable file, full
    disk), becomes a one-line message naming the file and exit status 1; every BitextmineWarning is
    printed on one line as `warning: ...` (other warnings as Python prints them)."""
    with warnings.catch_warnings():
        warnings.simplefilter("always", BitextmineWarning)  # each names its own file: show them all
        show_other = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None) -> None:
            if issubclass(category, BitextmineWarning):
                err.print(f"[yellow]warning:[/] {message}", highlight=False, soft_wrap=True)
            else:
                show_other(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        try:
            yield
        except BitextmineError as exc:
            fail(exc)
        except OSError as exc:
            fail(BitextmineError(os_error_message(exc)))


def require_model(model: str | None) -> str:
    if not model:
        fail(BitextmineError("no model: pass --model DIR_OR_HUB_ID or set BITEXTMINE_MODEL"))
    return model


PrecisionOption = Annotated[
    Literal["auto", "fp32", "bf16", "int8"],  # encoder/precision.py's PRECISIONS (tests/test_cli_choices.py)
    typer.Option(
        help="fp32, bf16, int8 (CPU) or auto: bf16 where the GPU or CPU (AVX512-BF16/AMX) runs it "
        "natively, else fp32."
    ),
]


def _device(value: str) -> str:
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", value):
        raise typer.BadParameter(f"{value!r} is not one of 'auto', 'cpu', 'cuda', 'cuda:N'.")
    return value


DeviceOption = Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.", callback=_device)]
ThreadsOption = Annotated[
    int | None, typer.Option(help="CPU threads for torch \\[default: all cores].", min=1)
]
BuccDir = Annotated[
    Path, typer.Option("--bucc", help="Folder with PAIR.SPLIT.{x,en,gold} (BUCC 2018 format).")
]
PairOption = Annotated[str, typer.Option("--pair", help="Language pair, e.g. de-en.")]
JsonOption = Annotated[
    Path | None, typer.Option("--json", help="Also write the results as JSON to this file.")
]
MarginOption = Annotated[
    Literal[MARGINS],
    typer.Option(
        help="ratio (LASER's), distance (cos minus the neighbourhood mean), csls (2 cos minus both "
        "neighbourhood means) or absolute (cosine)."
    ),
]
StrategyOption = Annotated[
    Literal[STRATEGIES],
    typer.Option(help="max (best of both directions), intersect (mutual best), fwd or bwd."),
]


def set_threads(threads: int | None) -> None:
    """Intra-op threads = the cores this process may use (or `threads`); one inter-op thread, since
    encoder layers run one after another and extra inter-op threads only compete for the cores."""
    import torch

    torch.set_num_threads(threads or usable_cores())
    with contextlib.suppress(RuntimeError):  # already set, or parallel work has started in this process
        torch.set_num_interop_threads(1)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one: not macOS)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def thread_summary() -> str:
    import torch

    return f"{torch.get_num_threads()} threads + {torch.get_num_interop_threads()} inter-op"


def encoder_spec(
    model: str,
    device: str,
    precision: str = "auto",
    overrides: dict | None = None,
    max_tokens: int | None = None,
    padded: bool = False,
):
    """How the CLI's options load the encoder (an EncoderSpec: shard jobs elsewhere load it too)."""
    from bitextmine.encoder.batching import DEFAULT_MAX_TOKENS
    from bitextmine.encoder.spec import EncoderSpec

    return EncoderSpec(
        model,
        device,
        precision,
        tuple((overrides or {}).items()),
        max_tokens or DEFAULT_MAX_TOKENS,
        False if padded else None,
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
        err.print(
            f"{check.precision} self-check vs fp32 on {check.sentences} built-in sentences: mean cosine "
            f"{check.mean_cosine:.6f}, min {check.min_cosine:.6f}",
            highlight=False,
        )
