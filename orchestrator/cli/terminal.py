"""Text from outside (YAML, result files, logs, paths, Slurm) made safe to show in a terminal.

A rank's error line, a job name or a folder can hold terminal escapes (``ESC]0;...`` sets the
window title, ``ESC[2J`` clears the screen) or rich markup (``[red]``, ``[/x]``). What sporch
prints of such text goes through :func:`visible` (control characters become ``\\xNN`` escapes,
so they can be read and never act) and, where rich parses markup, :func:`shown` (visible and
markup-escaped).

It also says how wide the output is (:func:`terminal_size`, :func:`wrap_width`) and wraps
sporch's own lines at that width, never inside a word (:func:`wrapped`, :func:`echo`): a
message, a note or a path list that would run past the terminal's edge continues on the next
line, indented. Output that goes to no terminal and no ``$COLUMNS`` is written unwrapped, one
line each, for the scripts and logs that read it.
"""

from __future__ import annotations

import os
import re
import sys
import textwrap
from typing import Any, Optional

import click

from sporch.orchestrator.contract.numbers import digits_value

# C0 controls but tab and newline, DEL, C1 controls, and the bidi overrides and isolates that
# can reorder what a line seems to say.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(m: re.Match) -> str:
    code = ord(m.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: object, *, one_line: bool = False) -> str:
    """``text`` with control characters written out as escapes; with ``one_line`` newlines and
    tabs too (for a table cell or a status line)."""
    s = _CONTROL.sub(_escape, str(text))
    if one_line:
        s = s.replace("\n", "\\n").replace("\t", "\\t")
    return s


def shown(text: object, *, one_line: bool = False) -> str:
    """:func:`visible`, then escaped for rich markup: for text inside a markup string."""
    from rich.markup import escape

    return escape(visible(text, one_line=one_line))


#: The size of output that goes to no terminal (a pipe, a file) when $COLUMNS / $LINES do not say.
PIPED_COLUMNS, PIPED_LINES = 140, 25


def _terminal(stream: Any) -> Optional[os.terminal_size]:
    try:
        return os.get_terminal_size(stream.fileno()) if stream.isatty() else None
    except (AttributeError, ValueError, OSError):
        return None


def terminal_size(stream: Any) -> tuple[int, int]:
    """(columns, lines) to lay out ``stream``'s tables at: ``$COLUMNS`` / ``$LINES`` when they
    are whole numbers > 0, else the terminal's own size, else (piped) 140 x 25."""
    size = _terminal(stream)
    columns = digits_value(os.environ.get("COLUMNS", "")) or (size.columns if size else 0) or PIPED_COLUMNS
    lines = digits_value(os.environ.get("LINES", "")) or (size.lines if size else 0) or PIPED_LINES
    return columns, lines


def wrap_width(stream: Any) -> Optional[int]:
    """The width to wrap lines written to ``stream`` at: ``$COLUMNS`` when it is a whole number
    > 0, else the terminal's width when ``stream`` is one; None (no wrapping) otherwise."""
    size = _terminal(stream)
    return digits_value(os.environ.get("COLUMNS", "")) or (size.columns if size else None)


def wrapped(text: str, width: Optional[int], indent: int = 0) -> str:
    """``text`` with each of its lines word-wrapped at ``width``, never inside a word (a word
    longer than a line keeps a line of its own), continuation lines indented by ``indent``
    spaces; ``text`` as it is when ``width`` is None."""
    if not width:
        return text
    wrapper = textwrap.TextWrapper(width=max(width, indent + 20), subsequent_indent=" " * indent,
                                   break_long_words=False, break_on_hyphens=False)
    return "\n".join(wrapper.fill(line) if line.strip() else line for line in text.split("\n"))


def echo(text: str, *, err: bool = False, indent: int = 0) -> None:
    """``click.echo`` of ``text`` wrapped at the width of the stream it goes to (:func:`wrap_width`)."""
    click.echo(wrapped(text, wrap_width(sys.stderr if err else sys.stdout), indent), err=err)


def labelled(con: Any, label: str, text: str, style: str = "", column: int = 10) -> None:
    """``label`` (in ``style``) padded to ``column``, then ``text`` (shown :func:`visible`),
    wrapped at the console's width with the continuation lines under the text's start."""
    from rich.text import Text

    head = label.ljust(column - 1) + " "
    line = wrapped(head + visible(text, one_line=True), wrap_width(con.file), indent=column)
    out = Text(line)
    if style:
        out.stylize(style, 0, len(label))
    con.print(out, soft_wrap=True)
