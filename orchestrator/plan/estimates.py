"""Back-of-envelope estimates recorded in the Plan: tokens, communication, memory, compute.

All numbers are per GPU and per sample group unless said otherwise; they are meant to catch
layouts that cannot fit or are obviously communication-bound, not to predict exact times.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from sporch.orchestrator.contract.quant import SCALE_BYTES, block_weight_bytes
from sporch.orchestrator.models.families import config_parameters, counted_parameters, get_family
from sporch.orchestrator.contract.vocab import DTYPE_BYTES
from sporch.orchestrator.contract.estimates_section import (
    CommunicationEstimate,
    ComputeEstimate,
    Estimates,
    MemoryEstimate,
    WeightsEstimate,
)
from sporch.orchestrator.contract.plan import Layout
from sporch.orchestrator.contract.sections import ClusterSpec, HeadsSection, ModelSection, SequenceSection, WorkloadSection

GIB = 1024**3
#: What a rank holds besides tensors: the CUDA context and kernels (about 0.5 GiB), cuBLAS and
#: NCCL workspaces and buffers, the caching allocator's slack. Counted in every rank's total.
RESERVED_BYTES = 2 * GIB


def image_tokens(model: ModelSection) -> tuple[int, int]:
    """(image_dim, image_len) of a cross-attention model that also attends to image tokens beside
    the text (Wan2.1 I2V's CLIP tokens: 1280, 257; its family's ``image_tokens`` of its config);
    (0, 0) otherwise."""
    if model.attention != "cross" or not model.family or model.diffusers_config is None:
        return 0, 0
    return get_family(model.family).image_tokens(model.diffusers_config)


def parameter_count(model: ModelSection) -> int:
    """Approximate parameter count of the DiT (blocks + embeddings + head)."""
    parts = parameter_parts(model)
    return parts["blocks"] + parts["root"]


def parameter_parts(model: ModelSection) -> dict[str, int]:
    """The DiT's parameters by FSDP unit kind: ``blocks`` (all of them), ``largest_block`` (the
    biggest one unit gathers), ``root`` (embeddings and head: the root unit). A     preset's are counted (models/families ``counted_parameters``); another model's follow
    its family's formula of its diffusers config (``config_parameters``); the rest follow the shape."""
    counted = counted_parameters(model) or config_parameters(model)
    if counted is not None:
        return counted.as_parts()
    h, f = model.hidden, model.ffn_dim
    kvd = model.num_kv_heads * model.head_dim
    attn = 2 * h * h + 2 * h * kvd + 4 * h  # q, o + k, v (+ biases)
    ffn = 2 * h * f + h + f
    kind = model.attention
    if kind == "self":
        block = attn + ffn + 6 * h * h  # adaLN-Zero modulation
        blocks, largest = model.depth * block, block
    elif kind == "cross":
        block = attn + (4 * h * h + 4 * h) + ffn + 6 * h  # self-attn, cross-attn, FFN, modulation
        block += 2 * h * kvd + 3 * kvd if image_tokens(model)[0] else 0  # the image tokens' k, v (+ norm)
        blocks, largest = model.depth * block, block
    else:  # joint: double-stream blocks (two streams) + single-stream blocks
        double = 2 * (attn + ffn + 6 * h * h)
        single = h * (3 * h + f) + (h + f) * h + 3 * h * h
        blocks = model.depth * double + model.single_depth * single
        largest = max(double if model.depth else 0, single if model.single_depth else 0)
    pt, ph, pw = model.patch
    patch_in = model.in_channels * pt * ph * pw
    embed = patch_in * h + h + 2 * (256 * h + h * h)  # patch embed + timestep MLP
    if model.text_dim:
        embed += model.text_dim * h + h * h
    head = h * patch_in + 2 * h * h
    image_dim = image_tokens(model)[0]
    if image_dim:  # the image embedding: LayerNorm, Linear, GELU, Linear, LayerNorm
        embed += 2 * image_dim + image_dim * image_dim + image_dim + image_dim * h + h + 2 * h
    return {"blocks": int(blocks), "largest_block": int(largest), "root": int(embed + head)}


