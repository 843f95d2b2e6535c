"""The `bitextmine` command line: argument parsing and printing only; the work is in the core modules."""

from bitextmine.cli import analysis_cmd, bucc_cmd, encode_cmd, mine_cmd, train_cmd  # noqa: F401  (registers the commands)
from bitextmine.cli.common import app


def main() -> None:
    app()
