"""Attention on the whole tensor: the blocks that mix every row (:func:`attention_types`) run
unchanged on the gathered bands, each rank keeping its own rows of the output (:class:`GatherRows`)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from sporch.runtime.parallel import head_offsets  # the start of each part, given the sizes

from sporch.runtime.pipelines.vae_parallel.bands import _all_gather, gather_rows

__all__ = ["attention_types", "GatherRows"]


def attention_types() -> tuple[type, ...]:
    """The blocks :class:`GatherRows` runs on the whole tensor: diffusers' ``Attention`` (the
    ``AutoencoderKL`` mid block, on a [B, C, H, W] tensor), ``WanAttentionBlock`` (the Wan2.1
    decoder) and its copy ``QwenImageAttentionBlock``, and ``HunyuanVideoMidBlock3D`` whole (its
    attention flattens frames x rows x columns into one token axis under a frame-causal mask built
    from the tensor's shape: a band's tokens are not a band of the rows)."""
    from diffusers.models.attention_processor import Attention
    from diffusers.models.autoencoders.autoencoder_kl_hunyuan_video import HunyuanVideoMidBlock3D
    from diffusers.models.autoencoders.autoencoder_kl_qwenimage import QwenImageAttentionBlock
    from diffusers.models.autoencoders.autoencoder_kl_wan import WanAttentionBlock

    return (Attention, WanAttentionBlock, QwenImageAttentionBlock, HunyuanVideoMidBlock3D)


class GatherRows(nn.Module):
    """Runs ``inner`` on the whole tensor: the bands are gathered along dim -2 (every rank
    gets all of it), ``inner`` runs unchanged, and this rank's rows of its output are
    returned. Further arguments go to ``inner`` as given (they must not be row bands)."""

    def __init__(self, inner: nn.Module, group: dist.ProcessGroup | None) -> None:
        super().__init__()
        self.inner = inner
        self.group = group

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        if hidden_states.dim() < 4:
            raise ValueError(f"{type(self.inner).__name__} got a {hidden_states.dim()}-D tensor: its dim -2 is not "
                             "the image rows, so the parallel decode cannot gather it by rows")
        mine = torch.tensor([hidden_states.shape[-2]], dtype=torch.int64, device=hidden_states.device)
        counts = [int(c.item()) for c in _all_gather(mine, self.group)]
        whole = gather_rows(hidden_states, self.group, counts)
        out = self.inner(whole, *args, **kwargs)
        rank = dist.get_rank(self.group)
        start = head_offsets(counts)[rank]
        return out[..., start:start + counts[rank], :]
