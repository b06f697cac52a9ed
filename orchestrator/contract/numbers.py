"""Numbers as text, read and written (standard library only).

Read: ``str.isdigit`` is true for more than ``int`` reads: a superscript ``²`` passes it and
``int`` then raises, and another script's digits (``٣``) pass both and read as a number nobody
typed. Every check of "is this text a whole number" goes through :func:`is_digits` instead.

Written: :func:`counted` puts a count before its noun in the right number (``1 node``,
``2 nodes``), where a message would otherwise say ``1 nodes`` or ``node(s)``.
"""

from __future__ import annotations

from typing import Optional


def is_digits(text: str) -> bool:
    """Whether ``text`` is one or more of the ASCII digits 0-9 and nothing else."""
    return text.isascii() and text.isdigit()


def digits_value(text: str) -> Optional[int]:
    """``text`` (surrounding blanks ignored) as a whole number >= 0, or None when it is not one."""
    text = text.strip()
    return int(text) if is_digits(text) else None


def counted(n: int, noun: str, plural: Optional[str] = None) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1 (``plural``: when it is not ``noun + "s"``)."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"
