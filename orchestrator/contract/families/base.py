"""The record every family module fills (standard library only)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

from ..checkpoint_files import CheckpointError
from .plan_format import SplitPlan


class UnsupportedClass(CheckpointError):
    """A diffusers class no family covers."""


def no_pipeline_parts(preset: Optional[str]) -> Optional[Mapping[str, Any]]:
    """A family whose text encoder and VAE sizes sporch does not know."""
    return None


@dataclass(frozen=True)
class FamilyPreset:
    """A published checkpoint's transformer config (the keys of its config.json that set the
    shape) and where the numbers come from."""

    name: str
    config: Mapping[str, Any]
    source: str
    parameters: Optional[int] = None  # the published checkpoint's parameter count, where known


@dataclass(frozen=True)
class Family:
    name: str  # "qwen-image"
    title: str  # "Qwen-Image"
    classes: tuple[str, ...]  # diffusers transformer classes
    #: config.json -> plan.model shape fields (attention, depth, single_depth, hidden, num_heads,
    #: num_kv_heads, head_dim, ffn_dim, patch, in_channels, vae_stride, text_len, text_dim, qk_norm)
    shape: Callable[[Mapping[str, Any]], dict]
    #: class -> the split plan sporch ships (classes without a ``_cp_plan``); absent: the class's own
    split_plans: Mapping[str, SplitPlan] = field(default_factory=dict)
    #: module-name prefixes whose attention runs on whole (unsplit) tensors
    local_attention: tuple[str, ...] = ()
    presets: tuple[FamilyPreset, ...] = ()
    #: workloads the generic path runs for this family (generate needs the pipeline parts)
    workloads: tuple[str, ...] = ("verify", "benchmark", "inference")
    #: hand-built sporch path (Wan, Flux) besides the generic one
    hand_built: bool = False
    cfg: bool = True  # classifier-free guidance applies (False: guidance-distilled)
    #: The generate workload (hand-built pipelines, runtime/pipelines/families.py): the diffusers
    #: pipeline folder's sub-folders it reads (empty: no generate pipeline), whether it makes video
    #: (MP4) or images (PNG), and the attention kind by which a stand-in preset (``tiny``) in a
    #: generate job takes this family's pipeline (the planner records the answer in plan.model.family).
    pipeline_folders: tuple[str, ...] = ()
    video: bool = False
    standin_attention: Optional[str] = None
    #: The generic path's generate (runtime/pipelines/generic.py): the diffusers pipeline class it
    #: runs around the sequence-parallel transformer (None: no generic generate for this family)
    pipeline_class: Optional[str] = None
    #: preset name -> the published text encoder / VAE / image encoder facts (plan/pipeline.py's
    #: memory estimate), or None where unknown
    pipeline_parts: Callable[[Optional[str]], Optional[Mapping[str, Any]]] = no_pipeline_parts
    notes: str = ""

    def split_plan_source(self, class_name: str) -> str:
        return "shipped table" if class_name in self.split_plans else "the class's _cp_plan"
