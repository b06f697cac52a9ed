"""The closed sets of words a job file, a cluster file and a Plan may use (stdlib only).
"""

from __future__ import annotations

#: Longest job or cluster name: a job's becomes a folder name (runs/<name>/...) and the Slurm job name.
MAX_NAME = 100

#: ``model.attention``: cross-attention to text (Wan), joint text+image attention (MMDiT), self only (DiT).
ATTENTION_KINDS: tuple[str, ...] = ("cross", "joint", "self")
#: How the sequence is cut over the sequence ranks (``plan.sequence.split``): ``uneven`` (cut
#: unpadded, the attention pads each rank's chunk to the longest and masks it: what the planner
#: records) or ``padded`` (padded to a multiple of the degree and cut evenly: plans of sporch
#: releases before the one model path, which the runtime refuses with "re-plan the job")
SEQUENCE_SPLITS: tuple[str, ...] = ("padded", "uneven")
#: ``workload.kind``.
WORKLOAD_KINDS: tuple[str, ...] = ("inference", "benchmark", "verify", "generate", "preflight")
#: Output files of a generate workload, and the schedulers it can use (docs/generate.md).
OUTPUT_FORMATS: tuple[str, ...] = ("mp4", "png")
SCHEDULERS: tuple[str, ...] = ("unipc", "euler")
#: ``workload.dtype`` and its size in bytes.
DTYPE_BYTES: dict[str, int] = {"float32": 4, "bfloat16": 2, "float16": 2}
DTYPES: tuple[str, ...] = tuple(DTYPE_BYTES)
#: ``parallel.shard_weights``: where the DiT's parameters are sharded (FSDP2, one unit per block):
#: not at all, over each replica's sequence group (ring x ulysses ranks), or over every rank.
SHARD_WEIGHTS: tuple[str, ...] = ("none", "sequence", "world")
#: ``pipeline.text_encoder`` (generate): on the replica's leader GPU, sharded (FSDP2) over the
#: leader's sequence group, or run on the leader's CPU.
TEXT_ENCODER_PLACEMENTS: tuple[str, ...] = ("leader", "sharded", "cpu")
#: ``pipeline.vae`` (generate): the whole decode on the leader, diffusers' tiled decode on the
#: leader, or the latent split by rows over the leader's sequence group (exact, halos per conv).
VAE_PLACEMENTS: tuple[str, ...] = ("leader", "tiled", "parallel")
#: Where a two-expert model's (Wan2.2 A14B) experts live: both on the GPU, or the idle one in
#: host memory (docs/plan.md, "Two experts").
EXPERT_PLACEMENTS: tuple[str, ...] = ("resident", "offload")
#: ``model.lora[].expert``: which transformer of a two-expert model (Wan2.2 A14B) an adapter adapts.
LORA_EXPERTS: tuple[str, ...] = ("both", "transformer", "transformer_2")
#: ``model.stage``: ranks read the weights where they are, or a verified copy per node.
STAGE_MODES: tuple[str, ...] = ("shared", "node")
#: ``stage_cleanup`` (cluster): keep a node's staged copy for later jobs, or remove it at the end.
STAGE_CLEANUP: tuple[str, ...] = ("keep", "end")
#: ``login.host_key_policy``: what to do with a login host whose key is not known.
HOST_KEY_POLICIES: tuple[str, ...] = ("reject", "accept-new")
#: ``container.runtime`` (cluster or job): how each rank runs in a container (docs/clusters.md):
#: srun's pyxis options, or the rank command wrapped in ``apptainer``/``singularity exec`` or
#: ``podman run``. A job's ``container.runtime: none`` runs it without the cluster's container.
CONTAINER_RUNTIMES: tuple[str, ...] = ("pyxis", "apptainer", "singularity", "podman")

#: workload.cache.method: step caching (docs/performance.md, "Step caching").
CACHE_METHODS = ("none", "fbcache", "teacache", "taylorseer", "magcache")

#: ``model.quant``: low-bit DiT block weights through torchao (docs/performance.md, "Low-bit
#: weights"): none; int8 weights dequantised in each matmul; float8 (e4m3) weights likewise; float8
#: weights and float8 activations quantised per token (a float8 matmul: sm89+ GPUs only).
QUANT_MODES: tuple[str, ...] = ("none", "int8_weight", "fp8_weight", "fp8_dynamic")
#: The modes whose tensors are float8: GPUs of compute capability 8.9 or later only.
FP8_QUANT: tuple[str, ...] = ("fp8_weight", "fp8_dynamic")
#: Bytes of one quantised block weight element (the per-row scales are counted apart).
QUANT_WEIGHT_BYTES: dict[str, int] = {"int8_weight": 1, "fp8_weight": 1, "fp8_dynamic": 1}

#: ``workload.attention_precision``: exact kernels only (default), or lossy ones allowed
#: (SageAttention's 8-bit Q K^T; docs/performance.md, "Attention precision").
ATTENTION_PRECISIONS: tuple[str, ...] = ("exact", "lossy")
