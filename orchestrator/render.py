"""Render the Slurm batch script from a Plan (jinja2, StrictUndefined).

The Plan carries the resolved cluster descriptor, so ``render_sbatch(plan, job_dir)`` needs
nothing else. Paths inside the job dir (documented in docs/jobs.md)::

    <job_dir>/plan.json            the Plan (runtime input)
    <job_dir>/job.sbatch           this script
    <job_dir>/logs/<jobid>.out|err         the batch script's own output
    <job_dir>/logs/<jobid>_<rank>.out|err  each rank's output (srun %t = global rank)
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from orchestrator.errors import SporchError
from orchestrator.plan.schema import Plan

TEMPLATE = "sbatch.j2"
PLAN_FILE = "plan.json"
SCRIPT_FILE = "job.sbatch"


def _environment():
    import jinja2

    from orchestrator.paths import templates_dir

    try:  # compiled templates cached under the temp dir (jinja2's default): faster CLI startup
        cache = jinja2.FileSystemBytecodeCache()
    except Exception:  # pragma: no cover - unwritable temp dir
        cache = None
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        bytecode_cache=cache,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["sh"] = lambda v: shlex.quote(str(v))
    return env


def _sbatch_line(line: str) -> str:
    line = line.strip()
    if line.startswith("#SBATCH"):
        line = line[len("#SBATCH"):].strip()
    if not line.startswith("-"):
        raise SporchError(f"slurm.extra line {line!r} is not an sbatch option (e.g. --reservation=NAME)")
    return line


def render_context(plan: Plan, job_dir: str) -> dict[str, Any]:
    from orchestrator import __version__
    from orchestrator.plan.layouts import short

    if not job_dir or re.search(r"\s", job_dir):
        raise SporchError(f"job dir {job_dir!r} must be a non-empty path without whitespace")
    cluster = plan.cluster.to_dict()
    slurm = dict(cluster["slurm"])
    slurm["mem"] = None if slurm.get("mem") in (None, "") else str(slurm["mem"])
    job_dir = job_dir.rstrip("/") or "/"
    return {
        "version": __version__,
        "plan": plan,
        "name": plan.job.name,
        "cluster": cluster,
        "slurm": slurm,
        "gpu_directive": slurm["gpu_directive"],
        "time": plan.job.time or slurm["time"],
        "extra": [_sbatch_line(x) for x in slurm.get("extra", [])],
        "setup": list(cluster.get("setup", [])),
        "env": dict(cluster.get("env", {})),
        "python": cluster.get("python", "python"),
        "job_dir": job_dir,
        "plan_path": f"{job_dir}/{PLAN_FILE}",
        "layout_text": short(plan.layout),
    }


def render_sbatch(plan: Plan, job_dir: str) -> str:
    """The batch script text for ``plan``, with its files under ``job_dir``."""
    import jinja2

    try:
        return _environment().get_template(TEMPLATE).render(**render_context(plan, job_dir))
    except jinja2.UndefinedError as e:
        raise SporchError(f"template {TEMPLATE}: {e}") from e
