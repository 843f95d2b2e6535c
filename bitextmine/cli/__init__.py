"""The `bitextmine` command line: one module a command, parsing and printing only; the work is in
bitextmine.steps, bitextmine.evaluation and bitextmine.train (the same functions as the Python API)."""

import importlib

from bitextmine.cli.app import app

# Importing a command's module registers it; `--help` lists the commands in this (pipeline) order.
for _command in (
    "encode",
    "index",
    "mine",
    "mine_files",
    "score",
    "calibrate",
    "eval",
    "eval_words",
    "train",
):
    importlib.import_module(f"bitextmine.cli.{_command}")


def main() -> None:
    app()
