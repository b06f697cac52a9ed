"""Checking a typed job (:class:`JobSpec`): each key's value and the keys that conflict, as one-line
errors that name the file and the key. The checks of some sections are in their own modules
(:mod:`.model_checks`, :mod:`.cache_checks`, :mod:`.generate_checks`, :mod:`.job_container`).
"""

from __future__ import annotations

import re

from sporch.orchestrator.config.cache_checks import validate_cache
from sporch.orchestrator.config.generate_checks import validate_generate, validate_pipeline
from sporch.orchestrator.config.job_container import validate_container
from sporch.orchestrator.config.job_spec import JobSpec
from sporch.orchestrator.config.model_checks import lora_problem, vae_stride_problem
from sporch.orchestrator.contract.numbers import digits_value
from sporch.orchestrator.contract.durations import is_valid_time, time_seconds, TIME_FORMS
from sporch.orchestrator.contract.parallel import DIMS
from sporch.orchestrator.contract.vocab import ATTENTION_PRECISIONS, DTYPES, MAX_NAME, QUANT_MODES, SHARD_WEIGHTS, STAGE_MODES, WORKLOAD_KINDS
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.slurm.directives import check_directive_path

#: The workloads that read ``workload.sigmas`` (the sampler's and the pipeline's steps); verify and
#: benchmark time or compare single forward passes and would keep it unused.
SIGMA_KINDS = ("inference", "generate")
#: Frames per second a generated video may have (docs/jobs.md).
FPS_RANGE = (1, 240)


