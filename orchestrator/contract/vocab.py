"""The closed sets of words a job file, a cluster file and a Plan may use (stdlib only).
"""

from __future__ import annotations

#: Longest job or cluster name: a job's becomes a folder name (runs/<name>/...) and the Slurm job name.
MAX_NAME = 100

#: ``model.attention``: cross-attention to text (Wan), joint text+image attention (MMDiT), self only (DiT).
ATTENTION_KINDS: tuple[str, ...] = ("cross", "joint", "self")
#: ``workload.kind``.
WORKLOAD_KINDS: tuple[str, ...] = ("inference", "benchmark", "verify", "generate")
#: Output files of a generate workload, and the schedulers it can use (docs/generate.md).
OUTPUT_FORMATS: tuple[str, ...] = ("mp4", "png")
SCHEDULERS: tuple[str, ...] = ("unipc", "euler")
#: ``workload.dtype`` and its size in bytes.
DTYPE_BYTES: dict[str, int] = {"float32": 4, "bfloat16": 2, "float16": 2}
DTYPES: tuple[str, ...] = tuple(DTYPE_BYTES)
#: ``parallel.shard_weights``: where the DiT's parameters are sharded (FSDP2, one unit per block):
#: not at all, over each replica's sequence group (ring x ulysses ranks), or over every rank.
SHARD_WEIGHTS: tuple[str, ...] = ("none", "sequence", "world")
#: ``login.host_key_policy``: what to do with a login host whose key is not known.
HOST_KEY_POLICIES: tuple[str, ...] = ("reject", "accept-new")
