"""Two-expert models (Wan2.2 A14B) in the Plan: the boundary, and what the experts cost; and
whether the model takes one timestep per token (Wan2.2 TI2V-5B's ``expand_timesteps``).

``boundary_ratio(spec)``: the expert switch of the job's model: the checkpoint folder's
``model_index.json`` (``transformer_2`` + ``boundary_ratio``) or the preset's; a published
preset and a folder that disagree are refused in one line.

``with_experts(est, ...)``: the DiT estimate of a generate job with ``experts`` added: both
experts resident (twice the per-GPU parameter bytes), or one at a time with the idle one in
host memory (``offload``): at the switch the low-noise expert's bytes per GPU go host -> GPU and
the high-noise expert's GPU -> host (and back for the next prompt batch), at the cluster's
``gpu.host_gb_per_s`` or :data:`HOST_GB_PER_S`. Pure, stdlib only.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from sporch.orchestrator.config.job_spec import ModelSpec
from sporch.orchestrator.models.checkpoint_files import CheckpointError
from sporch.orchestrator.models.families import FamilyPreset, find_family_preset
from sporch.orchestrator.models.checkpoint_experts import read_expand_timesteps, read_experts
from sporch.orchestrator.contract.estimates_section import Estimates, ExpertsEstimate
from sporch.orchestrator.contract.sections import ClusterSpec, ModelSection
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.plan.estimates import memory_totals

#: Host <-> GPU copy rate when the cluster descriptor gives no ``gpu.host_gb_per_s``: pinned
#: copies over PCIe Gen4 x16 reach about 25 GB/s one way (Gen5: about 50).
HOST_GB_PER_S = 25.0


def _preset(spec: ModelSpec) -> Optional[FamilyPreset]:
    """The job's published preset (None: no preset, or a test model such as tiny, whose pipeline
    folder says what it has)."""
    found = find_family_preset(spec.preset) if spec.preset else None
    return found[1] if found is not None and not found[1].test_model else None


def boundary_ratio(spec: ModelSpec) -> Optional[float]:
    """The job's expert boundary (None: one transformer)."""
    preset = _preset(spec)
    published = preset is not None
    theirs = preset.boundary_ratio if published else None
    if not spec.weights:
        return theirs
    try:
        experts = read_experts(spec.weights)
    except CheckpointError as exc:
        raise SporchError(str(exc)) from None
    ours = experts.boundary_ratio if experts is not None else None
    if published and ours != theirs:
        if theirs is None:
            raise SporchError(f"model.weights {spec.weights} holds two experts (boundary_ratio {ours}) but model.preset "
                              f"{spec.preset} has one transformer; use model.preset wan2.2-t2v-a14b or drop "
                              "model.preset to take the model from the folder")
        if ours is None:
            raise SporchError(f"model.preset {spec.preset} has two experts (boundary_ratio {theirs}) but model.weights "
                              f"{spec.weights} is no pipeline folder whose model_index.json lists transformer_2 and "
                              "boundary_ratio; point model.weights at the Wan2.2 A14B diffusers folder")
        raise SporchError(f"model.weights {spec.weights}: model_index.json's boundary_ratio {ours} disagrees with "
                          f"model.preset {spec.preset} ({theirs}); drop model.preset to take the folder's")
    return ours if experts is not None else theirs


def expand_timesteps(spec: ModelSpec) -> bool:
    """Whether the job's model takes one timestep per token (Wan2.2 TI2V-5B): the pipeline
    folder's ``model_index.json`` or the preset's; a published preset and a folder that disagree
    are refused in one line."""
    preset = _preset(spec)
    published = preset is not None
    theirs = preset.expand_timesteps if published else None
    try:
        ours = read_expand_timesteps(spec.weights) if spec.weights else None
    except CheckpointError as exc:
        raise SporchError(str(exc)) from None
    if published and ours is not None and ours != theirs:
        raise SporchError(f"model.weights {spec.weights}: model_index.json's expand_timesteps {str(ours).lower()} "
                          f"disagrees with model.preset {spec.preset} ({str(theirs).lower()}); drop model.preset "
                          "to take the folder's, or point model.weights at that model's pipeline folder")
    return bool(ours if ours is not None else theirs)


def with_experts(est: Estimates, model: ModelSection, cluster: ClusterSpec, placement: str) -> Estimates:
    """``est`` (the DiT's) with ``experts`` added and its parameter and memory numbers counting
    the second expert when both are resident. The switch figures are per prompt batch (each
    switches once; offloaded, the high-noise expert moves back in before the next batch)."""
    if model.experts < 2:
        return est
    one = int(est.weights.parameter_bytes_sharded)  # one expert's resident share per GPU
    gbps = float(cluster.gpu.host_gb_per_s or HOST_GB_PER_S)
    resident = placement == "resident"
    moved = 0 if resident else 2 * one  # the low-noise expert in, the high-noise one out
    switch_s = moved / (gbps * 1e9)
    extra = one if resident else 0
    total = int(est.memory.memory_bytes_per_gpu) + extra
    experts = ExpertsEstimate(
        count=2, boundary_ratio=model.boundary_ratio, placement=placement,
        expert_bytes_per_gpu=one, gpu_bytes_per_gpu=one * (2 if resident else 1),
        host_bytes_per_gpu=0 if resident else 2 * one,  # the host keeps both (each moves back and forth)
        host_gb_per_s=gbps, host_gb_per_s_source="cluster" if cluster.gpu.host_gb_per_s else "default",
        switch_bytes_per_gpu=moved, switch_s=round(switch_s, 6),
    )
    memory = replace(est.memory, parameter_bytes_per_gpu=int(est.memory.parameter_bytes_per_gpu) + extra)
    return replace(est, experts=experts, memory=memory_totals(memory, total))
