"""The split plan of a class whose plan sporch derives: checked exact before it is used.

:func:`derived_plan` is what ``plans.split_plan`` falls back to for a class with neither a
``_cp_plan`` nor a shipped table: its cached verdict (``models/families/derived_plans.py``), or,
when none is cached for this diffusers, the check run now in its own process (``python -m
sporch.runtime.derive_check CLASS...``, with the other derived classes not checked yet: it derives
each plan from a tiny instance and checks them on a world of 4 gloo ranks of its own, which a
job's rank must not start inside itself; a file lock lets the ranks of one machine wait for the
one that checks). A class whose plan is not exact raises ValueError in one line naming it and its
largest error.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

from sporch.orchestrator.contract import settings
from sporch.orchestrator.models.families import FAMILIES
from sporch.orchestrator.models.families.derived_plans import cache_dir, read_verdict
from sporch.orchestrator.models.families.plan_format import SplitPlan

__all__ = ["derived_plan", "checking_lock", "CHECK_MODULE", "check_command", "check_environment"]

#: The module that derives and checks (runtime/derive_check.py), run as its own process.
CHECK_MODULE = "sporch.runtime.derive_check"
#: torch.distributed's variables of a job's rank, which the check's own world must not inherit.
_RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                   "GROUP_RANK", "ROLE_RANK", "TORCHELASTIC_RUN_ID")


@contextmanager
def checking_lock(folder: Optional[Path] = None) -> Iterator[None]:
    """An exclusive lock on the cache folder: one process of a machine derives and checks at a time
    (a folder that cannot be written: ValueError, one line)."""
    folder = folder or cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fh = open(folder / ".lock", "a")
    except OSError as exc:
        raise ValueError(f"the split-plan cache folder {folder} cannot be written ({exc.strerror or exc}); set "
                         f"{settings.SPLIT_PLANS.name} to a writable folder") from None
    with fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def check_command(class_names: list[str], *, locked: bool = False) -> list[str]:
    """The command line that derives, checks and caches ``class_names``' plans (``locked``: the
    caller holds :func:`checking_lock`)."""
    return [sys.executable, "-m", CHECK_MODULE, *(["--caller-holds-lock"] if locked else []), "--", *class_names]


def check_environment() -> dict:
    """This process's environment without a rank's torch.distributed variables."""
    return {k: v for k, v in os.environ.items() if k not in _RANK_VARIABLES}


def _check_now(class_name: str, folder: Optional[Path]):
    """Derive and check ``class_name`` in its own process (the caller holds the lock), with every other
    derived class of the families that has no verdict here yet (one world for all: starting it costs
    more than checking a tiny class in it); ``class_name``'s verdict."""
    others = [c for fam in FAMILIES for c in fam.derived if c != class_name and read_verdict(c, folder=folder) is None]
    env = check_environment()
    if folder is not None:
        env[settings.SPLIT_PLANS.name] = str(folder)
    done = subprocess.run(check_command([class_name, *others], locked=True), env=env, capture_output=True, text=True)
    verdict = read_verdict(class_name, folder=folder)
    if verdict is None:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ValueError(f"{class_name}: its split plan is derived, and deriving and checking it failed "
                         f"(exit code {done.returncode}): {last}")
    return verdict


def derived_plan(class_name: str, folder: Optional[Path] = None) -> SplitPlan:
    """``class_name``'s derived plan once it is checked exact (module docstring)."""
    verdict = read_verdict(class_name, folder=folder)
    if verdict is None:
        with checking_lock(folder):
            verdict = read_verdict(class_name, folder=folder) or _check_now(class_name, folder)
    if not verdict.exact or verdict.plan is None:
        raise ValueError(verdict.refusal())
    return verdict.plan
