"""The planner's first decisions: the model's full shape and the workload's token count.

``resolve_model(ModelSpec) -> ModelSection``: a preset plus explicit fields. Explicit fields
win. hidden = num_heads x head_dim: with one or two of the three given, the others follow
(changing num_heads keeps hidden and re-derives head_dim). With an MHA preset (kv == heads),
num_kv_heads follows num_heads unless given. ffn_dim follows mlp_ratio (or keeps the preset's
ratio when hidden changes).

The workload's token count and grid: orchestrator/plan/sequence_shape.py.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

from sporch.orchestrator.config.job_spec import ModelSpec
from sporch.orchestrator.config.model_checks import vae_stride_problem, weights_without_model
from sporch.orchestrator.config.presets import get_preset, preset_names
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.contract.vocab import ATTENTION_KINDS
from sporch.orchestrator.models.checkpoint_files import CheckpointError
from sporch.orchestrator.models.families import (SHAPE_FAMILIES, Family, config_class, config_problem, find_family_preset,
                                                 get_family, preset_shape, shape_family)
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
    """(the preset's shape, the preset's name); a model without a preset gives its attention kind
    and sizes, and takes the rest from the shape of its family's class defaults (a Flux model's
    feed-forward width and q/k norms are the class's)."""
    if spec.preset is not None:
        return get_preset(spec.preset), spec.preset.strip().lower()
    missing = [k for k in REQUIRED_WITHOUT_PRESET if k not in given]
    if missing and spec.weights:  # a config.json there would have been the base: it has none
        raise SporchError(weights_without_model(spec.weights))
    if missing:
        raise SporchError(
            "model without a preset needs " + ", ".join(f"model.{m}" for m in missing)
            + f"; or set model.preset to one of: {', '.join(preset_names())}"
        )
    fam = shape_family(given["attention"])
    if fam is None:
        raise SporchError(f"model.attention={given['attention']}: no diffusers family runs a model of this attention "
                          f"kind given by its shape alone ({', '.join(f'{k}: {v}' for k, v in SHAPE_FAMILIES.items())}); "
                          "name a preset or point model.weights at a diffusers folder")
    return fam.shape({}), None


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
        if spec.preset is not None and exc.class_name is None:  # the preset says what it is; the loader checks
            return None
        if spec.preset is not None:  # a folder of another class: no preset makes sporch run it
            raise SporchError(f"{exc}; model.weights is not a {spec.preset} checkpoint") from None
        raise SporchError(str(exc)) from None
    except CheckpointError as exc:
        raise SporchError(str(exc)) from None


#: Shape fields no config key holds: the pipeline's text length and the VAE's strides (a job may
#: set them on any model; the family's pipeline must agree for a generate job).
PIPELINE_FIELDS = ("text_len", "vae_stride")


def _differences(theirs: Mapping[str, Any], ours: Mapping[str, Any], keys: Mapping[str, str], label: str) -> list[str]:
    """``name theirs (label: ours[, config key K])`` for every shape field the two set differently."""
    out = []
    for name in sorted(theirs):
        if name in PIPELINE_FIELDS or name not in ours:
            continue
        a, b = theirs[name], ours[name]
        same = list(a) == list(b) if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) else a == b
        if not same:  # the key where the field has one of its own; a family's shape reads several
            key = keys.get(name)
            out.append(f"{name} {a!r} ({label}: {b!r}" + (f", config key {key})" if key and key != "config.json" else ")"))
    return out


def disagreements(ckpt: CheckpointModel, section: ModelSection, preset_config: Optional[Mapping[str, Any]] = None,
                  label: str = "job") -> list[str]:
    """Every shape field (and, given the preset's config, every key both state) in which the
    checkpoint's config differs from the job's model."""
    ours = {name: getattr(section, name) for name in ckpt.fields if hasattr(section, name)}
    out = _differences(ckpt.fields, ours, ckpt.keys, label)
    for key, value in (preset_config or {}).items():
        if key not in (ckpt.config or {}):  # not stated: the class's default (the published configs state theirs)
            continue
        theirs = ckpt.config[key]
        same = list(theirs) == list(value) if isinstance(theirs, (list, tuple)) and isinstance(value, (list, tuple)) \
            else theirs == value
        if not same and not any(f"config key {key})" in line or line.startswith(f"{key} ") for line in out):
            out.append(f"{key} {theirs!r} ({label}: {value!r}, config.json)")
    return out


def resolve_model(spec: ModelSpec) -> ModelSection:
    """Preset (or checkpoint config, or shape alone) + explicit fields -> the complete
    ``plan.model`` section: its family, diffusers class and config decided here, once. With
    ``model.weights`` and no preset, the checkpoint's config.json is the base; a preset or a field
    that disagrees with the config is refused, every disagreement in one line. A preset's sizes may
    be changed where its family can express them in its class's config (``Family.config_for``);
    a model given by its shape alone runs as the family of its attention kind. A two-expert model
    (Wan2.2 A14B) gets its ``boundary_ratio``, a model with per-token timesteps (Wan2.2 TI2V-5B)
    ``expand_timesteps`` (plan/experts.py)."""
    ckpt = checkpoint_model(spec)  # config.json read once (tests/plan/test_planner_reads_once.py)
    from_checkpoint = dict(ckpt.fields) if ckpt is not None and spec.preset is None else None
    section = _resolve(spec, from_checkpoint)
    fam, config = _family_config(spec, ckpt, section)
    if ckpt is not None:
        _check_checkpoint(spec, ckpt, section, config)
        config = dict(ckpt.config)
    section = dataclasses.replace(
        section, family=fam.name, diffusers_class=config_class(config) or fam.classes[0], diffusers_config=config,
        pipeline_sizes=folder_pipeline_sizes(ckpt) if ckpt is not None else None, **_guidance(fam, config))
    return dataclasses.replace(section, boundary_ratio=boundary_ratio(spec), expand_timesteps=expand_timesteps(spec))


