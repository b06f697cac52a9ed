"""The plan's estimate of staging the weights per node (``model.stage: node``; runtime/stage.py).

Pure: the checkpoint's size is estimated from the model (its parameters in bfloat16, as the
publishers ship them; for a generate job the text encoder in bfloat16 and the VAE in float32
too), since the planner reads no files. Every node copies all of it from the shared file system
at once, so they share its bandwidth: ``nodes x bytes / shared_fs_gb_per_s``. The measured
figures go to ``result.json`` (``metrics.staging``).
"""

from __future__ import annotations

from typing import Optional

from sporch.orchestrator.contract.estimates_section import StagingEstimate
from sporch.orchestrator.contract.sections import ClusterSpec, ModelSection, WorkloadSection
from sporch.orchestrator.plan.estimates import parameter_count
from sporch.orchestrator.plan.pipeline_estimate import VAE_BYTES, known_parts

CHECKPOINT_BYTES = 2  # bfloat16, as published


def checkpoint_bytes(model: ModelSection, workload: WorkloadSection) -> int:
    """The estimated size of what ``model.weights`` holds."""
    size = parameter_count(model) * CHECKPOINT_BYTES
    known = known_parts(model) if workload.kind == "generate" else None
    if known:
        size += known["text_encoder_parameters"] * CHECKPOINT_BYTES + known["vae_parameters"] * VAE_BYTES
    return int(size)


def staging_estimate(model: ModelSection, workload: WorkloadSection, cluster: ClusterSpec,
                     nodes: int) -> Optional[StagingEstimate]:
    """The staging estimate of a job that stages its weights, else None."""
    if model.stage != "node" or not model.weights:
        return None
    size = checkpoint_bytes(model, workload)
    bw = float(cluster.shared_fs_gb_per_s)
    return StagingEstimate(bytes=size, nodes=nodes, shared_fs_gb_per_s=bw, node_local_dir=cluster.node_local_dir,
                           s=round(nodes * size / (bw * 1e9), 3))