def token_parameter_count(model: ModelSection) -> int:
    """Parameters of the linears one image/video token passes through in a forward (what a
    token's GEMM FLOPs are 2x of): not the per-sample modulation (adaLN) and timestep layers,
    one stream of a double-stream block (an image token never meets the text weights), and for
    cross-attention only the query and output projections (keys and values are the text's:
    :func:`context_flops_per_sample`). Flux.1-dev: 6.46 B of its 11.9 B parameters."""
    h, f = model.hidden, model.ffn_dim
    kvd = model.num_kv_heads * model.head_dim
    attn = 2 * h * h + 2 * h * kvd
    ffn = 2 * h * f
    kind = model.attention
    if kind == "self":
        blocks = model.depth * (attn + ffn)
    elif kind == "cross":
        blocks = model.depth * (attn + 2 * h * h + ffn)
    else:
        blocks = model.depth * (attn + ffn) + model.single_depth * (h * (3 * h + f) + (h + f) * h)
    pt, ph, pw = model.patch
    patch_in = model.in_channels * pt * ph * pw
    return int(blocks + 2 * patch_in * h)


def context_flops_per_sample(model: ModelSection) -> int:
    """FLOPs of the cross-attention keys and values over the text tokens (and the CLIP image
    tokens, Wan2.1 I2V), per sample and step: every rank computes them whole (not sharded)."""
    if model.attention != "cross":
        return 0
    kvd = model.num_kv_heads * model.head_dim
    return int(2 * model.depth * (model.text_len + image_tokens(model)[1]) * 2 * model.hidden * kvd)


