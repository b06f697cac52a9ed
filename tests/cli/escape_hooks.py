"""Entrypoint for tests/cli/test_hardening_terminal.py: every rank fails with an error line that
holds terminal escapes (a window title, a clear screen, a colour)."""

from __future__ import annotations

from typing import Any

#: ESC]0;...BEL sets the window title, ESC[2J clears the screen, ESC[31m turns the text red.
EVIL_ERROR = "boom \x1b]0;pwned\x07 then \x1b[2J and \x1b[31mred\x1b[0m end"


def raise_escapes(ctx: Any, plan: Any) -> dict:
    raise RuntimeError(EVIL_ERROR)
