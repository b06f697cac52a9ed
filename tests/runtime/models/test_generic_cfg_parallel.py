"""``keep_half`` (runtime/models/cfg_parallel.py): each cfg rank's rows of a call holding
both CFG passes, and the calls it refuses (the gather and the hooks run in 4-rank worlds:
tests/runtime/models/test_generic.py's cfg2 x U2 verify, tests/runtime/pipelines/test_generate_generic.py's
cfg2 x U2 generate)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from sporch.runtime.models.cfg_parallel import keep_half

BATCHED = ("hidden_states", "encoder_hidden_states", "timestep", "encoder_attention_mask")


def _call(batch: int = 2) -> dict:
    return dict(hidden_states=torch.arange(batch * 3.0).reshape(batch, 3), encoder_hidden_states=torch.arange(batch * 1.0),
                timestep=torch.tensor([5.0] * batch), encoder_attention_mask=None, num_frames=9,
                rope=(torch.zeros(2, 4), torch.zeros(2, 4)))


@pytest.mark.parametrize("rank", [0, 1])
def test_each_cfg_rank_keeps_its_half_of_the_batched_arguments(rank):
    call = _call()
    mine = keep_half(call, BATCHED, SimpleNamespace(cfg_rank=rank))
    assert torch.equal(mine["hidden_states"], call["hidden_states"][rank:rank + 1])
    assert torch.equal(mine["encoder_hidden_states"], call["encoder_hidden_states"][rank:rank + 1])
    assert mine["timestep"].shape == (1,) and mine["encoder_attention_mask"] is None
    assert mine["num_frames"] == 9 and mine["rope"] is call["rope"]  # not per sample: whole


@pytest.mark.parametrize("call, needle", [
    (_call(batch=1), "got batch 1"),
    ({**_call(), "timestep": torch.tensor([5.0])}, "timestep has 1 rows, not the batch's 2"),
])
def test_a_call_that_is_not_two_cfg_halves_is_refused(call, needle):
    with pytest.raises(ValueError, match=needle):
        keep_half(call, BATCHED, SimpleNamespace(cfg_rank=0))


class _Model(torch.nn.Module):
    def forward(self, hidden_states, encoder_hidden_states=None, timestep=None, return_dict=True):
        return hidden_states


@pytest.mark.parametrize("rank", [0, 1])
def test_a_call_passing_the_latents_positionally_is_split_by_name(rank):
    """PixArtSigmaPipeline calls ``transformer(latents, encoder_hidden_states=..., ...)``: CfgParallel's
    pre-hook names the positional arguments by the forward's signature and cuts them like keywords."""
    from sporch.runtime.models.cfg_parallel import CfgParallel

    call = _call()
    hook = CfgParallel(_Model(), SimpleNamespace(cfg=2, cfg_rank=rank), BATCHED)
    args, mine = hook._split(hook.model, (call["hidden_states"], call["encoder_hidden_states"]),
                             {"timestep": call["timestep"], "return_dict": False})
    assert args == ()
    assert torch.equal(mine["hidden_states"], call["hidden_states"][rank:rank + 1])
    assert torch.equal(mine["encoder_hidden_states"], call["encoder_hidden_states"][rank:rank + 1])
    assert mine["timestep"].shape == (1,) and mine["return_dict"] is False
    with pytest.raises(ValueError, match="5 positional arguments; its forward names 4"):
        hook._split(hook.model, (call["hidden_states"],) * 5, {})
