"""Split plans sporch derives for diffusers classes, and their verdicts (standard library only).

A class with neither diffusers' ``_cp_plan`` nor a table its family ships gets its plan derived
from a tiny instance (runtime/models/derive.py) and checked against the unsharded class on
2 and 4 gloo ranks with an uneven token count before anything runs it
(runtime/models/verdict.py). The outcome is a :class:`PlanVerdict`, cached as one JSON file
per class and diffusers version in :func:`cache_dir` (``$SPORCH_SPLIT_PLANS``, default
``$SPORCH_HOME/split-plans``): the user sees it with ``sporch inspect DIR`` and clears it by
deleting the file (the next run derives and checks again). The planner and ``sporch inspect`` read
it here, without torch; the ranks read it, or make it, through the runtime.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping, Optional

from sporch.orchestrator.contract import settings
from sporch.orchestrator.safe_files import read_regular, write_atomic

from .plan_format import SplitPlan, describe, entries, from_json, to_json

__all__ = ["PlanVerdict", "DERIVE_VERSION", "TOLERANCE", "SEQUENCE_RANKS", "cache_dir", "diffusers_version",
           "verdict_path", "read_verdict", "write_verdict", "verdict_report", "unwritable"]

#: Bumped when the derivation or its check changes: a verdict of another version is derived again.
DERIVE_VERSION = 1
#: The largest relative error (max |sharded - unsharded| / max |unsharded|, float32) that is exact.
TOLERANCE = 1e-5
#: The sequence-parallel sizes the plan is checked on (each with an uneven token count).
SEQUENCE_RANKS = (2, 4)


@dataclass(frozen=True)
class PlanVerdict:
    """A derived plan and what checking it found. ``errors`` / ``abs_errors``: the largest relative
    / absolute error per number of sequence ranks, over every layout checked and every rank;
    ``reason``: why the class is refused (empty when ``exact``); ``note``: how the plan was
    chosen; ``attention_effect``: how much zeroing every attention moves the output (relative;
    the check proves nothing when attention barely matters); ``tokens``: the image and text tokens
    checked; ``layouts``: the layouts checked; ``seconds``: deriving and checking it took."""

    class_name: str
    diffusers_version: str
    exact: bool
    plan: Optional[SplitPlan]
    errors: Mapping[int, float] = field(default_factory=dict)
    abs_errors: Mapping[int, float] = field(default_factory=dict)
    reason: str = ""
    note: str = ""
    stack: tuple = ()
    attention_effect: float = 0.0
    tokens: tuple = ()
    layouts: tuple = ()
    seconds: float = 0.0
    tolerance: float = TOLERANCE
    version: int = DERIVE_VERSION

    @property
    def largest_error(self) -> Optional[float]:
        return max(self.errors.values()) if self.errors else None

    def refusal(self) -> str:
        """One line: the class, that it cannot run sequence-parallel, and the largest error (or
        why no plan fits)."""
        if self.plan is not None and self.errors:
            ranks = max(self.errors, key=lambda n: self.errors[n])
            worst = self.errors[ranks]
            err = "not finite" if not math.isfinite(worst) else f"{worst:.2g} relative"
            return (f"{self.class_name}: its derived split plan is not exact (largest error {err} on {ranks} "
                    f"sequence ranks, tolerance {self.tolerance:g}; diffusers {self.diffusers_version}): it cannot "
                    f"run sequence-parallel" + (f" ({self.reason})" if self.reason else ""))
        return (f"{self.class_name}: no split plan could be derived (diffusers {self.diffusers_version}): "
                f"{self.reason or 'no candidate fits'}: it cannot run sequence-parallel")

    def summary(self) -> str:
        """One line: exact or refused, the errors per rank count, where the plan splits."""
        errs = ", ".join(f"{n} ranks {e:.2g}" for n, e in sorted(self.errors.items()))
        head = "exact" if self.exact else "refused"
        return f"{head} (max relative error {errs or 'none'}; tolerance {self.tolerance:g})" + (
            f"; {describe(self.plan)}" if self.plan else "")

    def to_json(self) -> dict:
        return {"class_name": self.class_name, "diffusers_version": self.diffusers_version, "exact": self.exact,
                "plan": to_json(self.plan) if self.plan is not None else None,
                "errors": {str(k): _num(v) for k, v in self.errors.items()},
                "abs_errors": {str(k): _num(v) for k, v in self.abs_errors.items()},
                "reason": self.reason, "note": self.note, "stack": list(self.stack),
                "attention_effect": _num(self.attention_effect), "tokens": list(self.tokens),
                "layouts": list(self.layouts), "seconds": round(self.seconds, 2), "tolerance": self.tolerance,
                "version": self.version}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "PlanVerdict":
        return cls(class_name=str(d["class_name"]), diffusers_version=str(d["diffusers_version"]),
                   exact=bool(d["exact"]), plan=from_json(d["plan"]) if d.get("plan") is not None else None,
                   errors={int(k): float(v) for k, v in d.get("errors", {}).items()},
                   abs_errors={int(k): float(v) for k, v in d.get("abs_errors", {}).items()},
                   reason=str(d.get("reason", "")), note=str(d.get("note", "")), stack=tuple(d.get("stack", ())),
                   attention_effect=float(d.get("attention_effect", 0.0)), tokens=tuple(d.get("tokens", ())),
                   layouts=tuple(d.get("layouts", ())), seconds=float(d.get("seconds", 0.0)),
                   tolerance=float(d.get("tolerance", TOLERANCE)), version=int(d.get("version", 0)))


def _num(v: float):
    return v if math.isfinite(v) else str(v)  # JSON has no NaN or inf: "nan", "inf" (float() reads them back)


def cache_dir(environ: Optional[Mapping[str, str]] = None) -> Path:
    """``$SPORCH_SPLIT_PLANS``, else ``$SPORCH_HOME/split-plans``."""
    folder = settings.read(settings.SPLIT_PLANS, environ)
    return folder if folder is not None else settings.read(settings.HOME, environ) / "split-plans"


def diffusers_version() -> str:
    """The installed diffusers' version (read from its metadata: diffusers is not imported), or
    ``"none"``."""
    try:
        return metadata.version("diffusers")
    except metadata.PackageNotFoundError:
        return "none"


def verdict_path(class_name: str, version: Optional[str] = None, folder: Optional[Path] = None) -> Path:
    return (folder or cache_dir()) / f"{class_name}@diffusers-{version or diffusers_version()}.json"


def read_verdict(class_name: str, version: Optional[str] = None, folder: Optional[Path] = None) -> Optional[PlanVerdict]:
    """The cached verdict of ``class_name`` under this diffusers (``version``), or None: none
    cached, one of another derivation version, or a file that does not parse (it is derived
    again and overwritten)."""
    path = verdict_path(class_name, version, folder)
    try:
        verdict = PlanVerdict.from_json(json.loads(read_regular(path).decode("utf-8")))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return verdict if verdict.version == DERIVE_VERSION and verdict.class_name == class_name else None


def write_verdict(verdict: PlanVerdict, folder: Optional[Path] = None) -> Path:
    """Cache ``verdict`` (atomically: a reader sees the old file or the new one)."""
    path = verdict_path(verdict.class_name, verdict.diffusers_version, folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(verdict.to_json(), indent=1) + "\n")
    return path


def unwritable(folder: Optional[Path] = None) -> Optional[str]:
    """Why the cache folder cannot take a verdict (made if missing), or None."""
    folder = folder or cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return (f"the split-plan cache folder {folder} cannot be written ({exc.strerror or exc}); set "
                f"{settings.SPLIT_PLANS.name} to a writable folder")
    return None


def verdict_report(class_name: str, folder: Optional[Path] = None) -> dict[str, Any]:
    """What ``sporch inspect`` shows of a derived plan: the cache file, whether a verdict is cached
    for this diffusers (``checked``), and if so exact or refused, the errors, the plan's entries
    and the refusal line."""
    path = verdict_path(class_name, folder=folder)
    verdict = read_verdict(class_name, folder=folder)
    out: dict[str, Any] = {"cache": str(path), "diffusers_version": diffusers_version(), "checked": verdict is not None}
    if verdict is not None:
        out.update(exact=verdict.exact, errors=dict(verdict.errors), abs_errors=dict(verdict.abs_errors),
                   tolerance=verdict.tolerance, entries=entries(verdict.plan) if verdict.plan is not None else [],
                   note=verdict.note, stack=list(verdict.stack), tokens=list(verdict.tokens),
                   layouts=list(verdict.layouts), attention_effect=verdict.attention_effect,
                   refusal=None if verdict.exact else verdict.refusal(), seconds=verdict.seconds)
    return out
