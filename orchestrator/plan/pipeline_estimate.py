"""The generate workload in the Plan: its workload keys, and where the text encoder and VAE
run with what memory (``plan.estimates.pipeline``, a PipelineEstimate). Pure, stdlib only.

Placement (runtime/pipelines/, ``plan.placement``): by default the text encoder and the VAE run
on one rank per dp replica (its cfg rank 0, sequence rank 0: the leader); the text encoder before
the transformer is built and freed after encoding, the VAE after denoising next to the
transformer. So the busiest rank holds ``max(text encoder, transformer + VAE + decode)``.
``pipeline.text_encoder: sharded`` spreads the encoder over each sequence group (FSDP2), ``cpu``
runs it in the leader's host memory; ``pipeline.vae: tiled`` decodes tile by tile (diffusers),
``parallel`` splits the latent's rows over the leader's sequence group.

The one model path's generate (``plan.model.diffusers_class`` set; runtime/pipelines/generate_run.py) loads
the family's diffusers pipeline whole, every part in the workload dtype, the transformer first:
its leader encodes with the transformer and the VAE already on the GPU (``pipeline.text_encoder:
cpu`` keeps the encoders in host memory), frees the encoders, then denoises and decodes. So its
busiest rank holds ``max(transformer parameters + text encoders + VAE, transformer + VAE + decode)``.
The encoders' and VAE's sizes are the family's (``Family.pipeline_parts``: the published ones, for
its preset or a checkpoint folder of a preset's shape).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping, Optional

from sporch.orchestrator.contract.estimates_section import BusiestRank, Estimates, PipelineEstimate, PipelinePart
from sporch.orchestrator.models.families import get_family, published_preset
from sporch.orchestrator.contract.plan import Layout
from sporch.orchestrator.contract.sections import ModelSection, WorkloadSection
from sporch.orchestrator.plan.estimates import memory_totals

#: The published text encoders, VAEs and image encoders (sizes, blocks, widths) are facts of each
#: family: ``Family.pipeline_parts(preset)`` in models/families/ (wan.PARTS, flux.PARTS, qwenimage.PARTS, ...).
#: Live full-resolution tensors in a VAE decoder block (rough: input, norm, conv out, residual...).
VAE_LIVE_TENSORS = 6
VAE_BYTES = 4  # decoded frames (float32) and a VAE checkpoint's bytes per parameter
#: A tiled decode keeps every decoded tile (they overlap: stride 3/4 of the tile, so about
#: (4/3)^2 of the frames) and then the blended frames.
TILED_OUTPUT_COPIES = 2.8


def known_parts(model: ModelSection) -> Optional[Mapping[str, Any]]:
    """The text encoder and VAE of ``model``: its family's published ones (by preset; on the generic
    path also for a checkpoint folder of a published preset's shape), with a pipeline folder's own
    classes and sizes (``model.pipeline_sizes``, read from its headers) in their place; the decode's
    facts (channels, frames per chunk) stay the family's, its first preset's for a folder of
    another shape. None: sizes unknown."""
    if not model.family:
        return None
    fam = get_family(model.family)
    preset = model.preset
    if preset is None and model.diffusers_class:
        found = published_preset(model)
        preset = found[1].name if found is not None else None
    parts = fam.pipeline_parts(preset)
    if model.pipeline_sizes:
        template = parts or (fam.pipeline_parts(fam.presets[0].name) if fam.presets else None)
        return {**template, **model.pipeline_sizes} if template is not None else None
    return parts


def sharded_encoder_bytes(known: Mapping[str, Any], b: int, degree: int) -> int:
    """GPU bytes per rank of the text encoders sharded over ``degree`` ranks (FSDP2,
    runtime/pipelines/text.shard_encoder: each layer, each embedding table and linear outside the
    layers a unit): 1/degree of them, plus the biggest that is gathered at a time (the largest
    table, e.g. a vocabulary embedding or an LM head, or a layer and the prefetched next one). The
    layer is the largest one where the family or the folder says (``text_encoder_layer``), else the
    encoders' layers' mean."""
    params = known["text_encoder_parameters"]
    block = known.get("text_encoder_layer") or (params - known["text_encoder_embedding"]) / known["text_encoder_layers"]
    gathered = max(known["text_encoder_embedding"], 2 * block)
    return int((-(-params // degree) + gathered) * b)


def decode_bytes(known: Mapping[str, Any], workload: WorkloadSection, vae: str, degree: int,
                 vae_stride: list[int], vae_bytes: int = VAE_BYTES) -> dict[str, int]:
    """The VAE decode's working set on the busiest decoding rank (its tensors ``vae_bytes`` per
    element), and the decoded frames it holds."""
    height, width = workload.height or 0, workload.width or 0
    frames = min(workload.frames or 1, known["vae_chunk_frames"])
    per_pixel = frames * known["vae_channels"] * vae_bytes * VAE_LIVE_TENSORS
    out = (workload.frames or 1) * height * width * 3 * VAE_BYTES  # one sample's frames, float32
    if vae == "tiled":
        return {"working": int(min(height * width, known["vae_tile_pixels"]) * per_pixel),
                "frames": int(out * TILED_OUTPUT_COPIES)}
    if vae == "parallel" and degree > 1:
        rows = max(1, height // int(vae_stride[1]))
        share = min(1.0, (-(-rows // degree) + 1) / rows)  # its rows, plus a halo row per conv
        return {"working": int(height * width * per_pixel * share), "frames": 2 * out}  # parts + gathered
    return {"working": int(height * width * per_pixel), "frames": out}


def pipeline_estimate(model: ModelSection, workload: WorkloadSection, layout: Layout, dit: Estimates,
                      text_encoder: str = "leader", vae: str = "leader") -> PipelineEstimate:
    """Where the text encoder and VAE run and their memory for the placements ``text_encoder``
    and ``vae`` (vocab.TEXT_ENCODER_PLACEMENTS, VAE_PLACEMENTS), with the busiest rank's
    breakdown. That rank is a replica's leader: it encodes (before the transformer is built;
    the encoder is freed after) and then holds the transformer, the VAE and the decode."""
    leaders = tuple(layout.rank_of(dp=d) for d in range(layout.dp))
    seq = layout.sequence_degree
    groups = tuple(layout.rank_of(dp=d, ring=r, ulysses=u) for d in range(layout.dp)
                   for r in range(layout.ring) for u in range(layout.ulysses))  # every leader's sequence group
    known = known_parts(model)
    b = int(dit.compute.dtype_bytes)
    vae_b = b  # the diffusers pipeline, whole, in the workload dtype
    enc_ranks = tuple(range(layout.world_size)) if text_encoder == "sharded" and seq > 1 else leaders
    unknown = "the folder's (size unknown)"
    enc = PipelinePart(ranks=enc_ranks, placement=text_encoder, what=known["text_encoder"] if known else unknown)
    dec = PipelinePart(ranks=groups if vae == "parallel" and seq > 1 else leaders, placement=vae,
                       what=known["vae"] if known else unknown)
    image = None
    enc_gpu = vae_bytes = work = frames = image_gpu = 0
    if known and known.get("image_encoder"):
        image_gpu = known["image_encoder_parameters"] * b
        image = PipelinePart(ranks=leaders, what=known["image_encoder"], bytes=image_gpu)
    if known:
        enc_full = known["text_encoder_parameters"] * b
        enc_gpu = (0 if text_encoder == "cpu" else sharded_encoder_bytes(known, b, seq)
                   if text_encoder == "sharded" and seq > 1 else enc_full)
        vae_bytes = known["vae_parameters"] * vae_b
        decoded = decode_bytes(known, workload, vae, seq, model.vae_stride, vae_b)
        work, frames = decoded["working"], decoded["frames"]
        enc = replace(enc, bytes=enc_full, bytes_per_rank=enc_gpu, host_bytes=enc_full if text_encoder == "cpu" else 0)
        dec = replace(dec, bytes=vae_bytes, decode_bytes=work, frames_bytes=frames)
    mem = dit.memory
    reserved = int(mem.reserved_bytes_per_gpu)
    encode_phase = max(enc_gpu, image_gpu) + reserved  # one encoder at a time
    encode_phase += int(mem.parameter_bytes_per_gpu) + vae_bytes  # the transformer and the VAE are loaded first
    decode_phase = mem.memory_bytes_per_gpu + vae_bytes + work + frames
    return PipelineEstimate(
        text_encoder=enc, vae=dec, transformer=PipelinePart(ranks=tuple(range(layout.world_size))),
        image_encoder=image, leader_memory_bytes=max(encode_phase, decode_phase),
        busiest_rank=BusiestRank(
            peak_stage="encode" if encode_phase > decode_phase else "denoise + decode",
            dit_parameters=int(mem.parameter_bytes_per_gpu), dit_activations=int(mem.activation_bytes_per_gpu),
            text_encoder=enc_gpu, image_encoder=image_gpu, vae=vae_bytes, vae_decode=work + frames,
            reserved=reserved),
    )


def with_pipeline(est: Estimates, model: ModelSection, workload: WorkloadSection, layout: Layout,
                  text_encoder: str = "leader", vae: str = "leader") -> Estimates:
    """The DiT estimate with ``pipeline`` added and its memory numbers raised to the busiest rank's."""
    pipe = pipeline_estimate(model, workload, layout, est, text_encoder, vae)
    dit = est.memory.memory_bytes_per_gpu
    memory = replace(est.memory, dit_memory_bytes_per_gpu=dit)
    return replace(est, pipeline=pipe, memory=memory_totals(memory, max(dit, pipe.leader_memory_bytes)))
