"""Every environment variable sporch reads, declared once: name, type, default, one line (stdlib only).

This module is the only reader of ``SPORCH_*`` variables in sporch.orchestrator and sporch.runtime
(tests/project/test_settings.py checks it). A module that needs one names its :class:`Setting`
and calls :func:`read` (the typed value, or the declared default when unset) or :func:`raw` (the
text as given); a module that *sets* one for a child process uses the setting's ``name``.
The fault-injection hooks for tests are :class:`Setting` records too, declared in
:mod:`sporch.runtime.faults` and read through :func:`read`. docs/settings.md lists them all,
generated from these declarations (tests/project/test_settings.py).

A value that is not of its type raises ValueError naming the variable; the caller says what
happens then (a one-line refusal, or a warning and the default), as its docstring tells.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Mapping, Optional, Sequence, Tuple

from sporch.orchestrator.contract.numbers import is_digits
from sporch.orchestrator.contract.durations import seconds

#: The types a setting may have: ``text``; ``path`` (``~`` expanded); ``paths`` (``os.pathsep``
#: separated); ``seconds`` (a finite number > 0) and ``seconds>=0``; ``int`` (>= 0); ``flag`` (on
#: when set to anything but ``""`` or ``0``).
KINDS = ("text", "path", "paths", "seconds", "seconds>=0", "int", "flag")
#: Who reads a setting: the ``sporch`` command (orchestrator), the ranks (runtime), or both.
READERS = ("orchestrator", "runtime", "both")


@dataclass(frozen=True)
class Setting:
    """One environment variable: ``name``, ``kind`` (one of :data:`KINDS`), ``default`` (what
    :func:`read` returns when it is unset, typed like a given value when written as text; None:
    the caller's own fallback, told in ``default_doc``), ``doc`` (one line), ``reader`` (one of :data:`READERS`), ``set_by`` (what sets it
    for the ranks, when sporch does)."""

    name: str
    kind: str
    doc: str
    reader: str
    default: Any = None
    default_doc: str = ""
    set_by: str = ""

    def __post_init__(self) -> None:
        if not self.name.startswith("SPORCH_") or self.kind not in KINDS or self.reader not in READERS:
            raise ValueError(f"bad setting declaration {self!r}")

    @property
    def shown_default(self) -> str:
        """The default as docs/settings.md shows it."""
        if self.default_doc:
            return self.default_doc
        return "unset" if self.default is None else str(self.default)


def raw(setting: Setting, environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The variable's text, stripped; None when unset or blank."""
    value = (os.environ if environ is None else environ).get(setting.name, "").strip()
    return value or None


def parse(setting: Setting, text: str) -> Any:
    """``text`` as ``setting``'s type; ValueError (``$NAME ...``) when it is not one."""
    kind = setting.kind
    try:
        if kind == "text":
            return text
        if kind == "path":
            return Path(text).expanduser()
        if kind == "paths":
            return [Path(p).expanduser() for p in text.split(os.pathsep) if p.strip()]
        if kind in ("seconds", "seconds>=0"):
            return seconds(text, inclusive=kind == "seconds>=0")
        if kind == "int":
            if not is_digits(text):
                raise ValueError(f"must be a whole number >= 0, got {text!r}")
            return int(text)
        return text not in ("", "0")  # flag
    except ValueError as exc:
        raise ValueError(f"${setting.name} {exc}") from None


def read(setting: Setting, environ: Optional[Mapping[str, str]] = None) -> Any:
    """The variable's typed value, or ``setting.default`` when unset; ValueError when malformed."""
    text = raw(setting, environ)
    if text is not None:
        return parse(setting, text)
    if isinstance(setting.default, str):  # declared as text: typed like a given value, when read
        return parse(setting, setting.default)
    return False if setting.kind == "flag" and setting.default is None else setting.default


# -- the orchestrator's (the `sporch` command) ------------------------------------------------------
HOME = Setting("SPORCH_HOME", "path", "Where job records (jobs/ID.json), the history store and the derived "
               "split plans (split-plans/) live.", "both", default="~/.local/share/sporch")
HISTORY = Setting("SPORCH_HISTORY", "text", "The campaign history store (a path), or `off` to record nothing.",
                  "orchestrator", default_doc="$SPORCH_HOME/history.sqlite")
CLUSTERS = Setting("SPORCH_CLUSTERS", "paths", "More folders of cluster descriptors (os.pathsep-separated), "
                   "looked up after the built-in ones.", "orchestrator", default="", default_doc="none")
