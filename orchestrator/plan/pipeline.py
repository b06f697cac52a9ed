"""The generate workload in the Plan: its workload keys, and where the text encoder and VAE
run with what memory (``plan.estimates.pipeline``). Pure, stdlib only.

Placement (runtime/pipelines/): the text encoder and the VAE run on one rank per dp replica
(its cfg rank 0, sequence rank 0); the text encoder before the transformer is built and freed
after encoding, the VAE after denoising next to the transformer. So the busiest rank holds
``max(text encoder, transformer + VAE + decode working set)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from sporch.orchestrator.contract.plan import Layout
from sporch.orchestrator.contract.sections import ModelSection, WorkloadSection

#: Parameters of the published pipelines' other parts (text encoders, VAE).
ENCODERS: dict[str, dict[str, Any]] = {
    "wan": {"text_encoder": "umT5-XXL encoder", "text_encoder_parameters": 5_680_000_000,
            "vae": "AutoencoderKLWan", "vae_parameters": 127_000_000, "vae_channels": 96, "vae_chunk_frames": 4},
    "flux": {"text_encoder": "T5-XXL encoder + CLIP-L text", "text_encoder_parameters": 4_760_000_000 + 123_000_000,
             "vae": "AutoencoderKL", "vae_parameters": 84_000_000, "vae_channels": 128, "vae_chunk_frames": 1},
}
#: Live full-resolution tensors in a VAE decoder block (rough: input, norm, conv out, residual...).
VAE_LIVE_TENSORS = 6
VAE_BYTES = 4  # the VAE decodes in float32


def resolve_prompt_file(prompt_file: Optional[str], source: Optional[str]) -> Optional[str]:
    """A relative ``workload.prompt_file`` is relative to the job file's folder."""
    if prompt_file and source and not Path(prompt_file).expanduser().is_absolute():
        return str(Path(source).parent / prompt_file)
    return prompt_file


def _family(model: ModelSection) -> Optional[str]:
    preset = model.preset or ""
    if preset.startswith("wan2.1-t2v"):
        return "wan"
    if preset.startswith("flux.1"):
        return "flux"
    return None


def pipeline_estimate(model: ModelSection, workload: WorkloadSection, layout: Layout,
                      dit: dict[str, Any]) -> dict[str, Any]:
    """Where the text encoder and VAE run and their memory, merged with the DiT estimate
    ``dit``: ``memory_bytes_per_gpu`` becomes the busiest rank's."""
    leaders = [layout.rank_of(dp=d) for d in range(layout.dp)]
    fam = _family(model)
    known = ENCODERS.get(fam or "")
    b = int(dit["dtype_bytes"])
    out: dict[str, Any] = {
        "text_encoder": {"ranks": leaders, "what": known["text_encoder"] if known else "the folder's (size unknown)"},
        "vae": {"ranks": leaders, "what": known["vae"] if known else "the folder's (size unknown)"},
        "transformer": {"ranks": list(range(layout.world_size))},
    }
    enc_bytes = vae_bytes = act_bytes = 0
    if known:
        enc_bytes = known["text_encoder_parameters"] * b
        vae_bytes = known["vae_parameters"] * VAE_BYTES
        pixels = (workload.height or 0) * (workload.width or 0)
        frames = min(workload.frames or 1, known["vae_chunk_frames"])
        act_bytes = frames * pixels * known["vae_channels"] * VAE_BYTES * VAE_LIVE_TENSORS
        out["text_encoder"]["bytes"] = enc_bytes
        out["vae"].update(bytes=vae_bytes, decode_bytes=act_bytes)
    leader_bytes = max(enc_bytes + int(dit.get("reserved_bytes_per_gpu", 0)),
                       dit["memory_bytes_per_gpu"] + vae_bytes + act_bytes)
    out["leader_memory_bytes"] = leader_bytes
    return out


def with_pipeline(est: dict[str, Any], model: ModelSection, workload: WorkloadSection, layout: Layout) -> dict[str, Any]:
    """The DiT estimate with ``pipeline`` added and its memory numbers raised to the busiest rank's."""
    pipe = pipeline_estimate(model, workload, layout, est)
    total = max(est["memory_bytes_per_gpu"], pipe["leader_memory_bytes"])
    gpu = est["gpu_memory_gib"] * 1024**3
    return {**est, "pipeline": pipe, "dit_memory_bytes_per_gpu": est["memory_bytes_per_gpu"],
            "memory_bytes_per_gpu": total, "memory_gib_per_gpu": round(total / 1024**3, 3),
            "memory_fraction": round(total / gpu, 4), "fits": total <= 0.9 * gpu}
