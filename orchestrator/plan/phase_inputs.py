"""What the cost model's job phases need of a Plan (:class:`PhaseInputs`): the bytes a job loads,
the text encoder's work and where it runs, the VAE's output and where it decodes, the media it
writes. The one place that reads a Plan's fields for the phases (plan/phase_cost.py has the
formulas; docs/plan.md, "Every phase of a job").

The sizes are the published parts' the family homes hold (``Family.pipeline_parts``: the text
encoders', image encoder's and VAE's parameters; a pipeline folder's own where its headers gave
them) and the DiT's counted parameters. A checkpoint is read as published: bfloat16, the VAE and
the image encoder of the hand-built path in float32. Pure, stdlib only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from sporch.orchestrator.plan.experts import HOST_GB_PER_S
from sporch.orchestrator.plan.pipeline_estimate import known_parts

CHECKPOINT_BYTES = 2  # bfloat16, as the parts are published
#: A tiled decode recomputes the tiles' overlaps: diffusers' default tile stride is 3/4 of the
#: tile in each direction, so about (4/3)^2 of the pixels are decoded.
TILED_DECODE_WORK = (4 / 3) ** 2
#: CLIP ViT-H/14 at 224 px: 256 patches + the class token (Wan2.1 I2V's image encoder).
IMAGE_ENCODER_TOKENS = 257
OUTPUT_BYTES_PER_PIXEL = 3  # decoded RGB frames as uint8, gathered by a parallel decode


@dataclass(frozen=True)
class PhaseInputs:
    """A job's phases as the cost model sees them (per replica: dp replicas run side by side)."""

    world: int
    nodes: int
    writes: bool  # the job writes its media (generate)
    loop_steps: int  # denoising steps one job runs (benchmark: warm-up + timed)
    dit_read_bytes: float  # the DiT's checkpoint (both experts), read per node; 0: random weights
    dit_gpu_bytes: float  # what each GPU receives of it (its shard, the experts resident)
    encoder_read_bytes: float  # text encoders + image encoder, read per node (generate)
    encoder_gpu_bytes: float  # of them on the leader's GPU (a CPU text encoder: the image encoder's)
    vae_read_bytes: float  # the VAE, read per node (generate)
    vae_gpu_bytes: float
    staged: bool  # model.stage: node: read from the node's disk after the staging copy
    stage_s: float  # the staging copy (estimates.staging.s)
    storage_gb_per_s: float  # the descriptor's shared file system, all nodes together
    host_gb_per_s: float  # host <-> GPU copies
    link_gb_per_s: float  # the sequence group's link (a sharded encoder's gathers, a parallel decode's frames)
    encode_flops: float  # the text encoders and image encoder over one replica's prompts (CFG: and negatives)
    encoder_placement: str  # leader | sharded | cpu
    encode_degree: int  # ranks a sharded encoder is spread over
    encoder_bytes: float  # the text encoders' bytes in the workload dtype (a sharded one's gathers)
    vae_placement: str  # leader | tiled | parallel
    vae_degree: int  # ranks a parallel decode is split over
    decode_share: float  # of the decode's work on the busiest decoding rank (parallel: its rows + a halo row)

    @classmethod
    def bare(cls, loop_steps: int) -> "PhaseInputs":
        """No weights read, nothing encoded on a known encoder, no media written: a job's phases
        when only its denoising is known (cost inputs made by hand)."""
        return cls(world=1, nodes=1, writes=False, loop_steps=loop_steps, dit_read_bytes=0.0, dit_gpu_bytes=0.0,
                   encoder_read_bytes=0.0, encoder_gpu_bytes=0.0, vae_read_bytes=0.0, vae_gpu_bytes=0.0,
                   staged=False,
                   stage_s=0.0, storage_gb_per_s=1.0, host_gb_per_s=HOST_GB_PER_S, link_gb_per_s=1.0,
                   encode_flops=0.0, encoder_placement="leader", encode_degree=1, encoder_bytes=0.0,
                   vae_placement="leader", vae_degree=1, decode_share=1.0)

    def decode_work(self, pixels: float) -> float:
        """Of a replica's ``pixels`` (output pixels x frames), what the busiest decoding rank
        decodes (a tiled decode recomputes the overlaps, a parallel one takes its rows)."""
        if self.vae_placement == "tiled":
            return pixels * TILED_DECODE_WORK
        return pixels * self.decode_share

    def gathered_bytes(self, pixels: float) -> float:
        """A parallel decode's frames gathered to the leader (none otherwise)."""
        if self.vae_placement != "parallel" or self.vae_degree <= 1:
            return 0.0
        return pixels * OUTPUT_BYTES_PER_PIXEL * (self.vae_degree - 1) / self.vae_degree


