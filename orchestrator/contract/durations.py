"""Time limits in Slurm's format, and what a number of seconds may be (stdlib only).
"""

from __future__ import annotations

import math
import re
from typing import Optional


def seconds(value, minimum: float = 0.0, inclusive: bool = False) -> float:
    """``value`` as a finite number of seconds above ``minimum`` (at least it with
    ``inclusive``); ValueError naming the bound otherwise (nan, inf, words, too small)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        x = math.nan
    if not math.isfinite(x) or x < minimum or (x == minimum and not inclusive):
        bound = f">= {minimum:g}" if inclusive else f"> {minimum:g}"
        raise ValueError(f"must be a finite number of seconds {bound}, got {value!r}")
    return x




#: ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``.
TIME_RE = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d{1,2}))?(?::(\d{1,2}))?$", re.ASCII)
TIME_FORMS = "MM, HH:MM:SS or D-HH:MM:SS"


def time_seconds(text: str) -> Optional[int]:
    """Seconds of a Slurm time limit, or None when ``text`` is not one."""
    m = TIME_RE.match(str(text).strip())
    if not m:
        return None
    days, a, b, c = m.groups()
    if days is not None:  # D-HH[:MM[:SS]]
        return int(days) * 86400 + int(a) * 3600 + int(b or 0) * 60 + int(c or 0)
    if c is not None:  # HH:MM:SS
        return int(a) * 3600 + int(b) * 60 + int(c)
    if b is not None:  # MM:SS
        return int(a) * 60 + int(b)
    return int(a) * 60  # MM


def is_valid_time(text: str) -> bool:
    return time_seconds(text) is not None


def time_to_minutes(text: str) -> int:
    """Whole minutes, rounded up (submitit's ``timeout_min``); ValueError when not a Slurm time."""
    secs = time_seconds(text)
    if secs is None:
        raise ValueError(f"time {text!r} is not a Slurm time ({TIME_FORMS})")
    return max(1, math.ceil(secs / 60))
