"""No silent non-finite output: a tensor a job produces (latents, decoded frames, verify outputs,
a benchmark's velocity) or loads (a weight) is checked for NaN and inf, and a bad one is a failure
that names where it came from.

A non-finite output is a failed job, never a ``completed`` one: :func:`check_output` raises
:class:`NonFiniteOutput`, naming the stage and this rank (the rank's record and result.json
carry it). A non-finite weight is bad input (:func:`nonfinite_weight`: the loader raises a
CheckpointError naming the tensor and file, and the job ends with exit 2 as for any unusable
checkpoint).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


class NonFiniteOutput(RuntimeError):
    """A job's output holds NaN or inf (one line: the stage, the rank, how many values)."""


def count_nonfinite(t: torch.Tensor) -> int:
    """NaN and inf elements of ``t`` (0 for integer tensors)."""
    if not (t.is_floating_point() or t.is_complex()) or t.numel() == 0:
        return 0
    if t.dtype.itemsize == 1:  # float8: isfinite is not implemented for every float8 type
        t = t.to(torch.float16)
    return int((~torch.isfinite(t)).sum())


def this_rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def check_output(t: torch.Tensor | None, stage: str) -> None:
    """Raise NonFiniteOutput when ``t`` (this rank's part of the stage's output) is not finite."""
    if t is None:
        return
    bad = count_nonfinite(t)
    if bad:
        raise NonFiniteOutput(f"stage {stage} on rank {this_rank()}: {bad} of {t.numel()} output values are NaN "
                              "or inf; the model's numbers overflow or its weights are broken (check the "
                              "checkpoint with `sporch inspect`, model.lora scales, workload.dtype)")


def nonfinite_weight(t: torch.Tensor) -> str | None:
    """Why a loaded weight is unusable (``k of n values are NaN or inf``), or None."""
    bad = count_nonfinite(t)
    return f"{bad} of {t.numel()} values are NaN or inf" if bad else None
