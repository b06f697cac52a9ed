"""The planner's first decisions: the model's full shape and the workload's token count.

``resolve_model(ModelSpec) -> ModelSection``: a preset plus explicit fields. Explicit fields
win. hidden = num_heads x head_dim: with one or two of the three given, the others follow
(changing num_heads keeps hidden and re-derives head_dim). With an MHA preset (kv == heads),
num_kv_heads follows num_heads unless given. ffn_dim follows mlp_ratio (or keeps the preset's
ratio when hidden changes).

``sequence_shape(model, WorkloadSpec) -> (tokens, grid)``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from sporch.orchestrator.config.job_spec import ModelSpec, WorkloadSpec
from sporch.orchestrator.config.model_checks import vae_stride_problem, weights_without_model
from sporch.orchestrator.config.presets import get_preset, preset_names
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.contract.vocab import ATTENTION_KINDS
from sporch.orchestrator.models.checkpoint_files import CheckpointError
from sporch.orchestrator.models.families import generic_preset, get_family
from sporch.orchestrator.models import find_preset, preset_family
from sporch.orchestrator.plan.experts import boundary_ratio, expand_timesteps
from sporch.orchestrator.models.checkpoint_config import (CheckpointModel, UnknownModelConfig,
                                                                read_checkpoint_model)
from sporch.orchestrator.models.pipeline_sizes import read_pipeline_sizes
from sporch.orchestrator.contract.sections import ModelSection

SHAPE_KEYS = (
    "attention", "depth", "single_depth", "hidden", "num_heads", "num_kv_heads", "head_dim",
    "ffn_dim", "mlp_ratio", "patch", "in_channels", "vae_stride", "text_len", "text_dim", "qk_norm",
)
REQUIRED_WITHOUT_PRESET = (
    "attention", "depth", "hidden", "num_heads", "patch", "in_channels", "vae_stride", "text_len",
)
#: Fields that may be 0 (everything else numeric must be >= 1).
MAY_BE_ZERO = ("single_depth", "text_len", "text_dim")


def triple(value: Any, key: str) -> list[int]:
    """``p`` -> [1, p, p]; [h, w] -> [1, h, w]; [t, h, w] as is."""
    if isinstance(value, bool):
        raise SporchError(f"model.{key} must be an int or a list [t, h, w], got {value!r}")
    if isinstance(value, int):
        return [1, value, value]
    ints = isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    if ints and len(value) == 3:
        return [int(v) for v in value]
    if ints and len(value) == 2:
        return [1, int(value[0]), int(value[1])]
    raise SporchError(f"model.{key} must be an int or a list [t, h, w] of ints, got {value!r}")


def base_shape(spec: ModelSpec, given: dict[str, Any]) -> tuple[dict[str, Any], Optional[str]]:
    """(the preset's shape or {}, the preset's name); a model without a preset must give the rest."""
    if spec.preset is not None:
        return get_preset(spec.preset), spec.preset.strip().lower()
    missing = [k for k in REQUIRED_WITHOUT_PRESET if k not in given]
    if "mlp_ratio" not in given and "ffn_dim" not in given:
        missing.append("mlp_ratio (or ffn_dim)")
    if missing and spec.weights:  # a config.json there would have been the base: it has none
        raise SporchError(weights_without_model(spec.weights))
    if missing:
        raise SporchError(
            "model without a preset needs " + ", ".join(f"model.{m}" for m in missing)
            + f"; or set model.preset to one of: {', '.join(preset_names())}"
        )
    return {}, None


def check_given(given: dict[str, Any]) -> None:
    for k, v in given.items():
        if k in ("attention", "patch", "vae_stride", "qk_norm", "mlp_ratio"):
            continue
        if v < (0 if k in MAY_BE_ZERO else 1):
            raise SporchError(f"model.{k} must be positive, got {v}")


def head_shape(given: dict[str, Any], base: dict[str, Any]) -> tuple[int, int, int]:
    """(hidden, num_heads, head_dim) with hidden = num_heads x head_dim."""
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
    elif heads is not None or hd is not None:
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
    return int(hidden), int(heads), int(hd)


def kv_heads(given: dict[str, Any], base: dict[str, Any], heads: int) -> int:
    kv = given.get("num_kv_heads")
    if kv is None:
        base_kv, base_h = base.get("num_kv_heads"), base.get("num_heads")
        kv = heads if base_kv is None or base_kv == base_h else base_kv
    if kv > heads or heads % kv:
        raise SporchError(f"model.num_kv_heads {kv} must divide num_heads {heads}")
    return int(kv)


def ffn_width(given: dict[str, Any], base: dict[str, Any], hidden: int) -> int:
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
    return ffn


def single_depth(given: dict[str, Any], base: dict[str, Any], attention: str) -> int:
    """Single-stream blocks: joint attention only."""
    if attention != "joint":
        single = given.get("single_depth", 0)
        if single:
            raise SporchError(f"model.single_depth {single} needs attention: joint (got {attention})")
        return 0
    if "single_depth" in given:
        return int(given["single_depth"])
    if base.get("attention") == "joint":
        return int(base.get("single_depth", 0))
    return int(base.get("joint_single_depth", 0))


def text_shape(given: dict[str, Any], base: dict[str, Any], attention: str, hidden: int) -> tuple[int, int]:
    """(text_len, text_dim); (0, 0) for self-attention models."""
    text_len = given.get("text_len", base.get("text_len", 0))
    text_dim = given.get("text_dim", base.get("text_dim", hidden if text_len else 0))
    if attention != "self" and text_len < 1:
        raise SporchError(f"model.text_len must be >= 1 for attention {attention}")
    if attention == "self":
        return 0, 0
    return int(text_len), int(text_dim)


def checkpoint_model(spec: ModelSpec) -> Optional[CheckpointModel]:
    """The model ``model.weights``' config.json describes (None: no weights, or no config)."""
    if not spec.weights:
        return None
    try:
        return read_checkpoint_model(spec.weights)
    except UnknownModelConfig as exc:
        if spec.preset is not None:  # the preset says what it is; the loader checks the tensors
            return None
        raise SporchError(str(exc)) from None
    except CheckpointError as exc:
        raise SporchError(str(exc)) from None


