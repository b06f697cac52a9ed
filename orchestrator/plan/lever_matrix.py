"""Every family x every lever, asked of the planner itself (``sporch models --wide``): each cell is a
small job of the family's first published preset with that lever set, planned on a descriptor
(one node of 8 GPUs, ``a100x8``, unless given); the cell is filled when the planner accepts it, else it holds the
planner's one-line refusal. Nothing is restated: a lever the planner refuses is refused here
with the planner's own words, and a lever it accepts is one a user's job gets.

LoRA is asked without a file: the planned model goes through the planner's family rule
(``adapters.check_lora_family``, which ``with_lora`` applies before reading any file); a family
with a loader then takes any adapter that names its modules (checked per file at plan time).
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Optional

from sporch.orchestrator.config.cluster import ClusterSpec
from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.models.families import FAMILIES, Family
from sporch.orchestrator.models.families.base import STEP_CACHES

from .adapters import check_lora_family
from .planner import make_plan

__all__ = ["Lever", "LEVERS", "LeverCell", "FamilyLevers", "lever_matrix", "lever_matrix_of"]


@dataclass(frozen=True)
class Lever:
    """A column: its name and the job sections it sets over the family's base job."""

    name: str
    workload: dict
    parallel: dict = dataclasses.field(default_factory=dict)
    pipeline: dict = dataclasses.field(default_factory=dict)
    model: dict = dataclasses.field(default_factory=dict)


def _gen(**more) -> dict:
    return {"kind": "generate", **more}


#: each step cache's knob at a value its docs suggest (the cell asks whether it runs, not how well);
#: MagCache at threshold 0, the run that measures a model's magnitude ratios (a preset with none
#: published needs it first)
CACHE_KNOBS = {"fbcache": {"threshold": 0.1}, "teacache": {"threshold": 0.1}, "taylorseer": {"interval": 3},
               "magcache": {"threshold": 0.0}}

LEVERS: tuple[Lever, ...] = (
    Lever("verify", {"kind": "verify"}),
    Lever("benchmark", {"kind": "benchmark"}),
    Lever("inference", {"kind": "inference"}),
    Lever("generate", _gen()),
    Lever("cfg 2", {"kind": "inference"}, parallel={"cfg": 2, "ulysses": "auto", "ring": "auto"}),
    Lever("text sharded", _gen(), pipeline={"text_encoder": "sharded"}),
    Lever("VAE parallel", _gen(), pipeline={"vae": "parallel"}),
    Lever("shard_weights", {"kind": "inference"}, parallel={"shard_weights": "world"}),
    Lever("quant", {"kind": "inference"}, model={"quant": "int8_weight"}),
    Lever("LoRA", {"kind": "inference"}),
    *(Lever(method, {"kind": "inference", "cache": {"method": method, **CACHE_KNOBS[method]}})
      for method in STEP_CACHES),
)


@dataclass(frozen=True)
class LeverCell:
    lever: str
    ok: bool
    refusal: str = ""  # the planner's one line ("": accepted)


@dataclass(frozen=True)
class FamilyLevers:
    family: str
    preset: str
    cells: tuple[LeverCell, ...]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _preset(family: Family) -> str:
    published = [p.name for p in family.presets if not p.name.startswith("tiny")]
    return (published or [p.name for p in family.presets])[0]


def _job(family: Family, preset: str, lever: Lever) -> dict[str, Any]:
    image = family.image_pipeline_class is None and not family.video
    workload = {"frames": 1 if image else 9, "height": 256, "width": 256, "steps": 4,
                "guidance_scale": 5.0 if family.cfg else 1.0, **lever.workload}
    if workload["kind"] == "generate":
        workload["prompt"] = "a lighthouse at dusk"
    parallel = {**lever.parallel}
    if "cfg" not in parallel and family.cfg:
        parallel["cfg"] = 1
    return {"name": f"{family.name}-{lever.name.replace(' ', '-')}", "model": {"preset": preset, **lever.model},
            "workload": workload, "parallel": parallel, "pipeline": dict(lever.pipeline)}


def _cell(cluster: ClusterSpec, family: Family, preset: str, lever: Lever,
          plan: Callable[[ClusterSpec, Any], Any]) -> LeverCell:
    try:
        planned = plan(cluster, job_from_dict(_job(family, preset, lever), source=f"<{family.name} {lever.name}>"))
        if lever.name == "LoRA":
            check_lora_family(planned.model)
    except SporchError as exc:
        line = " ".join(str(exc).split())
        return LeverCell(lever.name, False, re.sub(r"^<[^>]*>: ", "", line))
    return LeverCell(lever.name, True)


def lever_matrix(cluster: ClusterSpec, families: Optional[tuple[Family, ...]] = None,
                 plan: Callable[[ClusterSpec, Any], Any] = make_plan) -> list[FamilyLevers]:
    """One row per family (``FAMILIES`` order), one cell per lever (``LEVERS`` order)."""
    rows = []
    for family in families or FAMILIES:
        preset = _preset(family)
        rows.append(FamilyLevers(family.name, preset,
                                 tuple(_cell(cluster, family, preset, lever, plan) for lever in LEVERS)))
    return rows


#: the matrices made in this process, by the descriptor's contents: 294 cells are 294 plans, each
#: ranking its layouts, and a process that prints or checks the table again plans it once
_MADE: dict[str, tuple[FamilyLevers, ...]] = {}


def lever_matrix_of(cluster: ClusterSpec) -> tuple[FamilyLevers, ...]:
    """:func:`lever_matrix` of every family with the planner, made once per descriptor (its
    contents, not its name) in a process."""
    key = json.dumps(dataclasses.asdict(cluster), sort_keys=True, default=str)
    if key not in _MADE:
        _MADE[key] = tuple(lever_matrix(cluster))
    return _MADE[key]
