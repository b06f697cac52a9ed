"""USP attention (Ulysses all-to-all x ring P2P) for sequence-parallel DiTs.

Public: :func:`usp_attention`, :class:`CommStats`, :func:`usp_min_bytes`,
:func:`available_backends`, :func:`attention_block`, and the Ulysses verbs
:func:`gather_seq_scatter_heads` / :func:`gather_heads_scatter_seq`.
"""

from sporch.runtime.attention.comm_stats import CommStats, usp_min_bytes
from sporch.runtime.attention.kernels import attention_block, available_backends
from sporch.runtime.attention.ulysses import gather_heads_scatter_seq, gather_seq_scatter_heads
from sporch.runtime.attention.usp import usp_attention

__all__ = ["usp_attention", "CommStats", "usp_min_bytes", "available_backends", "attention_block",
           "gather_seq_scatter_heads", "gather_heads_scatter_seq"]
