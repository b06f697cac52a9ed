"""Row bands: the rows of the latent split over the ranks of a group (:func:`split_rows`), and the
bands gathered back into the whole tensor along dim -2 on every rank (:func:`gather_rows`); and the
package's two collective helpers (``_rank_and_size``, ``_all_gather``), private to the package."""

from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = ["split_rows", "gather_rows"]


def split_rows(n_rows: int, n_ranks: int) -> list[int]:
    """Rows per rank, as even as possible, the first ranks taking the remainder:
    ``split_rows(10, 4) == [3, 3, 2, 2]``."""
    if n_ranks < 1:
        raise ValueError(f"cannot split rows over {n_ranks} ranks")
    if n_rows < n_ranks:
        raise ValueError(f"the latent has {n_rows} rows, fewer than the {n_ranks} ranks decoding it, so a rank "
                         f"would get none: decode on at most {n_rows} ranks or a larger latent")
    base, extra = divmod(n_rows, n_ranks)
    return [base + (1 if r < extra else 0) for r in range(n_ranks)]


def _rank_and_size(group: dist.ProcessGroup | None) -> tuple[int, int]:
    return dist.get_rank(group), dist.get_world_size(group)


def _all_gather(x: torch.Tensor, group: dist.ProcessGroup | None) -> list[torch.Tensor]:
    """``dist.all_gather`` of a tensor of the same shape on every rank."""
    x = x.contiguous()
    out = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather(out, x, group=group)
    return out


def gather_rows(x: torch.Tensor, group: dist.ProcessGroup | None, counts: list[int] | None = None) -> torch.Tensor:
    """The whole tensor along dim -2 from every rank's band (bands in rank order), on every
    rank. ``counts``: the rows of every rank, when known; otherwise they are gathered first.
    Bands of different heights are padded to the tallest for the gather and trimmed."""
    if counts is None:
        mine = torch.tensor([x.shape[-2]], dtype=torch.int64, device=x.device)
        counts = [int(c.item()) for c in _all_gather(mine, group)]
    tallest = max(counts)
    padded = x
    if x.shape[-2] < tallest:
        pad = x.new_zeros(*x.shape[:-2], tallest - x.shape[-2], x.shape[-1])
        padded = torch.cat([x, pad], dim=-2)
    bands = _all_gather(padded, group)
    return torch.cat([b[..., :c, :] for b, c in zip(bands, counts)], dim=-2)