GRACE_S = Setting("SPORCH_GRACE_S", "seconds>=0", "How long `wait`, `status` and `campaign run`/`status` retry "
                  "Slurm or a login host that cannot be reached, when --grace is not given.", "orchestrator",
                  default_doc="300 (wait, campaign run), 60 (status, campaign status)")
SSH_CONFIG = Setting("SPORCH_SSH_CONFIG", "text", "The OpenSSH client config read for login hosts when the "
                     "descriptor's login.ssh_config is not set (`none`: read none).", "orchestrator",
                     default_doc="~/.ssh/config")
SPLIT_PLANS = Setting("SPORCH_SPLIT_PLANS", "path", "Where the split plans sporch derives for diffusers classes "
                      "are cached with their verdicts (one JSON file per class and diffusers version; delete one to "
                      "derive and check it again).", "both", default_doc="$SPORCH_HOME/split-plans")
DEBUG = Setting("SPORCH_DEBUG", "flag", "Show the traceback of an error (as --debug does).", "orchestrator",
                default_doc="off")

# -- the ranks' (sporch.runtime) ---------------------------------------------------------------------
JOB_DIR = Setting("SPORCH_JOB_DIR", "path", "Where a rank writes its results (the job dir).", "runtime",
                  default_doc="plan.job.output_dir", set_by="the batch script, submitit task, run --local, packs")
PLAN = Setting("SPORCH_PLAN", "path", "The plan.json the batch script hands to the ranks (read by the script).",
               "runtime", default_doc="JOB_DIR/plan.json", set_by="the batch script, submitit task")
CAMPAIGN = Setting("SPORCH_CAMPAIGN", "text", "The campaign a packed or array job belongs to "
                   "(for the job's own hooks; sporch itself does not read it).", "runtime",
                   set_by="the campaign batch scripts")
HOSTNAME = Setting("SPORCH_HOSTNAME", "text", "The node name a rank reports (emulated nodes of run --local).",
                   "runtime", default_doc="socket.gethostname()", set_by="run --local")
INIT_METHOD = Setting("SPORCH_INIT_METHOD", "text", "torch.distributed's init_method (replaces the "
                      "MASTER_ADDR/PORT rendezvous).", "runtime", default="env://", set_by="run --local")
FORCE_CPU = Setting("SPORCH_FORCE_CPU", "flag", "Run the ranks on the CPU even where CUDA is available.",
                    "runtime", default_doc="off", set_by="run --local")
DIST_TIMEOUT_S = Setting("SPORCH_DIST_TIMEOUT_S", "seconds", "The process group's timeout (whole seconds).",
                         "runtime", default_doc="the collective timeout + 60 s")
COLLECTIVE_TIMEOUT_S = Setting("SPORCH_COLLECTIVE_TIMEOUT_S", "seconds", "The collective watchdog's timeout; "
                               "overrides the job's resources.collective_timeout.", "runtime",
                               default_doc="resources.collective_timeout, else 300 s or a quarter of the time limit")
PREFLIGHT_BYTES = Setting("SPORCH_PREFLIGHT_BYTES", "int", "The payload of each timed transfer of a preflight job.",
                          "runtime", default_doc="64 MiB (CUDA), 4 MiB (CPU)")

#: Every setting of this module, in the order docs/settings.md lists them (faults: sporch.runtime.faults).
SETTINGS: Tuple[Setting, ...] = (HOME, HISTORY, SPLIT_PLANS, CLUSTERS, GRACE_S, SSH_CONFIG, DEBUG, JOB_DIR, PLAN, CAMPAIGN,
                                 HOSTNAME, INIT_METHOD, FORCE_CPU, DIST_TIMEOUT_S, COLLECTIVE_TIMEOUT_S,
                                 PREFLIGHT_BYTES)


def markdown(groups: Sequence[Tuple[str, Sequence[Setting]]]) -> str:
    """docs/settings.md's tables: one per (title, settings) group."""
    out: List[str] = []
    for title, group in groups:
        out += [f"## {title}", "", "| Variable | Type | Default | Read by | Set by sporch | What it does |",
                "|---|---|---|---|---|---|"]
        out += [f"| `{s.name}` | {s.kind} | {s.shown_default} | {s.reader} | {s.set_by or '-'} | {s.doc} |"
                for s in group]
        out.append("")
    return "\n".join(out)