def validate_job(job: JobSpec, source: str) -> JobSpec:
    def bad(key: str, msg: str) -> SporchError:
        return SporchError(f"{source}: '{key}' {msg}")

    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", job.name or ""):
        raise bad("name", f"must be letters, digits, '-', '_' or '.', got {job.name!r}")
    if set(job.name) == {"."}:
        raise bad("name", f"{job.name!r} is not a folder name of its own; use letters or digits")
    if len(job.name) > MAX_NAME:
        raise bad("name", f"is {len(job.name)} characters long; use at most {MAX_NAME}")
    check_directive_path(f"{source}: 'output_dir'", job.output_dir)
    if job.entrypoint is not None and not re.fullmatch(r"[\w.]+(:[\w.]+)?", job.entrypoint):
        raise bad("entrypoint", f"must look like 'pkg.module:function', got {job.entrypoint!r}")
    if job.model.stage not in STAGE_MODES:
        raise bad("model.stage", f"must be one of {', '.join(STAGE_MODES)}, got {job.model.stage!r}")
    if job.model.stage == "node" and not job.model.weights:
        raise bad("model.stage", "node stages model.weights on each node, but the job has no model.weights: "
                  "set model.weights (a checkpoint folder or file) or model.stage=shared")
    if job.model.quant not in QUANT_MODES:
        raise bad("model.quant", f"must be one of {', '.join(QUANT_MODES)}, got {job.model.quant!r}")
    problem = lora_problem(job.model)
    if problem:
        raise bad(*problem)
    problem = vae_stride_problem(job.model.vae_stride)
    if problem:
        raise bad("model.vae_stride", problem)
    w = job.workload
    if w.kind not in WORKLOAD_KINDS:
        raise bad("workload.kind", f"must be one of {', '.join(WORKLOAD_KINDS)}, got {w.kind!r}")
    if w.dtype not in DTYPES:
        raise bad("workload.dtype", f"must be one of {', '.join(DTYPES)}, got {w.dtype!r}")
    for key, low in (("batch", 1), ("steps", 1), ("warmup", 0), ("repeat", 1)):
        if getattr(w, key) < low:
            raise bad(f"workload.{key}", f"must be >= {low}, got {getattr(w, key)}")
    for key in ("frames", "height", "width", "seq_len"):
        v = getattr(w, key)
        if v is not None and v < 1:
            raise bad(f"workload.{key}", f"must be >= 1, got {v}")
    low, high = FPS_RANGE
    if not low <= w.fps <= high:
        raise bad("workload.fps", f"must be {low}..{high} frames per second, got {w.fps}")
    if w.prompt is not None and not str(w.prompt).strip():
        raise bad("workload.prompt", "is empty; give the text to generate from (or workload.prompt_file)")
    if w.shift is not None and w.shift <= 0:
        raise bad("workload.shift", f"must be > 0, got {w.shift}")
    validate_generate(w, bad)
    validate_cache(w, bad)
    if w.sigmas is not None:
        if w.kind not in SIGMA_KINDS:
            raise bad("workload.sigmas", f"is read by the {' and '.join(SIGMA_KINDS)} workloads only, and this job's "
                      f"workload.kind is {w.kind}: remove workload.sigmas, or set workload.kind=inference")
        s = list(w.sigmas)
        numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x <= 1 for x in s)
        if not numbers or len(s) != w.steps or any(a <= b for a, b in zip(s, s[1:])):
            raise bad("workload.sigmas", f"must be workload.steps ({w.steps}) decreasing numbers in (0, 1], one per "
                      f"step before the shift (e.g. [1.0, 0.75, 0.5, 0.25] for 4 steps), got {w.sigmas!r}")
        if w.kind == "generate" and w.scheduler != "euler":
            raise bad("workload.sigmas", "sets the Euler scheduler's sigmas: add workload.scheduler=euler")
    if w.attention_precision not in ATTENTION_PRECISIONS:
        raise bad("workload.attention_precision", f"must be one of {', '.join(ATTENTION_PRECISIONS)}, "
                  f"got {w.attention_precision!r}")
    if w.guidance_scale < 0:
        raise bad("workload.guidance_scale", f"must be >= 0, got {w.guidance_scale}")
    if w.guidance_scale_2 is not None and w.guidance_scale_2 < 0:
        raise bad("workload.guidance_scale_2", f"must be >= 0, got {w.guidance_scale_2}")
    has_shape = any(getattr(w, k) is not None for k in ("height", "width"))
    if w.seq_len is not None and (has_shape or w.frames is not None):
        raise bad("workload.seq_len", "conflicts with frames/height/width; give either seq_len or the video shape")
    if w.seq_len is None and not (w.height is not None and w.width is not None):
        raise bad("workload", "needs height and width (and frames for video), or seq_len")
    for dim in DIMS:
        v = getattr(job.parallel, dim)
        if v is None or v == "auto":
            continue
        if isinstance(v, str):
            if digits_value(v) is not None:
                v = digits_value(v)
                setattr(job.parallel, dim, v)
            else:
                raise bad(f"parallel.{dim}", f"must be a positive integer or 'auto', got {v!r}")
        if v < 1:
            raise bad(f"parallel.{dim}", f"must be a positive integer or 'auto', got {v}")
    if job.parallel.shard_weights not in (*SHARD_WEIGHTS, "auto"):
        raise bad("parallel.shard_weights", f"must be one of {', '.join(SHARD_WEIGHTS)} or auto, "
                  f"got {job.parallel.shard_weights!r}")
    validate_pipeline(job, bad)
    r = job.resources
    if r.nodes is not None and r.nodes < 1:
        raise bad("resources.nodes", f"must be >= 1, got {r.nodes}")
    if r.time is not None and not is_valid_time(str(r.time)):
        raise bad("resources.time", f"{r.time!r} is not a Slurm time ({TIME_FORMS})")
    if r.collective_timeout is not None:
        if not r.collective_timeout > 0:
            raise bad("resources.collective_timeout", f"must be a number of seconds > 0, got {r.collective_timeout}")
        limit = time_seconds(str(r.time)) if r.time is not None else None
        if limit is not None and r.collective_timeout >= limit:
            raise bad("resources.collective_timeout", f"{r.collective_timeout:g} s is not below the time limit "
                      f"resources.time={r.time} ({limit} s); the stacks must be written before Slurm ends the job")
    validate_container(job, source, bad)
    return job

