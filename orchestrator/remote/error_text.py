"""An exception as one line of text: the tail of sporch's one-line errors about a login host."""

from __future__ import annotations

from typing import Any


def one_line(e: Any) -> str:
    s = " ".join(str(e).split())
    return s or type(e).__name__
