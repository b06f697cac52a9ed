"""Model families: one module per family holds everything family-specific, found by one registry
(standard library only: the planner and the runtime both read it).

A :class:`Family` names the diffusers transformer classes it covers, the split plan it ships for
a class without ``_cp_plan`` (``plan_format.py``), the attention modules that run on whole
tensors, how its config.json maps to the plan's model shape, its latent geometry, its text
encoder's length and width, and its presets (published sizes, with their sources).

``family_of_class(name)`` is the one lookup; ``plan.model.family`` records the answer.
"""

from __future__ import annotations

from typing import Optional

from sporch.orchestrator.models.families.base import Family, FamilyPreset, UnsupportedClass
from sporch.orchestrator.models.families import cogvideox, flux, hunyuanvideo, ltx, qwenimage, sd3, wan

#: Every family, in the order docs/model.md lists them.
FAMILIES: tuple[Family, ...] = (wan.FAMILY, flux.FAMILY, qwenimage.FAMILY, ltx.FAMILY, sd3.FAMILY,
                                cogvideox.FAMILY, hunyuanvideo.FAMILY)

__all__ = ["Family", "FamilyPreset", "UnsupportedClass", "FAMILIES", "family_of_class", "get_family",
           "supported_classes", "generic_preset", "require_family", "standin_family"]


def family_of_class(class_name: str) -> Optional[Family]:
    """The family whose classes include ``class_name`` (diffusers' ``_class_name``), or None."""
    for fam in FAMILIES:
        if class_name in fam.classes:
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


def standin_family(attention: Optional[str]) -> Optional[Family]:
    """The family whose generate pipeline a stand-in preset with ``attention`` runs (``tiny``:
    cross -> wan, joint -> flux), or None."""
    for fam in FAMILIES:
        if fam.standin_attention is not None and fam.standin_attention == attention:
            return fam
    return None


def supported_classes() -> list[str]:
    return [c for fam in FAMILIES for c in fam.classes]


def generic_preset(name: str) -> Optional[tuple[Family, FamilyPreset]]:
    """(family, preset) for a generic-path preset name (case-insensitive), or None."""
    key = name.strip().lower()
    for fam in FAMILIES:
        for p in fam.presets:
            if p.name == key:
                return fam, p
    return None
