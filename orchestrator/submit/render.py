"""Render the Slurm batch script of a :class:`~sporch.orchestrator.submit.slurm_job.SlurmJob`
(jinja2, StrictUndefined): ``render_sbatch(plan, job_dir)``. The job's files are named in
:mod:`sporch.orchestrator.contract.job_files` (docs/jobs.md)."""

from __future__ import annotations

import shlex

from sporch.orchestrator import __version__
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.paths import templates_dir
from sporch.orchestrator.contract.plan import Plan
from sporch.orchestrator.slurm.directives import check_line, filename_pattern
from sporch.orchestrator.submit.slurm_job import SlurmJob

TEMPLATE = "sbatch.j2"


def _bytecode_cache():
    """jinja2's compiled-template cache under the temp dir (faster CLI startup), or None.

    A cache is never worth a failed command: a full or read-only temp dir leaves the template
    uncached (``dump_bytecode`` swallows the OSError) instead of failing the render."""
    import jinja2

    class QuietCache(jinja2.FileSystemBytecodeCache):
        def dump_bytecode(self, bucket) -> None:
            try:
                super().dump_bytecode(bucket)
            except OSError:
                pass

    try:
        return QuietCache()
    except Exception:  # pragma: no cover - no usable temp dir
        return None


def _environment():
    import jinja2

    cache = _bytecode_cache()
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        bytecode_cache=cache,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["sh"] = lambda v: shlex.quote(str(v))
    # a value in a comment or #SBATCH line: refused unless it is one line
    env.filters["line"] = lambda v: check_line("script value", v)
    # a folder at the start of a Slurm filename pattern (srun --output): its '%' doubled
    env.filters["pattern"] = filename_pattern
    return env


def render_template(name: str, **context) -> str:
    """``templates/<name>`` rendered with ``context`` (and sporch's version)."""
    import jinja2

    try:
        return _environment().get_template(name).render(version=__version__, **context)
    except jinja2.UndefinedError as e:
        raise SporchError(f"template {name}: {e}") from e


def render_job(job: SlurmJob) -> str:
    """The batch script text of ``job``."""
    return render_template(TEMPLATE, job=job.check())


def render_sbatch(plan: Plan, job_dir: str) -> str:
    """The batch script text for ``plan``, with its files under ``job_dir``."""
    return render_job(SlurmJob.from_plan(plan, job_dir))
