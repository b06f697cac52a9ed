"""The families sporch runs, one row each (``sporch models``, docs/model.md's family table): what
each family's record and the planner's rules allow, read from them, never restated.

A hand-built family (Wan, Flux: ``Family.hand_built``) runs its published presets on sporch's own
models with every workload, placement, step cache and LoRA; its diffusers class also runs on the
generic path (verify, benchmark). A generic family runs what ``generic_checks`` plans for it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from sporch.orchestrator.contract.vocab import (CACHE_METHODS, TEXT_ENCODER_PLACEMENTS, VAE_PLACEMENTS,
                                               WORKLOAD_KINDS)
from sporch.orchestrator.models import PRESETS, preset_family
from sporch.orchestrator.models.families import FAMILIES, Family, PipelineCfg
from sporch.orchestrator.models.families.base import STEP_CACHES

from .generic_checks import GENERIC_WORKLOADS, generic_placements

__all__ = ["FamilyRow", "family_rows"]

#: the workloads of a hand-built family's presets (preflight checks nodes, not a model)
HAND_BUILT_WORKLOADS = tuple(k for k in WORKLOAD_KINDS if k != "preflight")


@dataclass(frozen=True)
class FamilyRow:
    family: str
    title: str
    classes: tuple[str, ...]
    split_plan: str  # per class: the class's own _cp_plan or the table sporch ships
    presets: tuple[str, ...]
    path: str  # "hand-built + generic" or "generic"
    workloads: tuple[str, ...]
    pipeline: str  # the diffusers pipeline the generic generate runs ("" : none; hand-built: sporch's)
    cfg: str  # the parallel.cfg values generate runs (_cfg)
    text_encoder: tuple[str, ...]  # pipeline.text_encoder placements generate runs
    vae: tuple[str, ...]  # pipeline.vae placements generate runs
    cache: tuple[str, ...]  # workload.cache.method values besides none
    lora: str  # whether (and through what) it merges LoRA adapters ("": no)
    #: why the step caches not in ``cache`` do not run on the family's classes ("": every one runs)
    cache_refusal: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def _presets(family: Family) -> tuple[str, ...]:
    names = [name for name in PRESETS if preset_family(name) == family.name] + [p.name for p in family.presets]
    return tuple(dict.fromkeys(names))


def _cfg(family: Family, hand_built: bool) -> str:
    """``parallel.cfg`` values generate runs: "1/2" (cfg 2: one CFG pass per cfg rank, however the
    pipeline applies CFG, ``Family.pipeline_cfg``), "none" (guidance-distilled)."""
    if not family.cfg:
        return "none"
    return "1/2" if hand_built or family.pipeline_cfg is not PipelineCfg.NONE else "1"


def cache_refusal(family: Family) -> str:
    """The step caches the family's classes cannot take, with the family's reason ("": none)."""
    missing = [m for m in STEP_CACHES if m not in family.step_cache]
    return f"not {', '.join(missing)}: {family.step_cache_refusal or 'not built'}" if missing else ""


def _row(family: Family) -> FamilyRow:
    split = "; ".join(f"{c}: {family.split_plan_source(c)}" for c in family.classes)
    lora = f"yes ({family.lora_loader}'s formats)" if family.lora_loader else ""
    if family.hand_built:
        return FamilyRow(family.name, family.title, family.classes, split, _presets(family), "hand-built + generic",
                         HAND_BUILT_WORKLOADS, "sporch's", _cfg(family, True), TEXT_ENCODER_PLACEMENTS, VAE_PLACEMENTS,
                         tuple(m for m in CACHE_METHODS if m != "none"), "yes (sporch's name tables)")
    generate = bool(family.pipeline_class)
    placements = generic_placements(family) if generate else {"text_encoder": (), "vae": ()}
    return FamilyRow(family.name, family.title, family.classes, split, _presets(family), "generic",
                     GENERIC_WORKLOADS + (("generate",) if generate else ()), family.pipeline_class or "",
                     _cfg(family, False) if generate else "", placements["text_encoder"], placements["vae"],
                     family.step_cache, lora, cache_refusal(family))


def family_rows() -> list[FamilyRow]:
    """One row per family, in the registry's order (``models/families.FAMILIES``)."""
    return [_row(f) for f in FAMILIES]
