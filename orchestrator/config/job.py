"""Job specs (``job.yaml``): typed sections, loading with overrides, model resolution.

Sections: ``model`` (ModelSpec), ``workload`` (WorkloadSpec), ``parallel`` (ParallelSpec),
``resources`` (ResourcesSpec), plus ``name``, ``output_dir`` and ``entrypoint``.
The key names are the public interface (docs/jobs.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from orchestrator.errors import SporchError

ATTENTION_KINDS = ("cross", "joint", "self")
WORKLOAD_KINDS = ("inference", "benchmark", "verify", "generate")
OUTPUT_FORMATS = ("mp4", "png")
SCHEDULERS = ("unipc", "euler")
DTYPES = ("float32", "bfloat16", "float16")
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
PARALLEL_DIMS = ("dp", "cfg", "ring", "ulysses")


@dataclass
class ModelSpec:
    preset: Optional[str] = None
    attention: Optional[str] = None  # cross | joint | self
    depth: Optional[int] = None
    single_depth: Optional[int] = None
    hidden: Optional[int] = None
    num_heads: Optional[int] = None
    num_kv_heads: Optional[int] = None
    head_dim: Optional[int] = None
    mlp_ratio: Optional[float] = None
    ffn_dim: Optional[int] = None
    patch: Any = None  # int p -> [1, p, p], or [pt, ph, pw]
    in_channels: Optional[int] = None
    vae_stride: Any = None  # int s -> [1, s, s], or [st, sh, sw]
    text_len: Optional[int] = None
    text_dim: Optional[int] = None
    qk_norm: Optional[bool] = None
    weights: Optional[str] = None  # local checkpoint folder/file (original or diffusers layout)


@dataclass
class WorkloadSpec:
    kind: str = "inference"  # inference | benchmark | verify | generate
    batch: int = 1
    frames: Optional[int] = None
    height: Optional[int] = None
    width: Optional[int] = None
    seq_len: Optional[int] = None
    steps: int = 50
    guidance_scale: float = 1.0  # CFG on when > 1
    dtype: str = "bfloat16"
    warmup: int = 1
    repeat: int = 3
    seed: int = 0
    # -- generate (docs/generate.md) --------------------------------------------------------
    prompt: Optional[str] = None
    prompt_file: Optional[str] = None  # one prompt per line; relative to the job file's folder
    negative_prompt: Optional[str] = None  # Wan2.1 CFG; default "" (as WanPipeline)
    shift: Optional[float] = None  # Wan: flow_shift; Flux: a fixed shift instead of the resolution-dependent mu
    scheduler: Optional[str] = None  # unipc | euler; default: the pipeline folder's scheduler/
    output_format: Optional[str] = None  # mp4 | png; default: mp4 for Wan2.1, png for Flux.1
    fps: int = 16
    tiny_weights: bool = False  # create a tiny random pipeline at model.weights if it is missing


@dataclass
class ParallelSpec:
    dp: Optional[Union[int, str]] = None  # int, "auto", or unset (default)
    cfg: Optional[Union[int, str]] = None
    ring: Optional[Union[int, str]] = None
    ulysses: Optional[Union[int, str]] = None


@dataclass
class ResourcesSpec:
    time: Optional[str] = None  # Slurm time limit; default: the cluster's slurm.time
    nodes: Optional[int] = None  # default: the cluster's node count


@dataclass
class JobSpec:
    name: str = ""
    output_dir: str = "runs"
    entrypoint: Optional[str] = None  # "pkg.module:function" (default: the built-in runner)
    model: ModelSpec = field(default_factory=ModelSpec)
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    parallel: ParallelSpec = field(default_factory=ParallelSpec)
    resources: ResourcesSpec = field(default_factory=ResourcesSpec)
    source: str = ""  # file it was loaded from

    def to_dict(self) -> dict[str, Any]:
        from orchestrator.config.loading import to_plain

        return to_plain(self)


# -- loading --------------------------------------------------------------------------
def load_job(path: str | Path, overrides: Sequence[str] = ()) -> JobSpec:
    """Read ``path``, apply dotlist ``overrides`` (``parallel.ring=2``), type-check, validate."""
    from orchestrator.config.loading import parse_overrides, read_yaml, to_typed

    p = Path(path)
    cfg = read_yaml(p)
    if "name" not in cfg:
        cfg["name"] = p.stem
    layers = [(cfg, str(p))]
    if overrides:
        layers.append((parse_overrides(overrides), "command-line override"))
    job = to_typed(JobSpec, layers)
    job.source = str(p.resolve())
    return validate_job(job, str(p))


def job_from_dict(data: dict[str, Any], source: str = "<dict>") -> JobSpec:
    """Typed JobSpec from a plain dict (tests, programmatic use)."""
    from omegaconf import OmegaConf

    from orchestrator.config.loading import to_typed

    cfg = OmegaConf.create(dict(data))
    if "name" not in cfg:
        cfg["name"] = "job"
    return validate_job(to_typed(JobSpec, [(cfg, source)]), source)


def validate_job(job: JobSpec, source: str) -> JobSpec:
    def bad(key: str, msg: str) -> SporchError:
        return SporchError(f"{source}: '{key}' {msg}")

    import re

    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", job.name or ""):
        raise bad("name", f"must be letters, digits, '-', '_' or '.', got {job.name!r}")
    if job.entrypoint is not None and not re.fullmatch(r"[\w.]+(:[\w.]+)?", job.entrypoint):
        raise bad("entrypoint", f"must look like 'pkg.module:function', got {job.entrypoint!r}")
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
    if w.guidance_scale < 0:
        raise bad("workload.guidance_scale", f"must be >= 0, got {w.guidance_scale}")
    _validate_generate(w, bad)
    has_shape = any(getattr(w, k) is not None for k in ("height", "width"))
    if w.seq_len is not None and (has_shape or w.frames is not None):
        raise bad("workload.seq_len", "conflicts with frames/height/width; give either seq_len or the video shape")
    if w.seq_len is None and not (w.height is not None and w.width is not None):
        raise bad("workload", "needs height and width (and frames for video), or seq_len")
    for dim in PARALLEL_DIMS:
        v = getattr(job.parallel, dim)
        if v is None or v == "auto":
            continue
        if isinstance(v, str):
            if v.strip().isdigit():
                v = int(v)
                setattr(job.parallel, dim, v)
            else:
                raise bad(f"parallel.{dim}", f"must be a positive integer or 'auto', got {v!r}")
        if v < 1:
            raise bad(f"parallel.{dim}", f"must be a positive integer or 'auto', got {v}")
    r = job.resources
    if r.nodes is not None and r.nodes < 1:
        raise bad("resources.nodes", f"must be >= 1, got {r.nodes}")
    if r.time is not None:
        from orchestrator.config.cluster import is_valid_time

        if not is_valid_time(str(r.time)):
            raise bad("resources.time", f"{r.time!r} is not a Slurm time (MM, HH:MM:SS or D-HH:MM:SS)")
    return job


def _validate_generate(w: WorkloadSpec, bad) -> None:
    if w.kind != "generate":
        return
    if (w.prompt is None) == (w.prompt_file is None):
        raise bad("workload.prompt", "generate needs exactly one of workload.prompt or workload.prompt_file")
    if w.output_format is not None and w.output_format not in OUTPUT_FORMATS:
        raise bad("workload.output_format", f"must be one of {', '.join(OUTPUT_FORMATS)}, got {w.output_format!r}")
    if w.output_format == "png" and (w.frames or 1) > 1:
        raise bad("workload.output_format", f"png holds one image but frames is {w.frames}; use mp4")
    if w.scheduler is not None and w.scheduler not in SCHEDULERS:
        raise bad("workload.scheduler", f"must be one of {', '.join(SCHEDULERS)} (or unset: the folder's), "
                  f"got {w.scheduler!r}")
    if w.shift is not None and w.shift <= 0:
        raise bad("workload.shift", f"must be > 0, got {w.shift}")
    if w.fps < 1:
        raise bad("workload.fps", f"must be >= 1, got {w.fps}")
    if w.seq_len is not None:
        raise bad("workload.seq_len", "generate needs the video/image shape (frames, height, width), not seq_len")


# -- model resolution -------------------------------------------------------------------
_SHAPE_KEYS = (
    "attention", "depth", "single_depth", "hidden", "num_heads", "num_kv_heads", "head_dim",
    "ffn_dim", "mlp_ratio", "patch", "in_channels", "vae_stride", "text_len", "text_dim", "qk_norm",
)
_REQUIRED_WITHOUT_PRESET = (
    "attention", "depth", "hidden", "num_heads", "patch", "in_channels", "vae_stride", "text_len",
)


def _triple(value: Any, key: str) -> list[int]:
    if isinstance(value, bool):
        raise SporchError(f"model.{key} must be an int or a list [t, h, w], got {value!r}")
    if isinstance(value, int):
        return [1, value, value]
    if isinstance(value, (list, tuple)) and len(value) == 3 and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        return [int(v) for v in value]
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return [1, int(value[0]), int(value[1])]
    raise SporchError(f"model.{key} must be an int or a list [t, h, w] of ints, got {value!r}")


def resolve_model(spec: ModelSpec) -> dict[str, Any]:
    """Preset + explicit fields -> the complete ``plan.model`` dict.

    Explicit fields win. hidden = num_heads x head_dim: with one or two of the three given,
    the others follow (changing num_heads keeps hidden and re-derives head_dim). With an MHA
    preset (kv == heads), num_kv_heads follows num_heads unless given. ffn_dim follows
    mlp_ratio (or keeps the preset's ratio when hidden changes).
    """
    given = {k: getattr(spec, k) for k in _SHAPE_KEYS if getattr(spec, k) is not None}
    if spec.preset is not None:
        from orchestrator.config.presets import get_preset

        base = get_preset(spec.preset)
        preset_name = spec.preset.strip().lower()
    else:
        missing = [k for k in _REQUIRED_WITHOUT_PRESET if k not in given]
        if "mlp_ratio" not in given and "ffn_dim" not in given:
            missing.append("mlp_ratio (or ffn_dim)")
        if missing:
            from orchestrator.config.presets import preset_names

            raise SporchError(
                "model without a preset needs " + ", ".join(f"model.{m}" for m in missing)
                + f"; or set model.preset to one of: {', '.join(preset_names())}"
            )
        base = {}
        preset_name = None

    attention = given.get("attention", base.get("attention"))
    if attention not in ATTENTION_KINDS:
        raise SporchError(f"model.attention must be one of {', '.join(ATTENTION_KINDS)}, got {attention!r}")

    for k, v in given.items():
        if k in ("attention", "patch", "vae_stride", "qk_norm", "mlp_ratio"):
            continue
        if v < (0 if k in ("single_depth", "text_len", "text_dim") else 1):
            raise SporchError(f"model.{k} must be positive, got {v}")

    # hidden / heads / head_dim
    hidden, heads, hd = given.get("hidden"), given.get("num_heads"), given.get("head_dim")
    if hidden is not None and heads is not None and hd is not None:
        if hidden != heads * hd:
            raise SporchError(
                f"model.hidden {hidden} != num_heads {heads} x head_dim {hd} = {heads * hd}; drop one of them"
            )
    elif hidden is not None and heads is not None:
        pass
    elif hidden is not None and hd is not None:
        heads = None
    elif heads is not None and hd is not None:
        hidden = heads * hd
    elif hidden is not None:
        heads = base.get("num_heads")
    elif heads is not None:
        hidden = base.get("hidden")
    elif hd is not None:
        hidden = base.get("hidden")
    else:
        hidden, heads, hd = base.get("hidden"), base.get("num_heads"), base.get("head_dim")
    if heads is None and hd is not None:
        if hidden % hd:
            raise SporchError(f"model.hidden {hidden} is not a multiple of head_dim {hd}")
        heads = hidden // hd
    if hd is None:
        if hidden % heads:
            raise SporchError(
                f"model.hidden {hidden} is not divisible by num_heads {heads}; set model.head_dim or change hidden"
            )
        hd = hidden // heads

    # kv heads
    kv = given.get("num_kv_heads")
    if kv is None:
        base_kv, base_h = base.get("num_kv_heads"), base.get("num_heads")
        kv = heads if base_kv is None or base_kv == base_h else base_kv
    if kv > heads or heads % kv:
        raise SporchError(f"model.num_kv_heads {kv} must divide num_heads {heads}")

    # ffn
    if "ffn_dim" in given and "mlp_ratio" in given:
        raise SporchError("model.ffn_dim and model.mlp_ratio both given; keep one")
    if "ffn_dim" in given:
        ffn = int(given["ffn_dim"])
    elif "mlp_ratio" in given:
        if given["mlp_ratio"] <= 0:
            raise SporchError(f"model.mlp_ratio must be > 0, got {given['mlp_ratio']}")
        ffn = int(round(hidden * float(given["mlp_ratio"])))
    elif hidden == base.get("hidden"):
        ffn = int(base["ffn_dim"])
    else:
        ffn = int(round(hidden * base["ffn_dim"] / base["hidden"]))
    if ffn < 1:
        raise SporchError(f"model FFN width must be >= 1, got {ffn}")

    depth = given.get("depth", base.get("depth"))
    if attention == "joint":
        if "single_depth" in given:
            single = given["single_depth"]
        elif base.get("attention") == "joint":
            single = base.get("single_depth", 0)
        else:
            single = base.get("joint_single_depth", 0)
    else:
        single = given.get("single_depth", 0)
        if single:
            raise SporchError(f"model.single_depth {single} needs attention: joint (got {attention})")
    text_len = given.get("text_len", base.get("text_len", 0))
    text_dim = given.get("text_dim", base.get("text_dim", hidden if text_len else 0))
    if attention != "self" and text_len < 1:
        raise SporchError(f"model.text_len must be >= 1 for attention {attention}")
    if attention == "self":
        text_len, text_dim = 0, 0
    patch = _triple(given.get("patch", base.get("patch")), "patch")
    vae = _triple(given.get("vae_stride", base.get("vae_stride")), "vae_stride")
    if min(patch) < 1 or min(vae) < 1:
        raise SporchError(f"model.patch {patch} and vae_stride {vae} must be >= 1")
    out = {
        "preset": preset_name,
        "attention": attention,
        "depth": int(depth),
        "single_depth": int(single),
        "hidden": int(hidden),
        "num_heads": int(heads),
        "num_kv_heads": int(kv),
        "head_dim": int(hd),
        "ffn_dim": ffn,
        "mlp_ratio": round(ffn / hidden, 6),
        "patch": patch,
        "in_channels": int(given.get("in_channels", base.get("in_channels"))),
        "vae_stride": vae,
        "text_len": int(text_len),
        "text_dim": int(text_dim),
        "qk_norm": bool(given.get("qk_norm", base.get("qk_norm", False))),
    }
    if spec.weights:
        out["weights"] = str(spec.weights)
    return out


def sequence_shape(model: dict[str, Any], workload: WorkloadSpec) -> tuple[int, list[int]]:
    """(latent tokens, grid [f, h, w]) for the workload's video/image shape.

    latent frames = (frames - 1) // st + 1, latent h = height // sh, w = width // sw;
    tokens = (lf // pt) * (lh // ph) * (lw // pw).
    """
    if workload.seq_len is not None:
        return int(workload.seq_len), [1, 1, int(workload.seq_len)]
    st, sh, sw = model["vae_stride"]
    pt, ph, pw = model["patch"]
    frames = workload.frames if workload.frames is not None else 1
    height, width = workload.height, workload.width
    if (frames - 1) % st:
        k = (frames - 1) // st
        ok = f"{st * k + 1} or {st * (k + 1) + 1}"
        raise SporchError(
            f"workload.frames {frames} must be 1 + a multiple of the VAE time stride {st} (e.g. {ok})"
        )
    lf = (frames - 1) // st + 1
    for key, size, s, p in (("height", height, sh, ph), ("width", width, sw, pw)):
        if size % (s * p):
            lo = size // (s * p) * (s * p)
            raise SporchError(
                f"workload.{key} {size} must be a multiple of VAE stride {s} x patch {p} = {s * p} "
                f"(e.g. {lo or s * p} or {lo + s * p})"
            )
    if lf % pt:
        raise SporchError(
            f"latent frames {lf} (from {frames} frames, VAE stride {st}) must be a multiple of the time patch {pt}"
        )
    grid = [lf // pt, height // sh // ph, width // sw // pw]
    return grid[0] * grid[1] * grid[2], grid
