"""Model families: one module per family holds everything family-specific, found by one registry
(standard library only: the planner and the runtime both read it).

A :class:`Family` names the diffusers transformer classes it covers, the split plan it ships for
a class without ``_cp_plan`` (``plan_format.py``), the attention modules that run on whole
tensors, how its config.json maps to the plan's model shape, its latent geometry, its text
encoder's length and width, and its presets (published sizes, with their sources).

``family_of_class(name)`` is the one lookup (``config_class(config)``: the class a config.json
builds, older shared class names resolved); ``plan.model.family`` records the answer.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from .base import Family, FamilyPreset, ParameterCount, PipelineCfg, UnsupportedClass
from .config_rules import key_problem
from . import (chroma, chronoedit, cogvideox, cogview4, cosmos, flux, flux2, helios, hidream, hunyuanvideo, ltx, ltx2,
               lumina2, minimax_h3, pixart, qwenimage, sd3, skyreels_v2, wan, wan_vace, z_image)

#: Every family, in the order docs/model.md lists them.
FAMILIES: tuple[Family, ...] = (wan.FAMILY, flux.FAMILY, qwenimage.FAMILY, ltx.FAMILY, sd3.FAMILY,
                                cogvideox.FAMILY, hunyuanvideo.FAMILY, pixart.FAMILY, flux2.FAMILY, ltx2.FAMILY,
                                chronoedit.FAMILY, helios.FAMILY, minimax_h3.FAMILY, cogview4.FAMILY, lumina2.FAMILY,
                                chroma.FAMILY, skyreels_v2.FAMILY, z_image.FAMILY, hidream.FAMILY, cosmos.FAMILY,
                                wan_vace.FAMILY)

__all__ = ["Family", "FamilyPreset", "ParameterCount", "PipelineCfg", "UnsupportedClass", "config_class", "config_parameters", "counted_parameters", "published_preset", "sequence_split", "FAMILIES", "family_of_class", "get_family",
           "supported_classes", "find_family_preset", "config_problem", "original_config_family", "require_family",
           "shape_family", "preset_shape", "SHAPE_FAMILIES", "published_magcache_ratios"]


def family_of_class(class_name: str) -> Optional[Family]:
    """The family whose classes include ``class_name`` (diffusers' ``_class_name``), or None."""
    for fam in FAMILIES:
        if class_name in fam.classes:
            return fam
    return None


def config_class(config: Mapping[str, Any]) -> str:
    """The diffusers class a transformer config.json builds: its ``_class_name``, or, for an older
    shared name a family lists in ``legacy_classes`` with the config values that select its class
    (diffusers' own remapping at load), that class; "" when the config names none."""
    name = str(config.get("_class_name") or "")
    for fam in FAMILIES:
        target = fam.legacy_classes.get(name)
        if target is not None and all(config.get(k) == v for k, v in target[1].items()):
            return target[0]
    return name


def config_problem(fam: Family, config: Mapping[str, Any]) -> Optional[tuple[str, str]]:
    """(key, why) for the first problem of ``config`` (a config.json of one of ``fam``'s classes):
    a key the family does not declare, a value of the wrong type or range, or a rule of the class
    broken (``Family.config_keys``, ``config_rules``); None when the class can run it."""
    cls = config_class(config) or fam.classes[0]
    problem = key_problem(fam.config_keys, config, cls) if fam.config_keys else None
    if problem is None and fam.config_rules is not None:
        problem = fam.config_rules(config)
    return problem


def original_config_family(config: Mapping[str, Any]) -> Optional[Family]:
    """The family whose original release's config.json ``config`` is (Wan's ``WanModel``), or None."""
    for fam in FAMILIES:
        if fam.original is not None and fam.original.is_config(config):
            return fam
    return None


def require_family(class_name: str, where: str = "") -> Family:
    """The family of ``class_name``, or an UnsupportedClass naming it and what is supported."""
    fam = family_of_class(class_name)
    if fam is None:
        at = f"{where}: " if where else ""
        raise UnsupportedClass(
            f"{at}diffusers class {class_name or '(none)'!r} is not supported: it has no split plan sporch "
            f"knows (no _cp_plan sporch reads and no shipped table); supported: {', '.join(supported_classes())}")
    return fam


def get_family(name: str) -> Family:
    for fam in FAMILIES:
        if fam.name == name:
            return fam
    raise KeyError(f"unknown family {name!r}; known: {', '.join(f.name for f in FAMILIES)}")


#: The family a model given by its shape alone (no preset, no model.weights) runs as, by its
#: attention kind: a WanTransformer3DModel or a FluxTransformer2DModel of that shape.
SHAPE_FAMILIES = {"cross": "wan", "joint": "flux"}


def shape_family(attention: Optional[str]) -> Optional[Family]:
    """The family whose class a model of ``attention`` given by its shape alone is built as, or None."""
    name = SHAPE_FAMILIES.get(attention or "")
    return get_family(name) if name else None


def published_magcache_ratios(preset: Optional[str]) -> Optional[tuple[float, ...]]:
    """MagCache's published ratios for ``preset`` (a family's ``magcache_ratios``), or None."""
    key = (preset or "").strip().lower()
    return next((fam.magcache_ratios[key] for fam in FAMILIES if key in fam.magcache_ratios), None)


def supported_classes() -> list[str]:
    return [c for fam in FAMILIES for c in fam.classes]


def find_family_preset(name: str) -> Optional[tuple[Family, FamilyPreset]]:
    """(family, preset) for a preset name (case-insensitive), or None."""
    key = name.strip().lower()
    for fam in FAMILIES:
        for p in fam.presets:
            if p.name == key:
                return fam, p
    return None


def published_preset(model: Any) -> Optional[tuple[Family, FamilyPreset]]:
    """The preset ``model`` (``plan.model``: its ``preset``, ``diffusers_class`` and
    shape fields) is: that preset with its shape unchanged, or, for a checkpoint folder (no
    preset), the preset of its class with the same shape (a published checkpoint's folder). None
    otherwise (another preset, a folder of another shape, a preset with fields overridden)."""
    found = find_family_preset(getattr(model, "preset", None) or "")
    if found is not None:
        candidates = [found]
    elif getattr(model, "preset", None) is None and getattr(model, "diffusers_class", None):
        fam = family_of_class(model.diffusers_class)
        candidates = [(fam, p) for p in fam.presets] if fam is not None else []
    else:
        candidates = []
    for fam, preset in candidates:
        if _same_shape({k: v for k, v in fam.shape(preset.config).items() if k not in UNCOUNTED}, model) \
                and _same_config(preset.config, model):
            return fam, preset
    return None


def preset_shape(fam: Family, preset: FamilyPreset) -> dict:
    """``plan.model``'s shape fields of ``preset``: its config's shape, then what its pipeline adds."""
    return {**fam.shape(preset.config), **dict(preset.shape_overrides)}


def counted_parameters(model: Any) -> Optional[ParameterCount]:
    """The counted parameters (``FamilyPreset.parameters``) of the published preset ``model`` is
    (:func:`published_preset`), or None: the planner's shape formula (plan/estimates.py
    ``parameter_parts``) applies."""
    found = published_preset(model)
    return found[1].parameters if found is not None else None


#: shape fields no parameter depends on (a job may set them on a folder's model: ``text_len``)
UNCOUNTED = ("text_len", "vae_stride")


def config_parameters(model: Any) -> Optional[ParameterCount]:
    """The parameters of a ``model`` (``plan.model``) from its diffusers config
    (``diffusers_config``: the preset's, or the checkpoint folder's config.json) by its family's
    formula (``Family.count_parameters``), when that config describes the model's shape; None
    otherwise (no config, a family without a formula, fields overridden on a preset)."""
    cls, config = getattr(model, "diffusers_class", None), getattr(model, "diffusers_config", None)
    fam = family_of_class(cls) if cls else None
    if fam is None or fam.count_parameters is None or config is None:
        return None
    if not _same_shape({k: v for k, v in fam.shape(config).items() if k not in UNCOUNTED}, model):
        return None
    return fam.count_parameters(config)


def _same_config(config: Mapping[str, Any], model: Any) -> bool:
    """The model's diffusers config (when it has one) is ``config`` (a preset's) on every key both
    state (a key a folder omits is the class's default, as the published configs state it): a
    changed knob the shape does not show (Wan2.1 I2V's image_dim) counts."""
    theirs = getattr(model, "diffusers_config", None)
    if theirs is None:
        return True
    return all(_equal(theirs[k], v) for k, v in config.items() if k in theirs)


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return list(a) == list(b)
    return a == b


def _same_shape(shape: dict, model: Any) -> bool:
    return all(list(v) == list(getattr(model, k)) if isinstance(v, (list, tuple)) else v == getattr(model, k)
               for k, v in shape.items())


def sequence_split(model: Any) -> tuple[str, int]:
    """How ``model`` (``plan.model``) cuts its sequence over the sequence ranks: unpadded chunks
    (``"uneven"``), and the text tokens cut with the image's where the family's split plan cuts
    them (``text_split``; else 0): ``plan.sequence.split`` and ``plan.sequence.text_len``, decided
    here once."""
    text = int(getattr(model, "text_len", 0) or 0)
    return "uneven", text if require_family(model.diffusers_class).text_split else 0
