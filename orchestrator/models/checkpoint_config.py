"""The model a checkpoint's ``config.json`` describes (standard library only: the planner reads
it on a login node or a laptop, the runtime the same way).

``read_checkpoint_model(weights)`` finds the config (``weights`` a folder, its ``transformer/``,
or a file beside one) and maps it to sporch's ``plan.model`` fields (``fields``) and the
architecture knobs that are not shape keys of the plan (``knobs``). Families and formats:

* diffusers ``WanTransformer3DModel`` (Wan2.1 and every Wan-architecture release: fine-tunes,
  SkyReels-V2, step-distilled variants) and the original release's ``WanModel`` config;
* diffusers ``FluxTransformer2DModel`` (Flux.1 and its fine-tunes). The original Flux release
  ships no config.json: name its preset.

Every key of the config is one of: **honoured** (it sets a field or a knob), **checked** (a value
sporch computes exactly, e.g. Wan's ``cross_attn_norm: true``; another value is refused, naming
the key), **bounding** (``rope_max_seq_len``: the planner refuses a token grid beyond it), or
**bookkeeping** (diffusers' ``_class_name``, ``_diffusers_version``, ...). A key that is none
of these is refused by name: it may change the computation, and sporch never ignores one.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from sporch.orchestrator.models.checkpoint_files import CheckpointError, kind, read_file
from sporch.orchestrator.models.families import config_class, family_of_class, get_family, supported_classes

#: Text tokens when the transformer's config does not say (the family's text encoder's).
WAN_TEXT_LEN = 512
FLUX_TEXT_LEN = 512
WAN_VAE_STRIDE = [4, 8, 8]
FLUX_VAE_STRIDE = [1, 8, 8]
#: Bookkeeping keys of diffusers and the original releases: no effect on the computation.
BOOKKEEPING = ("_class_name", "_diffusers_version", "_name_or_path", "_use_default_values", "model_type",
               "__module__", "architectures")


class UnknownModelConfig(CheckpointError):
    """A config.json that describes no model sporch knows (another class, or none): with a
    preset named, the preset says what the model is and the loader checks the tensors."""


@dataclass(frozen=True)
class CheckpointModel:
    family: str  # "Wan2.1" | "Flux.1"
    fmt: str  # "diffusers" | "original"
    config_file: Path
    #: ``plan.model`` shape fields (attention, depth, hidden, num_heads, head_dim, ...)
    fields: Mapping[str, Any]
    #: architecture knobs (freq_dim, eps, out_channels, rope_axes, pooled_dim, ...)
    knobs: Mapping[str, Any] = field(default_factory=dict)
    #: which config key set each field or knob (for messages)
    keys: Mapping[str, str] = field(default_factory=dict)
    #: models/families name ("wan", "flux", "qwen-image", ...)
    family_key: Optional[str] = None
    #: the diffusers class the generic path runs (None: sporch's hand-built Wan / Flux)
    diffusers_class: Optional[str] = None
    #: the config.json itself (the generic path builds the class from it)
    config: Optional[Mapping[str, Any]] = None

    def describe(self) -> str:
        return f"{self.family} ({self.fmt} config {self.config_file})"


def find_config(weights: str | Path) -> Optional[Path]:
    """The config.json that describes ``weights`` (a folder, its transformer/, or beside a
    file), or None."""
    p = Path(weights).expanduser()
    folder = p if kind(p) == "dir" else p.parent
    for candidate in (folder / "transformer" / "config.json", folder / "config.json"):
        if kind(candidate) is not None:  # a FIFO or a folder there is refused when read, not skipped
            return candidate
    return None


def read_checkpoint_model(weights: str | Path) -> Optional[CheckpointModel]:
    """The model ``weights``' config.json describes; None without a config.json. A config sporch
    cannot compute exactly is a CheckpointError naming the key."""
    path = find_config(weights)
    if path is None:
        return None
    return with_vae_stride(model_from_config(read_json_object(path), path))


def with_vae_stride(model: CheckpointModel) -> CheckpointModel:
    """A transformer in a diffusers pipeline folder takes its latent strides from the folder's
    ``vae/config.json`` where its family reads them (``Family.vae_stride_from``: Wan's)."""
    fam = get_family(model.family_key) if model.family_key else None
    vae = model.config_file.parent.parent / "vae" / "config.json"
    if (fam is None or fam.vae_stride_from is None or model.config_file.parent.name != "transformer"
            or kind(vae) is None):
        return model
    try:
        stride = fam.vae_stride_from(read_json_object(vae))
    except ValueError as exc:
        raise CheckpointError(f"{vae}: {exc}") from None
    if stride is None:
        return model
    return replace(model, fields={**model.fields, "vae_stride": list(stride)},
                   keys={**model.keys, "vae_stride": "vae/config.json scale_factor_*"})


def read_json_object(path: Path) -> dict:
    """The JSON object in ``path``, or a one-line CheckpointError."""
    raw = read_file(path)  # a regular file only (a FIFO would block); an unreadable one is one line
    try:
        config = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise CheckpointError(f"cannot read {path}: it nests too deeply") from None
    except ValueError as exc:
        raise CheckpointError(f"cannot read {path}: {exc}") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{path} is not a JSON object")
    return config


def model_from_config(config: Mapping[str, Any], path: Path) -> CheckpointModel:
    cls = config_class(config)
    if cls == "WanTransformer3DModel":
        return replace(_read(config, path, "Wan2.1", "diffusers", WAN_DIFFUSERS), family_key="wan")
    if cls == "FluxTransformer2DModel":
        return replace(_read(config, path, "Flux.1", "diffusers", FLUX_DIFFUSERS), family_key="flux")
    if cls == "WanModel" or (not cls and {"dim", "num_heads", "num_layers"} <= set(config)):
        return replace(_read(config, path, "Wan2.1", "original", WAN_ORIGINAL), family_key="wan")
    fam = family_of_class(cls)
    if fam is not None and not fam.hand_built:  # the generic path: the family reads its own config
        try:
            fields = fam.shape(config)
        except ValueError as exc:  # the class's own rules (families/rope_rules.py), one line naming the key
            raise CheckpointError(f"{path}: {' '.join(str(exc).split())} ({cls})") from None
        return CheckpointModel(family=fam.title, fmt="diffusers", config_file=path, fields=fields,
                               keys={k: "config.json" for k in fields if k not in ("text_len", "vae_stride")},
                               family_key=fam.name,
                               diffusers_class=cls, config=dict(config))
    raise UnknownModelConfig(f"{path}: diffusers class {cls or '(none)'!r} is not supported: it is not a model sporch "
                             f"runs (no family holds a split plan for it: no _cp_plan sporch reads, no shipped table); "
                             f"supported: {', '.join(supported_classes() + ['WanModel'])}; or name its preset in "
                             "model.preset")


# -- the key tables: config key -> reader(value, config, out) ----------------------------------------
# Every value a reader takes is checked here, by the helpers below (type, range, finiteness), and
# the model they make together by :func:`_consistent` (heads and head_dim, RoPE, channels): the one
# place a config.json is validated, for ``sporch plan``, ``sporch inspect`` and the ranks alike.
Reader = Callable[[Any, Mapping[str, Any], dict], None]

#: The largest width, depth or length a config may state (a bound against typos and overflow:
#: the largest published models are far below it).
MAX_SIZE = 1 << 20


class _Refused(Exception):
    """A value sporch cannot compute exactly (the message says which it computes)."""


class _Invalid(Exception):
    """A value of the wrong type or out of range (the message says what it must be)."""


def _int(value: Any, minimum: int = 1) -> int:
    """``value`` as an int in [minimum, MAX_SIZE]: no bool, float or string."""
    if isinstance(value, bool) or not isinstance(value, int):
        kind = "a boolean" if isinstance(value, bool) else f"a {type(value).__name__}"
        raise _Invalid(f"must be an integer >= {minimum}, not {kind}")
    if not minimum <= value <= MAX_SIZE:
        raise _Invalid(f"must be an integer from {minimum} to {MAX_SIZE}")
    return value


def _eps(value: Any) -> float:
    """A norm's epsilon: a finite number strictly between 0 and 1."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Invalid(f"must be a number, not a {type(value).__name__}")
    if not math.isfinite(value):
        raise _Invalid("must be finite (a norm's epsilon, e.g. 1e-06)")
    if not 0 < value < 1:
        raise _Invalid("must be greater than 0 and less than 1 (a norm's epsilon, e.g. 1e-06)")
    return float(value)


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Invalid("must be true or false")
    return value


def _ints(value: Any, n: int, minimum: int) -> list[int]:
    if not isinstance(value, (list, tuple)) or len(value) != n:
        raise _Invalid(f"must be a list of {n} integers")
    return [_int(v, minimum) for v in value]


def _set(name: str, convert: Callable[[Any], Any] = _int) -> Reader:
    def read(value, config, out):
        out[name] = convert(value)
    return read


def _optional(name: str, convert: Callable[[Any], Any] = _int) -> Reader:
    """A key whose ``null`` means the family's default."""
    def read(value, config, out):
        if value is not None:
            out[name] = convert(value)
    return read


def _checked(expected: tuple, why: str) -> Reader:
    """A key whose value sporch computes only as ``expected``; another is refused."""
    def read(value, config, out):
        if not any(type(value) is type(e) and value == e for e in expected):
            raise _Refused(f"{value!r} ({why})")
    return read


def _neutral(value, config, out) -> None:  # set elsewhere from this key (see the table's comment)
    pass


def _triple(value) -> list[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return [1, _int(value), _int(value)]
    return _ints(value, 3, 1)


def _other(config: Mapping[str, Any], key: str, minimum: int = 1) -> int:
    """Another key of the config a reader needs (its own reader checks it too; this one says
    which key is wrong when it is)."""
    if key not in config:
        raise _Invalid(f"needs {key}, which the config does not set")
    try:
        return _int(config[key], minimum)
    except _Invalid as exc:
        raise _Invalid(f"needs a valid {key} ({key}={config[key]!r} {exc})") from None


def _wan_qk_norm(value, config, out) -> None:
    if value is None or value is False:
        out["qk_norm"] = False
    elif value == "rms_norm_across_heads" or value is True:
        out["qk_norm"] = True
    else:
        raise _Refused(f"{value!r} (sporch computes rms_norm_across_heads or none)")


def _wan_image_kv(value, config, out) -> None:
    if value is None:
        return
    hidden = _other(config, "num_attention_heads") * _other(config, "attention_head_dim")
    if _int(value) != hidden:
        raise _Refused(f"{value!r} (sporch's image keys are model-wide: {hidden})")


def _wan_pos_embed(value, config, out) -> None:
    if value is not None:
        raise _Refused(f"{value!r} (a learned position embedding for first-last-frame models is not built)")


def _flux_patch(value, config, out) -> None:
    if _int(value) != 1:
        raise _Refused(f"{value!r} (Flux packs 2 x 2 latent patches itself: patch_size 1 only)")


def _packed(value: Any) -> int:
    """Flux's packed channels (2 x 2 latent patches): a positive multiple of 4, as latent channels."""
    if _int(value, 4) % 4:
        raise _Invalid("must be a multiple of 4 (2 x 2 packed latent channels)")
    return value // 4


def _flux_in(value, config, out) -> None:
    out["in_channels"] = _packed(value)
    out["patch"] = [1, 2, 2]


def _flux_heads(value, config, out) -> None:
    heads, hd = _int(value), _other(config, "attention_head_dim")
    out.update(num_heads=heads, num_kv_heads=heads, head_dim=hd, hidden=heads * hd, ffn_dim=4 * heads * hd)


def _wan_heads(value, config, out) -> None:
    heads, hd = _int(value), _other(config, "attention_head_dim")
    out.update(num_heads=heads, num_kv_heads=heads, head_dim=hd, hidden=heads * hd)


def _wan_original_heads(value, config, out) -> None:  # dim = num_heads x head_dim
    heads, dim = _int(value), _other(config, "dim")
    if dim % heads:
        raise _Invalid(f"must divide dim {dim} (dim = num_heads x head_dim)")
    out.update(num_heads=heads, num_kv_heads=heads, hidden=dim, head_dim=dim // heads)


def _wan_image_dim(value, config, out) -> None:
    if value is not None and _int(value, 0):
        out["image_dim"] = value


def _rope_axes(value: Any) -> list[int]:
    return _ints(value, 3, 0)


WAN_DIFFUSERS: dict[str, Reader] = {
    "num_attention_heads": _wan_heads, "attention_head_dim": _set("_head_dim"),  # read with num_attention_heads
    "num_layers": _set("depth"), "ffn_dim": _set("ffn_dim"), "in_channels": _set("in_channels"),
    "out_channels": _optional("out_channels"), "patch_size": _set("patch", _triple), "text_dim": _set("text_dim"),
    "freq_dim": _set("freq_dim", lambda v: _int(v, 2)), "eps": _set("eps", _eps), "qk_norm": _wan_qk_norm,
    "cross_attn_norm": _checked((True,), "sporch's Wan blocks always normalise before cross attention"),
    "image_dim": _wan_image_dim, "added_kv_proj_dim": _wan_image_kv, "pos_embed_seq_len": _wan_pos_embed,
    "rope_max_seq_len": _set("rope_max_seq_len"),
    "window_size": _checked(((-1, -1), [-1, -1], None), "sporch attends globally"),
}
WAN_ORIGINAL: dict[str, Reader] = {
    "dim": _set("_dim"), "num_heads": _wan_original_heads,
    "num_layers": _set("depth"), "ffn_dim": _set("ffn_dim"), "in_dim": _set("in_channels"),
    "out_dim": _optional("out_channels"), "patch_size": _set("patch", _triple), "text_dim": _set("text_dim"),
    "freq_dim": _set("freq_dim", lambda v: _int(v, 2)), "eps": _set("eps", _eps), "text_len": _set("text_len"),
    "qk_norm": _checked((True,), "sporch's original-format Wan has qk norm"),
    "cross_attn_norm": _checked((True,), "sporch's Wan blocks always normalise before cross attention"),
    "window_size": _checked(((-1, -1), [-1, -1]), "sporch attends globally"),
}
FLUX_DIFFUSERS: dict[str, Reader] = {
    "patch_size": _flux_patch, "in_channels": _flux_in, "out_channels": _optional("out_channels", _packed),
    "num_layers": _set("depth"), "num_single_layers": _set("single_depth", lambda v: _int(v, 0)),
    "attention_head_dim": _set("_head_dim"), "num_attention_heads": _flux_heads,  # ffn is 4 x hidden in Flux
    "joint_attention_dim": _set("text_dim"), "pooled_projection_dim": _set("pooled_dim"),
    "guidance_embeds": _set("guidance_embed", _flag), "axes_dims_rope": _set("rope_axes", _rope_axes),
}


def _consistent(out: Mapping[str, Any]) -> Optional[tuple[str, str]]:
    """(field, why) where the values, each valid alone, make no model sporch computes."""
    hd = out.get("head_dim")
    if hd is not None and hd % 2:
        return "head_dim", f"head_dim {hd} must be even (rotary position embedding rotates channel pairs)"
    axes = out.get("rope_axes")
    if axes is not None and hd is not None and (sum(axes) != hd or any(a % 2 for a in axes)):
        return "rope_axes", f"{list(axes)} must be three even numbers summing to head_dim {hd}"
    if out.get("out_channels", 0) > out.get("in_channels", MAX_SIZE):
        return "out_channels", (f"{out['out_channels']} must be at most in_channels {out['in_channels']} (the "
                                "extra input channels are a latent condition)")
    if out.get("hidden", 0) > MAX_SIZE:
        return "hidden", f"num_heads x head_dim = {out['hidden']} must be at most {MAX_SIZE}"
    return None


#: What a family's config does not hold, by family (shape fields with the published default).
DEFAULTS = {
    "Wan2.1": {"attention": "cross", "single_depth": 0, "text_len": WAN_TEXT_LEN, "vae_stride": WAN_VAE_STRIDE,
               "qk_norm": True},
    "Flux.1": {"attention": "joint", "text_len": FLUX_TEXT_LEN, "vae_stride": FLUX_VAE_STRIDE, "qk_norm": True},
}
#: Knobs that come with the family whatever the config says.
FAMILY_KNOBS = {"Wan2.1": {}, "Flux.1": {"distilled": True, "freq_dim": 256}}
#: Shape fields a hand-built family's config must say besides depth, hidden, heads, channels and
#: patch (Flux's feed-forward width follows from hidden; Wan's is its own).
FAMILY_REQUIRED = {"Wan2.1": ("ffn_dim",), "Flux.1": ()}
#: Names in ``out`` that are shape fields of the plan (the rest are knobs).
SHAPE_FIELDS = ("attention", "depth", "single_depth", "hidden", "num_heads", "num_kv_heads", "head_dim", "ffn_dim",
                "patch", "in_channels", "vae_stride", "text_len", "text_dim", "qk_norm")


def _read(config: Mapping[str, Any], path: Path, family: str, fmt: str, table: Mapping[str, Reader]) -> CheckpointModel:
    out: dict[str, Any] = {}
    keys: dict[str, str] = {}
    unknown = sorted(k for k in config if k not in table and k not in BOOKKEEPING and not k.startswith("_"))
    if unknown:
        raise CheckpointError(f"{path}: config key {unknown[0]!r} is not one sporch knows for {family} ({fmt}); it "
                              "may change the computation, so the checkpoint is refused"
                              + (f" (also: {', '.join(unknown[1:])})" if unknown[1:] else ""))
    for key, read in table.items():
        if key not in config:
            continue
        before = set(out)
        try:
            read(config[key], config, out)
        except _Refused as exc:
            raise CheckpointError(f"{path}: {key}={exc}; sporch cannot compute this checkpoint exactly") from None
        except _Invalid as exc:
            raise CheckpointError(f"{path}: {key}={config[key]!r} {exc}; fix the config or name the model's "
                                  "preset") from None
        for name in set(out) - before:
            keys[name] = key
    wrong = _consistent(out)
    if wrong is not None:
        name, why = wrong
        key = "attention_head_dim" if name == "head_dim" and "attention_head_dim" in config else keys.get(name, name)
        raise CheckpointError(f"{path}: {key}: {why}; sporch cannot compute this checkpoint")
    out = {k: v for k, v in out.items() if not k.startswith("_")}
    keys = {k: v for k, v in keys.items() if not k.startswith("_")}
    shape = {**DEFAULTS[family], **{k: v for k, v in out.items() if k in SHAPE_FIELDS}}
    missing = [k for k in ("depth", "hidden", "num_heads", "in_channels", "patch") + FAMILY_REQUIRED[family]
               if k not in shape]
    if missing:
        raise CheckpointError(f"{path}: the config does not say {', '.join(missing)}; name the model's preset")
    knobs = {**FAMILY_KNOBS[family], **{k: v for k, v in out.items() if k not in SHAPE_FIELDS}}
    return CheckpointModel(family=family, fmt=fmt, config_file=path, fields=shape, knobs=knobs, keys=keys)