def phase_inputs(plan: Any, parts: Optional[Mapping[str, Any]] = None) -> PhaseInputs:
    """The phases of ``plan``; ``parts``: the pipeline's parts to use in place of its model's
    family's (a published table's model is a stand-in shape whose pipeline is another preset's)."""
    m, w, e, lay, c = plan.model, plan.workload, plan.estimates, plan.layout, plan.cluster
    place = plan.placement
    generate = w.kind == "generate"
    # the pipeline's parts matter to a job timed end to end (a benchmark's steps are all it runs)
    known = parts if parts is not None else known_parts(m) if w.kind in ("generate", "inference") else None
    prompts = max(1, w.batch // max(1, lay.dp))
    experts = max(1, int(getattr(m, "experts", 1) or 1))
    dtype_b = int(e.compute.dtype_bytes)
    has_weights = bool(m.weights) or generate
    dit_gpu = float(e.experts.gpu_bytes_per_gpu if e.experts is not None else e.weights.parameter_bytes_sharded)
    enc_read = enc_gpu = enc_bytes = flops = vae_read = vae_gpu = 0.0
    text_place = getattr(place, "text_encoder", "leader")
    if known:
        enc_params = float(known["text_encoder_parameters"])
        image_params = float(known.get("image_encoder_parameters") or 0)
        vae_b = dtype_b  # the pipeline's parts load in the workload dtype
        enc_read = (enc_params + image_params) * CHECKPOINT_BYTES
        enc_bytes = enc_params * dtype_b
        on_gpu = 0.0 if text_place == "cpu" else enc_bytes
        enc_gpu = on_gpu + image_params * dtype_b
        vae_read, vae_gpu = float(known["vae_parameters"]) * CHECKPOINT_BYTES, float(known["vae_parameters"]) * vae_b
        passes = prompts * (2 if w.cfg_enabled else 1)  # the negative prompt is encoded too
        flops = 2.0 * enc_params * max(1, int(m.text_len or 0)) * passes
        flops += 2.0 * image_params * IMAGE_ENCODER_TOKENS * prompts if image_params else 0.0
    seq = lay.ring * lay.ulysses
    vae_place = getattr(place, "vae", "leader")
    height = w.height or 0
    rows = max(1, height // int((m.vae_stride or [1, 8, 8])[1]))
    share = min(1.0, (math.ceil(rows / seq) + 1) / rows) if vae_place == "parallel" and seq > 1 else 1.0
    staging = e.staging
    return PhaseInputs(
        world=plan.world_size, nodes=plan.nodes, writes=generate,
        loop_steps=(w.warmup + w.repeat) if w.kind == "benchmark" else w.steps,
        dit_read_bytes=float(e.compute.parameters) * CHECKPOINT_BYTES * experts if has_weights else 0.0,
        dit_gpu_bytes=dit_gpu,
        encoder_read_bytes=enc_read if generate else 0.0, encoder_gpu_bytes=enc_gpu if generate else 0.0,
        vae_read_bytes=vae_read if generate else 0.0, vae_gpu_bytes=vae_gpu if generate else 0.0,
        staged=m.stage == "node" and staging is not None, stage_s=float(staging.s) if staging is not None else 0.0,
        storage_gb_per_s=float(c.shared_fs_gb_per_s), host_gb_per_s=float(c.gpu.host_gb_per_s or HOST_GB_PER_S),
        link_gb_per_s=float(c.intra_node.gb_per_s),
        encode_flops=flops, encoder_placement=text_place, encode_degree=seq if text_place == "sharded" else 1,
        encoder_bytes=enc_bytes,
        vae_placement=vae_place, vae_degree=seq if vae_place == "parallel" else 1, decode_share=share,
    )
