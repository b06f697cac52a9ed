"""A parameter's rows on this rank: the whole tensor, or this rank's dim-0 shard of a DTensor
(FSDP2 shards every parameter on dim 0 the way ``torch.chunk`` splits it: ``ceil(N / n)`` rows
per rank, fewer or none on the last ones). What the checkpoint loader and the seeded
initialiser fill, one parameter at a time, without ever holding the full model."""

from __future__ import annotations

import torch


def local_rows(param: torch.Tensor) -> tuple[torch.Tensor, slice | None]:
    """(the tensor this rank holds, the rows of the full parameter it holds; None = all)."""
    try:
        from torch.distributed.tensor import DTensor, Shard
    except ImportError:  # pragma: no cover - torch without distributed tensors
        return param, None
    if not isinstance(param, DTensor):
        return param, None
    placements = tuple(param.placements)
    if param.device_mesh.ndim != 1 or placements != (Shard(0),):
        raise ValueError(f"a parameter placed as {placements} on a {param.device_mesh.ndim}-D mesh; "
                         "sporch shards parameters on dim 0 of a 1-D mesh only")
    n, r = param.device_mesh.size(), param.device_mesh.get_local_rank()
    rows = param.shape[0]
    chunk = -(-rows // n)
    start = min(r * chunk, rows)
    stop = min(start + chunk, rows)
    local = param.to_local()
    if local.shape[0] != stop - start:
        raise ValueError(f"rank {r} of {n} holds {local.shape[0]} rows of a {rows}-row parameter, "
                         f"expected {stop - start} (torch.chunk split)")
    return local, slice(start, stop)
