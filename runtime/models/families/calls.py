"""What the families' pipeline-side code shares: a pipeline call's own defaults."""

from __future__ import annotations

import inspect
from typing import Any


def call_default(pipe: Any, name: str) -> Any:
    """The default of the argument ``name`` of ``pipe``'s ``__call__`` (what a call without it uses)."""
    return inspect.signature(type(pipe).__call__).parameters[name].default