def estimate(
    model: ModelSection,
    workload: WorkloadSection,
    layout: Layout,
    sequence: SequenceSection,
    heads: HeadsSection,
    cluster: ClusterSpec,
    shard_degree: int = 1,
    parts: Optional[dict[str, int]] = None,
) -> Estimates:
    """The DiT's estimates (no pipeline, experts or prediction yet). ``shard_degree``: ranks one copy of the DiT's parameters is spread over (FSDP2,
    PlacementSection); 1 = every rank holds them all. ``parts``: :func:`parameter_parts` of
    ``model`` when the caller has them (counted once for every layout of a job)."""
    b = DTYPE_BYTES[workload.dtype]
    U, R = layout.ulysses, layout.ring
    # Samples a rank pushes through the DiT per step: batch/dp, doubled by CFG unless cfg=2 splits it.
    branches = 2 if workload.cfg_enabled and layout.cfg == 1 else 1
    samples = workload.batch // layout.dp * branches
    hd = model.head_dim
    tokens = sequence.tokens_per_rank  # image/video tokens per rank before attention
    text = sequence.text_len  # text cut with the image's (plan.sequence; contract/families sequence_split)
    text_per_rank = -(-text // (R * U)) if text else 0
    t_rank = tokens + text_per_rank
    padded = sequence.padded_len + (text_per_rank * R * U)
    q_heads = max(heads.q_heads_per_rank)
    kv_heads_total = model.num_kv_heads
    kv_local = (
        q_heads if heads.kv_mode == "follow"
        else kv_heads_total // U if heads.kv_mode == "split" else 1
    )
    # Ulysses all-to-all: q, k, v in and o out, each rank keeps 1/U of its chunk.
    qo = 2 * samples * t_rank * model.num_heads * hd * b
    kv = 2 * samples * t_rank * kv_heads_total * hd * b
    a2a = int((qo + kv) * (U - 1) / U) if U > 1 else 0
    # Ring: after the all-to-all a rank holds padded/R tokens of its heads; K and V chunks go
    # around the ring R - 1 times.
    ring_chunk = 2 * samples * (padded // R) * kv_local * hd * b
    ring_bytes = int(ring_chunk * (R - 1)) if R > 1 else 0
    parts = parts if parts is not None else parameter_parts(model)
    params = parts["blocks"] + parts["root"]
    # model.quant: the blocks' weights at one byte each plus a scale per output row (about
    # blocks / hidden rows); the root (embeddings, head) keeps the workload dtype
    quant = getattr(model, "quant", "none") or "none"
    block_bytes = parts["blocks"] * block_weight_bytes(quant, b)
    if quant != "none":
        block_bytes += parts["blocks"] // max(model.hidden, 1) * SCALE_BYTES
    full_bytes = int(block_bytes + parts["root"] * b)
    # Sharded (FSDP2, one unit per block): 1/n of every unit stays, and while a block runs it is
    # gathered whole, the next one prefetched, the root unit (embeddings, head) too.
    sharded = -(-params // shard_degree) * b if shard_degree > 1 else full_bytes
    gathered = (parts["root"] + 2 * parts["largest_block"]) * b if shard_degree > 1 else 0
    param_bytes = sharded + gathered
    # each forward gathers every unit once: a rank receives (n-1)/n of the parameters
    gather_bytes = int(full_bytes * (shard_degree - 1) / shard_degree) if shard_degree > 1 else 0
    # Inference activations: one block live at a time: residual, norm, qkv, attention out,
    # FFN hidden; plus the attention working set after the all-to-all (+ ring buffers).
    act = samples * t_rank * (6 * model.hidden + model.ffn_dim) * b
    attn_ws = samples * (padded // R) * (q_heads * 2 + kv_local * 2) * hd * b
    ring_buf = 2 * ring_chunk if R > 1 else 0
    context_len = model.text_len + image_tokens(model)[1]
    cross_ctx = samples * context_len * model.hidden * 2 * b if model.attention == "cross" and not text else 0
    act_bytes = int(act + attn_ws + ring_buf + cross_ctx)
    total = param_bytes + act_bytes + RESERVED_BYTES
    # Compute: 2 * (a token's parameters) per token for the linears + 4 * S^2 * hidden per
    # attention layer, sharded; the text's cross-attention keys and values on every rank.
    layers = model.depth + model.single_depth
    seq_group = sequence.seq_len + text
    token_params = token_parameter_count(model)
    context_flops = context_flops_per_sample(model) if not text else 0  # cut text: in the sequence's GEMMs
    flops_sample = 2 * token_params * seq_group + 4 * seq_group * seq_group * model.hidden * layers
    flops_step_rank = flops_sample * samples / (R * U) + context_flops * samples
    tflops = float(cluster.gpu.bf16_tflops)
    gpn = int(cluster.gpus_per_node)
    intra = float(cluster.intra_node.gb_per_s) * 1e9
    inter_per_gpu = float(cluster.inter_node.gb_per_s) * 1e9 / gpn
    # Ulysses groups are contiguous ranks: inside a node when U divides GPUs per node. Ring
    # groups stride by U ranks: they leave the node when ring x U > GPUs per node.
    a2a_bw = intra if gpn % U == 0 else min(intra, inter_per_gpu)
    ring_bw = intra if R * U <= gpn and gpn % (R * U) == 0 else min(intra, inter_per_gpu)
    # the shard group: the sequence group (contiguous R x U ranks) or the world
    gather_bw = intra if shard_degree <= gpn and gpn % shard_degree == 0 else min(intra, inter_per_gpu)
    return Estimates(
        compute=ComputeEstimate(
            dtype_bytes=b, samples_per_rank=samples, tokens_per_rank=tokens, text_tokens_per_rank=text_per_rank,
            attention_calls_per_step=layers, parameters=params, token_parameters=token_params,
            context_flops_per_sample=context_flops, flops_per_step_per_rank=flops_step_rank,
            compute_s_per_step_ideal=round(flops_step_rank / (tflops * 1e12), 6)),
        communication=CommunicationEstimate(
            all_to_all_bytes_per_rank=a2a, ring_bytes_per_rank=ring_bytes,
            comm_bytes_per_rank_per_step=(a2a + ring_bytes) * layers,
            all_to_all_gb_per_s=a2a_bw / 1e9, ring_gb_per_s=ring_bw / 1e9,
            all_to_all_s_per_step_ideal=round(a2a * layers / a2a_bw, 6),
            ring_s_per_step_ideal=round(ring_bytes * layers / ring_bw, 6)),
        weights=WeightsEstimate(
            parameter_bytes_full=full_bytes, weight_quant=quant, shard_degree=shard_degree,
            parameter_bytes_sharded=sharded, parameter_bytes_gathered=gathered,
            weight_gather_bytes_per_rank_per_step=gather_bytes, weight_gather_gb_per_s=gather_bw / 1e9,
            weight_gather_s_per_step_ideal=round(gather_bytes / gather_bw, 6)),
        memory=memory_totals(MemoryEstimate(
            parameter_bytes_per_gpu=param_bytes, activation_bytes_per_gpu=act_bytes,
            reserved_bytes_per_gpu=RESERVED_BYTES, memory_bytes_per_gpu=total, memory_gib_per_gpu=0.0,
            gpu_memory_gib=float(cluster.gpu.memory_gib), memory_fraction=0.0, fits=False), total),
    )


def memory_totals(memory: MemoryEstimate, total: int) -> MemoryEstimate:
    """``memory`` with the busiest rank's total set to ``total`` bytes, and its GiB, fraction of the
    GPU and fit (at most 90% of the GPU's memory) to match."""
    gpu = memory.gpu_memory_gib * GIB
    return replace(memory, memory_bytes_per_gpu=total, memory_gib_per_gpu=round(total / GIB, 3),
                   memory_fraction=round(total / gpu, 4), fits=total <= 0.9 * gpu)
