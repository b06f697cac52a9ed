"""Small helpers shared by the SSH tests of this folder."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Set

import pytest

from sporch.orchestrator.errors import SporchError


def one_line_error(fn: Callable[[], object]) -> str:
    """The message of the SporchError ``fn()`` raises, checked to be one line."""
    with pytest.raises(SporchError) as ei:
        fn()
    msg = str(ei.value)
    assert "\n" not in msg
    return msg


def descendants(pid: int) -> Set[int]:
    """Every process below ``pid`` (children, their children...), from /proc."""
    children: dict = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.add(child)
            todo.append(child)
    return out
