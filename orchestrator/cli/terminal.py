"""Text from outside (YAML, result files, logs, paths, Slurm) made safe to show in a terminal.

A rank's error line, a job name or a folder can hold terminal escapes (``ESC]0;...`` sets the
window title, ``ESC[2J`` clears the screen) or rich markup (``[red]``, ``[/x]``). What sporch
prints of such text goes through :func:`visible` (control characters become ``\\xNN`` escapes,
so they can be read and never act) and, where rich parses markup, :func:`shown` (visible and
markup-escaped).
"""

from __future__ import annotations

import re

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
