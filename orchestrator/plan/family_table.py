"""The families sporch runs, one row each (``sporch models``, docs/model.md's family table): what
each family's record and the planner's rules allow, read from them, never restated. Every family
runs its diffusers class (runtime/models); what ``family_checks`` plans for it is its row.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from sporch.orchestrator.models.families import FAMILIES, Family, PipelineCfg
from sporch.orchestrator.models.families.base import STEP_CACHES

from .family_checks import MODEL_WORKLOADS, generate_placements

__all__ = ["FamilyRow", "family_rows"]


@dataclass(frozen=True)
class FamilyRow:
    family: str
    title: str
    classes: tuple[str, ...]
    split_plan: str  # per class: the class's own _cp_plan or the table sporch ships
    presets: tuple[str, ...]
    workloads: tuple[str, ...]
    pipeline: str  # the diffusers pipeline generate runs ("": none; with an image: " / " the image one)
    cfg: str  # the parallel.cfg values generate runs (_cfg)
    text_encoder: tuple[str, ...]  # pipeline.text_encoder placements generate runs
    vae: tuple[str, ...]  # pipeline.vae placements generate runs
    cache: tuple[str, ...]  # workload.cache.method values besides none
    lora: str  # whether (and through what) it merges LoRA adapters ("": no)
    #: why the step caches not in ``cache`` do not run on the family's classes ("": every one runs)
    cache_refusal: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def _cfg(family: Family) -> str:
    """``parallel.cfg`` values generate runs: "1/2" (cfg 2: one CFG pass per cfg rank, however the
    pipeline applies CFG, ``Family.pipeline_cfg``), "none" (guidance-distilled)."""
    if not family.cfg:
        return "none"
    return "1/2" if family.pipeline_cfg is not PipelineCfg.NONE else "1"


def cache_refusal(family: Family) -> str:
    """The step caches the family's classes cannot take, with the family's reason ("": none)."""
    missing = [m for m in STEP_CACHES if m not in family.step_cache]
    return f"not {', '.join(missing)}: {family.step_cache_refusal or 'not built'}" if missing else ""


def _row(family: Family) -> FamilyRow:
    split = "; ".join(f"{c}: {family.split_plan_source(c)}" for c in family.classes)
    lora = f"yes ({family.lora_loader}'s formats)" if family.lora_loader else ""
    generate = bool(family.pipeline_class)
    placements = generate_placements(family) if generate else {"text_encoder": (), "vae": ()}
    pipeline = " / ".join(p for p in (family.pipeline_class, family.image_pipeline_class) if p)
    return FamilyRow(family.name, family.title, family.classes, split, tuple(p.name for p in family.presets),
                     MODEL_WORKLOADS + (("generate",) if generate else ()), pipeline,
                     _cfg(family) if generate else "", placements["text_encoder"], placements["vae"],
                     family.step_cache, lora, cache_refusal(family))


def family_rows() -> list[FamilyRow]:
    """One row per family, in the registry's order (``models/families.FAMILIES``)."""
    return [_row(f) for f in FAMILIES]
