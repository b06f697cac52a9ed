"""The workload's dtype names (``plan.workload.dtype``) as torch dtypes."""

from __future__ import annotations

import torch

#: ``workload.dtype`` -> torch dtype
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_dtype(name: str | torch.dtype) -> torch.dtype:
    """A dtype name of ``workload.dtype`` (or a torch dtype, returned as it is) as a torch dtype."""
    if isinstance(name, torch.dtype):
        return name
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; use one of {', '.join(DTYPES)}") from None
