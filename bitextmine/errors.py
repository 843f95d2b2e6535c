"""The one exception type that the CLI turns into a one-line message instead of a traceback."""


class BitextmineError(Exception):
    """A user-facing error: bad input, a mismatched workspace, a missing model.

    The message is complete on its own (it names the file and, when it applies, the line).
    """
