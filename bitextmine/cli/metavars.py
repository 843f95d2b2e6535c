"""The words `--help` shows for what a parameter takes: N, FLOAT, TEXT, FILE, DIR, PATH, its choices
(`exact|ivf`), nothing for a flag. Recent typer releases show the Python type instead (`<bool>`,
`<int range>`, `<list[str]>`, `<int,int>`) wherever a parameter has no metavar of its own; earlier ones,
built on click's types, show click's words (INTEGER, TEXT) and are left to do so."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args, get_origin

_WORDS = {int: "N", float: "FLOAT", str: "TEXT", Path: "PATH"}
_PATHS = {"file": "FILE", "dir": "DIR"}


def name_types(command: Any) -> None:
    """Give each parameter of `command` that has no metavar the words for its type, as its help is shown
    (typer adds --help, and the app's completion options, after the command is made)."""
    params = command.get_params

    def named_params(ctx: Any) -> list[Any]:
        shown = params(ctx)
        for param in shown:
            _name(param)
        return shown

    command.get_params = named_params


def _name(param: Any) -> None:
    descriptor = getattr(param, "type_descriptor", None)
    if param.metavar is not None or descriptor is None:
        return
    if getattr(param, "is_flag", False):
        param.metavar = ""
        return
    word = _word(descriptor)
    if param.param_type_name == "argument":
        # an argument's column shows its Python type whatever its metavar: its name says it, in capitals
        param.metavar = param.name.upper()
        param.display_type_rich = lambda ctx: word
        return
    param.metavar = word


def _word(descriptor: Any) -> str:
    if descriptor.is_choice:
        return "|".join(str(getattr(choice, "value", choice)) for choice in descriptor.choices)
    if descriptor.is_path:
        return _PATHS.get(descriptor.path_type, "PATH")
    annotation = descriptor.annotation
    if descriptor.is_tuple:
        return " ".join(_WORDS.get(arg, "TEXT") for arg in get_args(annotation))
    if get_origin(annotation) is list:
        (annotation,) = get_args(annotation)
    return _WORDS.get(annotation, "PATH" if descriptor.is_file else "TEXT")
