"""Rules both sides of the Plan apply, written once (standard library only).

The planner, the config loaders, the submission backends and the runtime import these instead
of keeping their own copies: the dimension names, the head split, the padded sequence length,
the attention kinds, the host-key policies, the exit codes, the Slurm time format and what a
number of seconds may be.
"""

from __future__ import annotations

import enum
import math
import re
from typing import Optional


class Dim(str, enum.Enum):
    """The four parallel dimensions, outermost first (the rank order of docs/plan.md)."""

    DP = "dp"
    CFG = "cfg"
    RING = "ring"
    ULYSSES = "ulysses"


#: Dimension names, outermost first.
DIMS: tuple[str, ...] = tuple(d.value for d in Dim)
#: Group names: the four dimensions plus ``sequence`` (ring x ulysses).
GROUP_DIMS: tuple[str, ...] = DIMS + ("sequence",)

#: Longest job or cluster name: a job's becomes a folder name (runs/<name>/...) and the Slurm job name.
MAX_NAME = 100

#: Most ranks one job may have: the Plan lists every rank, so a plan of more would be huge and slow
#: to make (a cluster descriptor may be bigger; a job then sets resources.nodes).
MAX_WORLD = 16384

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
#: ``login.host_key_policy``: what to do with a login host whose key is not known.
HOST_KEY_POLICIES: tuple[str, ...] = ("reject", "accept-new")

# -- exit codes ------------------------------------------------------------------------------
#: A rank (and ``sporch run``/``wait``) that finished its work.
EXIT_OK = 0
#: The work failed.
EXIT_FAILED = 1
#: Bad input (a SporchError).
EXIT_BAD_INPUT = 2
#: A rank that stopped on USR2 after saving progress, the job being requeued; ``sporch wait``
#: uses the same code for a job stopped from outside (CANCELLED, TIMEOUT, PREEMPTED).
EXIT_REQUEUED = 3
EXIT_STOPPED = 3


# -- heads and sequence ---------------------------------------------------------------------
def head_split(num_heads: int, parts: int) -> list[int]:
    """Query heads per Ulysses rank: the first ``num_heads % parts`` ranks get one extra."""
    if num_heads < 1 or parts < 1:
        raise ValueError(f"need num_heads >= 1 and parts >= 1, got {num_heads}, {parts}")
    base, extra = divmod(num_heads, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def kv_mode(num_heads: int, num_kv_heads: int, ulysses: int) -> Optional[str]:
    """"follow" (MHA), "split" (kv % U == 0), "replicate" (U % kv == 0), or None (refuse)."""
    if num_kv_heads == num_heads:
        return "follow"
    if num_kv_heads % ulysses == 0:
        return "split"
    if ulysses % num_kv_heads == 0:
        return "replicate"
    return None


def padded_length(seq_len: int, degree: int) -> int:
    """``seq_len`` rounded up to a multiple of the sequence degree (ring x ulysses)."""
    return -(-seq_len // degree) * degree


# -- seconds ---------------------------------------------------------------------------------
def seconds(value, minimum: float = 0.0, inclusive: bool = False) -> float:
    """``value`` as a finite number of seconds above ``minimum`` (at least it with
    ``inclusive``); ValueError naming the bound otherwise (nan, inf, words, too small)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        x = math.nan
    if not math.isfinite(x) or x < minimum or (x == minimum and not inclusive):
        bound = f">= {minimum:g}" if inclusive else f"> {minimum:g}"
        raise ValueError(f"must be a finite number of seconds {bound}, got {value!r}")
    return x


# -- Slurm time ------------------------------------------------------------------------------
#: ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``.
TIME_RE = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d{1,2}))?(?::(\d{1,2}))?$")
TIME_FORMS = "MM, HH:MM:SS or D-HH:MM:SS"


def time_seconds(text: str) -> Optional[int]:
    """Seconds of a Slurm time limit, or None when ``text`` is not one."""
    m = TIME_RE.match(str(text).strip())
    if not m:
        return None
    days, a, b, c = m.groups()
    if days is not None:  # D-HH[:MM[:SS]]
        return int(days) * 86400 + int(a) * 3600 + int(b or 0) * 60 + int(c or 0)
    if c is not None:  # HH:MM:SS
        return int(a) * 3600 + int(b) * 60 + int(c)
    if b is not None:  # MM:SS
        return int(a) * 60 + int(b)
    return int(a) * 60  # MM


def is_valid_time(text: str) -> bool:
    return time_seconds(text) is not None


def time_to_minutes(text: str) -> int:
    """Whole minutes, rounded up (submitit's ``timeout_min``); ValueError when not a Slurm time."""
    secs = time_seconds(text)
    if secs is None:
        raise ValueError(f"time {text!r} is not a Slurm time ({TIME_FORMS})")
    return max(1, math.ceil(secs / 60))
