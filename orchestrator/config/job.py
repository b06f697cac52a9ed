"""Loading a job file (``job.yaml``) into a :class:`JobSpec`: overrides, typing, then the checks
(:mod:`.job_checks`); and the rule for the job's relative file paths.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

from sporch.orchestrator.config.job_checks import validate_job
from sporch.orchestrator.config.job_spec import JobSpec
from sporch.orchestrator.config.loading import parse_overrides, plain_typed, read_plain, read_yaml, to_typed


def job_relative(path: Optional[str], source: Optional[str]) -> Optional[str]:
    """A relative file path of the job (``workload.prompt_file``, ``workload.image``,
    ``model.lora[].path``) is relative to the job file's folder (``source``, the job file)."""
    if path and source and not Path(path).expanduser().is_absolute():
        return str(Path(source).parent / path)
    return path


def load_job(path: str | Path, overrides: Sequence[str] = ()) -> JobSpec:
    """Read ``path``, apply dotlist ``overrides`` (``parallel.ring=2``), type-check, validate."""
    p = Path(path)
    job = (None if overrides else plain_job(p)) or omegaconf_job(p, overrides)
    job.source = str(p.resolve())
    return validate_job(job, str(p))


def omegaconf_job(p: Path, overrides: Sequence[str] = ()) -> JobSpec:
    """The job file ``p`` with ``overrides``, typed by OmegaConf. Not validated yet."""
    cfg = read_yaml(p)
    if "name" not in cfg:
        cfg["name"] = p.stem
    layers = [(cfg, str(p))]
    if overrides:
        layers.append((parse_overrides(overrides), "command-line override"))
    return to_typed(JobSpec, layers)


def plain_job(p: Path) -> Optional[JobSpec]:
    """The job file ``p`` typed without OmegaConf (config/loading.py, "the plain path"), or None
    where OmegaConf must read it. Not validated yet."""
    data = read_plain(p)
    if data is None:
        return None
    data.setdefault("name", p.stem)
    return plain_typed(JobSpec, data, str(p))


def job_from_dict(data: dict[str, Any], source: str = "<dict>") -> JobSpec:
    """Typed JobSpec from a plain dict (tests, programmatic use)."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(dict(data))
    if "name" not in cfg:
        cfg["name"] = "job"
    return validate_job(to_typed(JobSpec, [(cfg, source)]), source)
