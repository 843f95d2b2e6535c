"""LASER's flags (source/mine_bitexts.py) given to bitextmine: the usage error names the equivalent, so
that a LASER user's command line needs no trip to the docs. Flags LASER shares with bitextmine (--output,
--threshold, --margin, -k, --verbose) need no hint: they mean the same here."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import typer

# click's exceptions, or in newer typer releases the copy of click typer carries, whichever typer raises
NoSuchOption = importlib.import_module(typer.BadParameter.__module__).NoSuchOption

_IMPORT = "import vectors with `encode FILE --lang LANG --embeddings VECS` (then `index`, `mine`)"
_HINTS = {  # LASER's flag -> what to use here, where it does not depend on the command
    "--neighborhood": "use -k",
    "--retrieval": "use --strategy (max, intersect, fwd or bwd, as LASER's)",
    "--unify": "`encode --dedup` encodes each distinct sentence once (then `index` and `mine`)",
    "--gpu": "use --device cuda (the default, auto, takes a GPU where there is one)",
    "--src-embeddings": _IMPORT,
    "--trg-embeddings": _IMPORT,
    "--dim": "use `encode FILE --lang LANG --embeddings VECS --dim N` for raw vectors",
    "--encoding": "input is read as UTF-8 (invalid bytes replaced and counted): convert it first, e.g. iconv",
}
_MODES = {  # LASER's --mode VALUE -> what to use here
    "score": "use the `score` command: bitextmine score SRC_FILE TGT_FILE --src L --tgt L -o OUT",
    "mine": "drop it: `mine-files` mines (and `mine` in a workspace)",
    "search": "use --strategy fwd (each source sentence's best target, each sentence used once)",
}
_LANGS = {  # LASER's language flag -> this command's equivalent, the first it has
    "--src-lang": (("--src", "use --src"), ("src", "use SRC, the first argument"), ("--lang", "use --lang")),
    "--trg-lang": (("--tgt", "use --tgt"), ("tgt", "use TGT, the second argument"), ("--lang", "use --lang")),
}


def with_laser_hint(error: Any, args: Sequence[str]) -> Any:
    """`error`, or where it is about one of LASER's flags, the same error naming the equivalent here;
    `args` is the command line, where --mode's value is read."""
    hint = laser_hint(error.option_name, args, error.ctx.command if error.ctx else None)
    if hint is None:
        return error
    message = f"No such option: {error.option_name}; for LASER's {error.option_name}, {hint}"
    return NoSuchOption(error.option_name, message, ctx=error.ctx)  # the hint, not spelling guesses


def laser_hint(option: str, args: Sequence[str], command: Any) -> str | None:
    """What to use instead of LASER's `option` in `command`, or None where it is not LASER's."""
    if option == "--mode":
        value = _value_of(option, args)
        return _MODES.get(value or "", "`mine-files` mines and `score` scores a bitext you have")
    if option in _LANGS:
        names = _names(command)
        return next((hint for name, hint in _LANGS[option] if name in names), "use --src and --tgt")
    return _HINTS.get(option)


def _value_of(option: str, args: Sequence[str]) -> str | None:
    """The value given to `option` in `args` (`--mode score` or `--mode=score`)."""
    for i, arg in enumerate(args):
        if arg.startswith(f"{option}="):
            return arg.partition("=")[2]
        if arg == option and i + 1 < len(args):
            return args[i + 1]
    return None


def _names(command: Any) -> set[str]:
    """The flags and argument names of `command`."""
    if command is None:
        return set()
    return {name for param in command.params for name in (*param.opts, param.name or "")}
