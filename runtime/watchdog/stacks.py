"""Where the rank's Python threads are: the main thread's frame for the hang record, and every
thread's stack written to stderr when the process is ended (SIGTERM)."""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
from typing import Optional

__all__ = ["main_thread_at", "dump_stacks_on_sigterm"]

_TORCH_DIR = os.sep + "torch" + os.sep


def main_thread_at() -> Optional[str]:
    """``file.py:123 in function``: the innermost frame of the main thread outside torch."""
    frame = sys._current_frames().get(threading.main_thread().ident or -1)
    while frame is not None:
        code = frame.f_code
        if _TORCH_DIR not in code.co_filename:
            return f"{os.path.basename(code.co_filename)}:{frame.f_lineno} in {code.co_name}"
        frame = frame.f_back
    return None


def dump_stacks_on_sigterm() -> None:
    """SIGTERM (Slurm's time limit, ``scancel``, the local runner at the time limit) writes
    every thread's stack to stderr (the rank's log) before the process ends as it would."""
    try:
        faulthandler.register(signal.SIGTERM, file=sys.stderr, all_threads=True, chain=True)
    except (AttributeError, ValueError, RuntimeError, OSError):  # no such signal API here; not fatal
        pass