#: Knobs that bound the job rather than describe the model (checked against the token grid).
BOUNDS = ("rope_max_seq_len",)
#: Knobs' values when neither a preset nor a checkpoint sets them (the runtime's ModelConfig defaults).
KNOB_DEFAULTS: dict[str, Any] = {"freq_dim": 256, "eps": 1e-6, "pooled_dim": 0, "guidance_embed": False,
                                 "image_dim": 0}


def _effective(name: str, section: ModelSection, preset_knobs: dict[str, Any]) -> Any:
    """The value the job's model (preset, explicit fields) has for ``name``, as a checkpoint's
    config would state it."""
    if name in SHAPE_KEYS or name in ("num_kv_heads",):
        return getattr(section, name)
    if name == "out_channels":
        return preset_knobs.get("out_channels") or section.in_channels
    if name == "rope_axes":
        hd = section.head_dim
        return list(preset_knobs.get("rope_axes") or (hd - 4 * (hd // 6), 2 * (hd // 6), 2 * (hd // 6)))
    return preset_knobs.get(name, KNOB_DEFAULTS.get(name))


def disagreements(ckpt: CheckpointModel, section: ModelSection, preset_knobs: dict[str, Any],
                  label: str = "job") -> list[str]:
    """``name value (job: value)`` for every field or knob the checkpoint's config sets
    differently from the job's model."""
    out = []
    for name in sorted(ckpt.keys):
        if name in BOUNDS:
            continue
        theirs = {**ckpt.fields, **ckpt.knobs}.get(name)
        ours = _effective(name, section, preset_knobs)
        same = (list(theirs) == list(ours)) if isinstance(theirs, (list, tuple)) and isinstance(ours, (list, tuple)) \
            else theirs == ours
        if not same:
            out.append(f"{name} {theirs!r} ({label}: {ours!r}, config key {ckpt.keys[name]})")
    return out


def resolve_model(spec: ModelSpec) -> ModelSection:
    """Preset + explicit fields -> the complete ``plan.model`` section. With ``model.weights``
    and no preset, the checkpoint's config.json is the base (its knobs travel in
    ``plan.model.knobs``); a preset or a field that disagrees with the config is refused, every
    disagreement in one line. A two-expert model (Wan2.2 A14B) gets its ``boundary_ratio``, a
    model with per-token timesteps (Wan2.2 TI2V-5B) ``expand_timesteps`` (plan/experts.py)."""
    ckpt = checkpoint_model(spec)  # config.json read once (tests/plan/test_planner_reads_once.py)
    section = _one_transformer(spec, ckpt)
    section = dataclasses.replace(section, **family_fields(spec, ckpt))
    if ckpt is None:
        check_generic_preset_shape(spec, section)
    return dataclasses.replace(section, boundary_ratio=boundary_ratio(spec), expand_timesteps=expand_timesteps(spec))


def family_fields(spec: ModelSpec, ckpt: Optional[CheckpointModel]) -> dict[str, Any]:
    """``family``, ``diffusers_class``, ``diffusers_config`` of ``plan.model``: decided here, once,
    from the checkpoint's config.json or the preset (models/families)."""
    if ckpt is not None and ckpt.family_key:
        # the folder's config.json (the runtime loads the folder; the planner counts its parameters from it)
        config = dict(ckpt.config) if ckpt.diffusers_class and ckpt.config is not None else None
        out = {"family": ckpt.family_key, "diffusers_class": ckpt.diffusers_class, "diffusers_config": config,
               "pipeline_sizes": folder_pipeline_sizes(ckpt)}
        return {**out, **_guidance(ckpt.family_key, ckpt.diffusers_class, ckpt.config or {})}
    found = generic_preset(spec.preset) if spec.preset else None
    if found is not None:
        fam, preset = found
        out = {"family": fam.name, "diffusers_class": fam.classes[0], "diffusers_config": dict(preset.config)}
        return {**out, **_guidance(fam.name, fam.classes[0], preset.config)}
    return {"family": preset_family(spec.preset), "diffusers_class": None, "diffusers_config": None}


def check_generic_preset_shape(spec: ModelSpec, section: ModelSection) -> None:
    """A generic-path preset is built from its diffusers config (``plan.model.diffusers_config``),
    so a shape field set besides it (``model.depth=10``) would plan one model and run another:
    refused in one line, naming each field and the preset's value."""
    found = generic_preset(spec.preset) if spec.preset else None
    if found is None:
        return
    fam, preset = found
    changed = [f"model.{k}={getattr(section, k)!r} (the preset's: {v!r})" for k, v in fam.shape(preset.config).items()
               if (list(v) != list(getattr(section, k)) if isinstance(v, (list, tuple)) else v != getattr(section, k))]
    if changed:
        raise SporchError(f"{', '.join(changed)}: preset {preset.name} runs diffusers' {fam.classes[0]} with its published "
                          "config, so its shape cannot be changed here; drop the override, or point model.weights at a "
                          "folder whose config.json has the shape you want")


def folder_pipeline_sizes(ckpt: CheckpointModel) -> Optional[dict[str, Any]]:
    """A generic-path pipeline folder's text encoders and VAE sized from their safetensors headers
    (models/pipeline_sizes.py), for the generate memory estimate; None: the transformer's folder
    alone, a family without a generate pipeline, or parts it cannot size."""
    fam = get_family(ckpt.family_key) if ckpt.diffusers_class and ckpt.family_key else None
    if fam is None or not fam.pipeline_class or ckpt.config_file.parent.name != "transformer":
        return None
    try:
        return read_pipeline_sizes(ckpt.config_file.parent.parent)
    except CheckpointError as exc:
        raise SporchError(str(exc)) from None


def _guidance(family: str, diffusers_class: Optional[str], config: dict) -> dict[str, Any]:
    """A guidance-distilled family on the generic path (HunyuanVideo): one pass per step, the
    guidance scale an embedded input (``guidance_embeds``), no CFG branch."""
    if not diffusers_class or get_family(family).cfg:
        return {}
    return {"distilled": True, "guidance_embed": bool(config.get("guidance_embeds", True))}


def _one_transformer(spec: ModelSpec, ckpt: Optional[CheckpointModel]) -> ModelSection:
    section = _resolve(spec, dict(ckpt.fields) if ckpt is not None and spec.preset is None else None)
    if ckpt is None:
        return section
    preset_knobs = dict(find_preset(spec.preset).knobs) if spec.preset and find_preset(spec.preset) else {}
    if spec.preset is None:
        preset_knobs = dict(ckpt.knobs)
    wrong = disagreements(ckpt, section, preset_knobs)
    if wrong:
        fix = (f"drop model.preset ({spec.preset})" if spec.preset else "drop the model fields") + \
            " to take the model from the checkpoint, or point model.weights at a checkpoint of this model"
        raise SporchError(f"model.weights {spec.weights}: the checkpoint ({ckpt.describe()}) disagrees with the "
                          f"job's model in {len(wrong)} field(s): {'; '.join(wrong)}; {fix}")
    if spec.preset is None:
        knobs = dict(ckpt.knobs)
        return dataclasses.replace(section, knobs=knobs or None, distilled=bool(knobs.get("distilled", False)),
                                   guidance_embed=bool(knobs.get("guidance_embed", False)))
    bounds = {k: ckpt.knobs[k] for k in BOUNDS if ckpt.knobs.get(k) is not None}
    return dataclasses.replace(section, knobs=bounds) if bounds else section


def _resolve(spec: ModelSpec, from_checkpoint: Optional[dict[str, Any]]) -> ModelSection:
    given = {k: getattr(spec, k) for k in SHAPE_KEYS if getattr(spec, k) is not None}
    if from_checkpoint is not None:
        base, preset_name = from_checkpoint, None
    else:
        base, preset_name = base_shape(spec, given)
    attention = given.get("attention", base.get("attention"))
    if attention not in ATTENTION_KINDS:
        raise SporchError(f"model.attention must be one of {', '.join(ATTENTION_KINDS)}, got {attention!r}")
    check_given(given)
    hidden, heads, hd = head_shape(given, base)
    kv = kv_heads(given, base, heads)
    ffn = ffn_width(given, base, hidden)
    depth = int(given.get("depth", base.get("depth")))
    single = single_depth(given, base, attention)
    text_len, text_dim = text_shape(given, base, attention, hidden)
    patch = triple(given.get("patch", base.get("patch")), "patch")
    vae = given.get("vae_stride", base.get("vae_stride"))
    problem = vae_stride_problem(vae)
    if problem:
        raise SporchError(f"model.vae_stride {problem}")
    vae = [int(s) for s in vae]
    if min(patch) < 1:
        raise SporchError(f"model.patch {patch} must be >= 1")
    return ModelSection(
        preset=preset_name,
        attention=attention,
        depth=depth,
        single_depth=single,
        hidden=hidden,
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=hd,
        ffn_dim=ffn,
        mlp_ratio=round(ffn / hidden, 6),
        patch=patch,
        in_channels=int(given.get("in_channels", base.get("in_channels"))),
        vae_stride=vae,
        text_len=text_len,
        text_dim=text_dim,
        qk_norm=bool(given.get("qk_norm", base.get("qk_norm", False))),
        weights=spec.weights,
        stage=spec.stage,
        distilled=bool(base.get("distilled", False)),
        guidance_embed=bool(base.get("guidance_embed", False)),
    )


def latent_frames(frames: int, st: int) -> int:
    if (frames - 1) % st:
        k = (frames - 1) // st
        raise SporchError(
            f"workload.frames {frames} must be 1 + a multiple of the VAE time stride {st} "
            f"(e.g. {st * k + 1} or {st * (k + 1) + 1})"
        )
    return (frames - 1) // st + 1


def check_side(key: str, size: int, stride: int, patch: int) -> None:
    if size % (stride * patch):
        step = stride * patch
        lo = size // step * step
        raise SporchError(
            f"workload.{key} {size} must be a multiple of VAE stride {stride} x patch {patch} = {step} "
            f"(e.g. {lo or step} or {lo + step})"
        )


def sequence_shape(model: ModelSection, workload: WorkloadSpec) -> tuple[int, list[int]]:
    """(latent tokens, grid [f, h, w]) for the workload's video/image shape.

    latent frames = (frames - 1) // st + 1, latent h = height // sh, w = width // sw;
    tokens = (lf // pt) * (lh // ph) * (lw // pw).
    """
    if workload.seq_len is not None:
        return int(workload.seq_len), [1, 1, int(workload.seq_len)]
    st, sh, sw = model.vae_stride
    pt, ph, pw = model.patch
    frames = workload.frames if workload.frames is not None else 1
    lf = latent_frames(frames, st)
    check_side("height", workload.height, sh, ph)
    check_side("width", workload.width, sw, pw)
    if lf % pt:
        raise SporchError(
            f"latent frames {lf} (from {frames} frames, VAE stride {st}) must be a multiple of the time patch {pt}"
        )
    grid = [lf // pt, workload.height // sh // ph, workload.width // sw // pw]
    limit = (model.knobs or {}).get("rope_max_seq_len")
    if limit and max(grid) > int(limit):
        raise SporchError(f"the token grid {grid} (frames x height x width) passes the checkpoint's rope_max_seq_len "
                          f"{limit} on an axis; make the video smaller")
    return grid[0] * grid[1] * grid[2], grid