def _family_config(spec: ModelSpec, ckpt: Optional[CheckpointModel], section: ModelSection) -> tuple[Family, dict]:
    """The family and the diffusers config of the job's model: the checkpoint's, the preset's with
    the job's sizes (its family's ``config_for``), or the shape's family's for a model given by its
    shape alone. A size the class cannot express is refused in one line naming the field."""
    found = find_family_preset(spec.preset) if spec.preset else None
    if found is None and ckpt is not None:
        return get_family(ckpt.family_key), dict(ckpt.config)
    if found is not None:
        fam, preset = found
        base: Mapping[str, Any] = preset.config
        published = preset_shape(fam, preset)
    else:
        fam = shape_family(section.attention)
        if fam is None:
            raise SporchError(f"model.attention={section.attention}: no diffusers family runs a model of this attention "
                              f"kind given by its shape alone ({', '.join(f'{k}: {v}' for k, v in SHAPE_FAMILIES.items())}); "
                              "name a preset or point model.weights at a diffusers folder")
        base, published = {}, {}
    shape = {k: getattr(section, k) for k in fam.shape(base or {}) if hasattr(section, k)}
    changed = {k: v for k, v in shape.items() if k not in PIPELINE_FIELDS and not _same(v, published.get(k))}
    if not changed and found is not None:
        return fam, dict(base)
    what = f"preset {found[1].name}" if found is not None else f"a {fam.classes[0]} given by its shape"
    if fam.config_for is None:
        listed = ", ".join(f"model.{k}={v!r} (the preset's: {published.get(k)!r})" for k, v in changed.items())
        raise SporchError(f"{listed}: {what} runs diffusers' {fam.classes[0]} with its published config, so its shape "
                          "cannot be changed here; drop the override, or point model.weights at a folder whose "
                          "config.json has the shape you want")
    config = fam.config_for(base, shape)
    got = fam.shape(config)
    lost = [f"model.{k}={v!r} ({fam.classes[0]} gives {got.get(k)!r})" for k, v in shape.items()
            if k not in PIPELINE_FIELDS and k in got and not _same(v, got[k])]
    if lost:
        raise SporchError(f"{', '.join(lost)}: {what} runs diffusers' {fam.classes[0]}, whose config cannot express "
                          "this shape; drop the override or change the other fields with it")
    problem = config_problem(fam, config)
    if problem is not None:
        key, why = problem
        raise SporchError(f"{what}: the model's {fam.classes[0]} config would have {key} {why}; change the model's "
                          "fields")
    return fam, config


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return list(a) == list(b)
    return a == b


def _check_checkpoint(spec: ModelSpec, ckpt: CheckpointModel, section: ModelSection, config: Mapping[str, Any]) -> None:
    """A preset or explicit fields (the job's model: ``section`` and its class's ``config``) that
    disagree with the checkpoint's config are refused, every disagreement in one line."""
    found = find_family_preset(spec.preset) if spec.preset else None
    wrong = disagreements(ckpt, section, config if found is not None else None)
    if found is not None and found[0].name != ckpt.family_key:
        wrong.insert(0, f"family {ckpt.family_key} (job: {found[0].name})")
    if wrong:
        fix = (f"drop model.preset ({spec.preset})" if spec.preset else "drop the model fields") + \
            " to take the model from the checkpoint, or point model.weights at a checkpoint of this model"
        raise SporchError(f"model.weights {spec.weights}: the checkpoint ({ckpt.describe()}) disagrees with the "
                          f"job's model in {len(wrong)} field(s): {'; '.join(wrong)}; {fix}")


def folder_pipeline_sizes(ckpt: CheckpointModel) -> Optional[dict[str, Any]]:
    """A pipeline folder's text encoders and VAE sized from their safetensors headers
    (models/pipeline_sizes.py), for the generate memory estimate; None: the transformer's folder
    alone, a family without a generate pipeline, or parts it cannot size."""
    fam = get_family(ckpt.family_key) if ckpt.family_key else None
    if fam is None or not fam.pipeline_class or ckpt.config_file.parent.name != "transformer":
        return None
    try:
        return read_pipeline_sizes(ckpt.config_file.parent.parent)
    except CheckpointError as exc:
        raise SporchError(str(exc)) from None


def _guidance(fam: Family, config: Mapping[str, Any]) -> dict[str, Any]:
    """A guidance-distilled family (Flux.1, HunyuanVideo): one pass per step, no CFG branch, the
    guidance scale an embedded input where the config has one (``guidance_embeds``)."""
    if fam.cfg:
        return {"distilled": False, "guidance_embed": False}
    return {"distilled": True, "guidance_embed": bool(config.get("guidance_embeds", True))}


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
    )
