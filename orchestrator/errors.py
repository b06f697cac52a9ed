"""User-facing errors: one line that says what is wrong and how to fix it.

The CLI prints ``str(err)`` on stderr and exits with code 2 (no traceback unless --debug).
"""


class SporchError(Exception):
    """Bad input or an impossible request. The message is one line, complete on its own."""

    exit_code = 2
