"""The text encoders sharded over a sequence group (``pipeline.text_encoder: sharded``), and what a
rank holds of them at its busiest.

Placement (``plan.placement.text_encoder``; runtime/pipelines/prompts.py encodes):

* ``leader``: one rank per dp replica encodes (cfg rank 0, sequence rank 0: the *leader*) with
  the pipeline's own ``encode_prompt`` and frees the encoders; the embeddings go to the rest of
  the replica, never to other replicas.
* ``cpu``: the same, but the leader runs the encoders on its CPU (host memory; no GPU memory).
* ``sharded``: every rank of each sequence group loads the encoders into host memory, shards
  them with FSDP2 over its sequence group (:func:`shard_text_encoders`: one unit per layer,
  embedding table and outside linear, the next layer prefetched, each resharded after its
  forward; only the shard goes to the GPU) and encodes with the group: every rank ends with the
  same embeddings, no broadcast needed.
"""

from __future__ import annotations

from typing import Sequence

import torch

from sporch.runtime.models.shard_weights import ParameterPeak
from sporch.runtime.parallel import ParallelContext


def encoder_units(encoder: torch.nn.Module) -> tuple[list[list[torch.nn.Module]], list[list[torch.nn.Module]]]:
    """The FSDP2 units of a transformers text encoder: (the layers of each outermost non-empty
    module list: T5's ``block``, CLIP's ``layers``, Llama's ``layers``, Qwen2.5-VL's language
    ``layers`` and its vision ``blocks``; the other units: every embedding table and linear outside
    those layers, modules sharing a weight in one unit: T5's ``shared`` and ``embed_tokens``, an LM
    head tied to its token table). The rest (norms, small convolutions) stays with the root."""
    lists: list[list[torch.nn.Module]] = []
    inside: set[int] = set()
    for m in encoder.modules():  # parents first: a list nested in a layer is already inside
        if isinstance(m, torch.nn.ModuleList) and len(m) and id(m) not in inside:
            lists.append(list(m))
            inside.update(id(sub) for layer in m for sub in layer.modules())
    tables: dict[int, list[torch.nn.Module]] = {}
    for m in encoder.modules():
        if isinstance(m, (torch.nn.Embedding, torch.nn.Linear)) and id(m) not in inside:
            tables.setdefault(id(m.weight), []).append(m)
    return lists, list(tables.values())


def shard_encoder(encoder: torch.nn.Module, mesh) -> torch.nn.Module:
    """FSDP2 on a transformers text encoder, in place: every unit of :func:`encoder_units` (each
    layer, each table or linear outside the layers), then the root; each layer gathers the next
    layer of its list while it runs, and every unit is resharded after its forward, so a rank
    holds 1/n of the encoder plus the units running. A unit never called (Qwen2.5-VL's vision
    tower: the text-only prompt never reaches it) is never gathered. The gathered weights are the
    whole weights, so the encoding is the unsharded encoder's to float rounding (a matmul on the
    gathered copy may sum in another order: SD3's tiny CLIP projections 1.2e-7, the rest 0)."""
    from torch.distributed.fsdp import fully_shard

    lists, others = encoder_units(encoder)
    if not lists:
        raise ValueError(f"{type(encoder).__name__} has no list of layers to shard")
    for unit in [group if len(group) > 1 else group[0] for group in others] + [m for layers in lists for m in layers]:
        fully_shard(unit, mesh=mesh, reshard_after_forward=True)
    for group in (g for g in others if len(g) > 1):
        # FSDP2 reshards a unit of several modules once all of them have run, and the root's end
        # finishes it when one never runs (T5EncoderModel calls ``encoder.embed_tokens``, never
        # ``shared``): the table would stay whole through every layer. Each resharded after its
        # own forward instead (FSDPModule.reshard; a later one of the group gathers it again).
        for m in group:
            m.register_forward_hook(lambda module, args, output: module.reshard())
    fully_shard(encoder, mesh=mesh, reshard_after_forward=True)
    for layers in lists:
        for layer, following in zip(layers, layers[1:]):
            layer.set_modules_to_forward_prefetch([following])
    _keep_output_capture(encoder)
    return encoder


def _keep_output_capture(encoder: torch.nn.Module) -> None:
    """``output_hidden_states`` (SD3's CLIPs, HunyuanVideo's Llama, Qwen-Image's Qwen2.5-VL take
    hidden states) still recorded after :func:`shard_encoder`: transformers 5 finds what a model
    records by the name of its class (``_CAN_RECORD_REGISTRY``, filled as each model is built), and
    ``fully_shard`` gives the root a new class (``FSDP<Class>``); each sharded model is registered
    under its new class as transformers registers a model it builds. transformers before 5 reads
    the model's own ``_can_record_outputs``: nothing to do."""
    try:
        from transformers.modeling_utils import PreTrainedModel
        from transformers.utils.output_capturing import _CAN_RECORD_REGISTRY
    except ImportError:
        return
    for m in encoder.modules():
        if isinstance(m, PreTrainedModel):
            _CAN_RECORD_REGISTRY[m] = m._can_record_outputs


def encoder_peak(encoders: Sequence[torch.nn.Module]) -> ParameterPeak:
    """The most bytes of ``encoders``' parameters this rank holds at the start and end of any of their
    units' forwards (:func:`encoder_units`; after FSDP2's own pre-forward hook, so a gathered unit
    and the prefetched next layer count whole) inside ``with encoder_peak(encoders) as peak:``
    (``peak.bytes``): what a sharded encoder holds at its busiest, against the planner's
    :func:`~sporch.orchestrator.plan.pipeline_estimate.sharded_encoder_bytes`."""
    units = []
    for encoder in encoders:
        lists, others = encoder_units(encoder)
        units += [m for layers in lists for m in layers] + [m for group in others for m in group]
    return ParameterPeak(encoders, units)


def shard_text_encoders(pipe, ctx: ParallelContext, device: torch.device) -> list[torch.nn.Module]:
    """:func:`shard_encoder` over ``ctx``'s sequence group on every text encoder of the diffusers
    pipeline ``pipe`` (its ``text_encoder*`` components: Wan's umT5, Flux's CLIP and T5, SD3's two
    CLIPs and T5, HunyuanVideo's Llama and CLIP, Qwen-Image's Qwen2.5-VL, ...), each rank's shards
    moved to ``device``: the encoders, sharded."""
    from torch.distributed.device_mesh import DeviceMesh

    mesh = DeviceMesh.from_group(ctx.sequence_group, device.type)
    return [shard_encoder(part, mesh) for name, part in pipe.components.items()
            if name.startswith("text_encoder") and isinstance(part, torch.nn.Module)]
