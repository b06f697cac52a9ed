"""The row-parallel VAE decode (runtime/pipelines/vae_parallel/) against one process's decode.

Tiny real diffusers VAEs with seeded random weights, built like runtime/pipelines/tiny.py
builds them: Wan2.1 (``AutoencoderKLWan``: causal 3-D convs with the per-frame cache, RMS
norms, the mid-block attention, 3 spatial upsamplings of which 2 temporal: 3 latent frames ->
9 frames, 8x the rows) and Flux.1 (``AutoencoderKL``: GroupNorm, the mid-block ``Attention``,
3 upsamplings, 8x the rows). The latent is decoded on 2 and 4 gloo ranks, evenly and unevenly
split (10 latent rows over 4 ranks: 3, 3, 2, 2), gathered, and compared with ``vae.decode`` of
the whole latent in one process. Two controls show the comparison can fail: each band decoded
on its own with the plain VAE, and the parallel VAE with its halos taken out again.
"""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("diffusers")

from torch import nn  # noqa: E402

from sporch.runtime.models.tiny_parts import randomize  # noqa: E402
from sporch.runtime.pipelines.vae_parallel.bands import split_rows  # noqa: E402
from sporch.runtime.pipelines.vae_parallel.decode import decode_rows  # noqa: E402
from sporch.runtime.pipelines.vae_parallel.gathered_attention import GatherRows  # noqa: E402
from sporch.runtime.pipelines.vae_parallel.group_norm import DistGroupNorm  # noqa: E402
from sporch.runtime.pipelines.vae_parallel.halo_conv import HaloConv  # noqa: E402
from sporch.runtime.pipelines.vae_parallel.surgery import parallelize_decoder  # noqa: E402
from sporch.runtime.testing import run_distributed  # noqa: E402

# Tolerance, float32. Every rank computes, for its rows, the same sums over the same inputs and
# weights as the single process; what differs is only the order float32 additions are done in
# (convolution kernels tiled differently for a band than for the whole image, group-norm
# statistics summed in pieces in float64). Measured: at most 5e-6 on outputs of order 1, the
# size of the single float32 decode's own distance from a float64 decode (3e-6 to 9e-6; the
# test also checks that the parallel decode is no further from the float64 decode than twice
# the single one). A missing halo, a per-band group norm or per-band attention moves the
# output by > 1e-2 (the controls below: measured 2 to 3.5), five orders of magnitude above TOL.
TOL = 1e-5
CONTROL_MIN = 1e-2


# --------------------------------------------------------------------------------------
# tiny VAEs and the work each rank does (module level: the spawned ranks import them)
# --------------------------------------------------------------------------------------

def tiny_vae(family: str) -> nn.Module:
    """Seeded random tiny VAE; the same weights in every process."""
    from diffusers import AutoencoderKL, AutoencoderKLWan

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        if family == "wan":
            vae = AutoencoderKLWan(base_dim=8, z_dim=4, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                                   temperal_downsample=[False, True, True], scale_factor_temporal=4,
                                   scale_factor_spatial=8)
        else:
            blocks = [8, 16, 32, 64]
            vae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 4,
                                up_block_types=["UpDecoderBlock2D"] * 4, block_out_channels=blocks,
                                layers_per_block=1, latent_channels=4, norm_num_groups=4, sample_size=32,
                                use_quant_conv=False, use_post_quant_conv=family == "sd")
    return randomize(vae, 1)


def latent(family: str, rows: int) -> torch.Tensor:
    shape = (1, 4, 3, rows, 8) if family == "wan" else (1, 4, rows, 8)
    return torch.randn(shape, generator=torch.Generator().manual_seed(2))


def plain_decode(vae: nn.Module, z: torch.Tensor) -> torch.Tensor:
    return vae.decode(z, return_dict=False)[0]


def without_halos(pvae: nn.Module) -> nn.Module:
    """``pvae`` with every HaloConv replaced by the convolution it wraps (in place)."""
    for name, module in list(pvae.named_modules()):
        if isinstance(module, HaloConv):
            parent, _, child = name.rpartition(".")
            setattr(pvae.get_submodule(parent), child, module.inner)
    return pvae


@torch.no_grad()
def parallel_case(family: str, rows: int) -> dict:
    """On every rank: the parallel decode; rank 0 also: the single decode and the controls."""
    import torch.distributed as dist

    vae = tiny_vae(family)
    z = latent(family, rows)
    pvae = parallelize_decoder(vae, None)
    out = decode_rows(pvae, z, None, plain_decode)
    no_halo = decode_rows(without_halos(pvae), z, None, plain_decode)
    result = {"rank": dist.get_rank(), "out": out}
    if dist.get_rank() == 0:
        whole = plain_decode(vae, z)
        counts = split_rows(rows, dist.get_world_size())
        bands = torch.split(z, counts, dim=-2)
        separate = torch.cat([plain_decode(vae, b) for b in bands], dim=-2)
        exact = plain_decode(copy.deepcopy(vae).double(), z.double())
        result.update(whole=whole, exact=exact, no_halo_err=(no_halo - whole).abs().max().item(),
                      separate_err=(separate - whole).abs().max().item())
    return result


def band(x: torch.Tensor, group=None) -> torch.Tensor:
    """This rank's rows of ``x`` (dim -2), split as decode_rows splits them."""
    import torch.distributed as dist

    counts = split_rows(x.shape[-2], dist.get_world_size(group))
    return torch.split(x, counts, dim=-2)[dist.get_rank(group)]


def whole_from_bands(x: torch.Tensor, group=None) -> torch.Tensor:
    from sporch.runtime.pipelines.vae_parallel.bands import gather_rows

    return gather_rows(x, group)


@torch.no_grad()
def layers_case() -> dict[str, float]:
    """Single layers on uneven bands (14 or 11 rows over 3 ranks), against the layer on the
    whole tensor: a 5x5 Conv2d (2 halo rows), a 3x3x3 Conv3d, Wan's causal conv with and
    without its frame cache, GroupNorm (also on data far from zero mean, against float64),
    and a 5x5 conv over the subgroup of ranks 1 and 2 (group ranks differ from global ranks)."""
    import torch.distributed as dist
    from diffusers.models.autoencoders.autoencoder_kl_wan import WanCausalConv3d

    g = torch.Generator().manual_seed(3)
    errs: dict[str, float] = {}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        conv2 = nn.Conv2d(4, 6, 5, padding=2)
        conv3 = nn.Conv3d(4, 6, 3, padding=1)
        causal = WanCausalConv3d(4, 6, 3, padding=1)
        norm = randomize(nn.GroupNorm(2, 4, eps=1e-6), 4)
    x2 = torch.randn(2, 4, 14, 5, generator=g)
    x3 = torch.randn(1, 4, 3, 11, 5, generator=g)
    cache = torch.randn(1, 4, 2, 11, 5, generator=g)
    xn = 2.0 + 0.5 * torch.randn(2, 4, 3, 11, 5, generator=g)
    xo = 5.0 + 0.1 * torch.randn(2, 4, 3, 11, 5, generator=g)   # mean 50 standard deviations from 0
    cases = {
        "conv2d_5x5": (conv2(x2), HaloConv(conv2, None)(band(x2))),
        "conv3d": (conv3(x3), HaloConv(conv3, None)(band(x3))),
        "wan_causal_cache": (causal(x3, cache), HaloConv(causal, None)(band(x3), band(cache))),
        "wan_causal_no_cache": (causal(x3), HaloConv(causal, None)(band(x3))),
    }
    for name, (want, got) in cases.items():
        errs[name] = (whole_from_bands(got) - want).abs().max().item()
    # GroupNorm: against float64, beside torch's own float32 GroupNorm (which computes
    # x * scale + bias, a cancellation: a few ulp of the output, more far from zero mean)
    norm64 = copy.deepcopy(norm).double()
    for name, x in (("group_norm", xn), ("group_norm_offset", xo)):
        exact = norm64(x.double())
        got = whole_from_bands(DistGroupNorm(norm, None)(band(x)))
        errs[f"{name}_torch_vs_f64"] = (norm(x).double() - exact).abs().max().item()
        errs[f"{name}_vs_f64"] = (got.double() - exact).abs().max().item()
    sub = dist.new_group([1, 2])
    if dist.get_rank() in (1, 2):
        got = HaloConv(conv2, sub)(band(x2, sub))
        errs["conv2d_subgroup"] = (whole_from_bands(got, sub) - conv2(x2)).abs().max().item()
    return errs


# --------------------------------------------------------------------------------------
# the decode on 2 and 4 ranks
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("family,ranks,rows", [
    ("wan", 2, 10),     # even split, 3 frames -> 9
    ("wan", 4, 10),     # uneven: 3, 3, 2, 2 latent rows
    ("flux", 2, 10),
    ("flux", 4, 7),     # uneven: 2, 2, 2, 1 (a band of one latent row)
    ("sd", 4, 10),      # AutoencoderKL with a post_quant_conv (1x1, left alone)
])
def test_parallel_decode_matches_single(family: str, ranks: int, rows: int) -> None:
    results = run_distributed(parallel_case, ranks, family, rows, timeout=240)
    whole = results[0]["whole"]
    expect_shape = (1, 3, 9, rows * 8, 64) if family == "wan" else (1, 3, rows * 8, 64)
    assert tuple(whole.shape) == expect_shape
    errs = [(r["out"] - whole).abs().max().item() for r in results]
    # context for the tolerance: both float32 decodes against the float64 decode
    exact = results[0]["exact"]
    single_vs_exact = (whole.double() - exact).abs().max().item()
    parallel_vs_exact = (results[0]["out"].double() - exact).abs().max().item()
    print(f"\n{family} on {ranks} ranks, {rows} latent rows: parallel vs single, max abs err per rank "
          f"{[f'{e:.3g}' for e in errs]}; vs float64: single {single_vs_exact:.3g}, parallel {parallel_vs_exact:.3g}; "
          f"controls: no halo {results[0]['no_halo_err']:.3g}, bands decoded separately "
          f"{results[0]['separate_err']:.3g}")
    assert max(errs) <= TOL
    assert parallel_vs_exact <= 2 * single_vs_exact   # as close to the exact result as the single decode
    # the controls: the same comparison fails when the bands do not see their neighbours
    assert results[0]["no_halo_err"] > CONTROL_MIN
    assert results[0]["separate_err"] > CONTROL_MIN


# --------------------------------------------------------------------------------------
# units
# --------------------------------------------------------------------------------------

def test_layers_on_bands() -> None:
    """3 ranks, uneven bands; float32 rounding only (GroupNorm: the statistics in float64)."""
    results = run_distributed(layers_case, 3, timeout=120)
    print("\nlayers, max abs err per rank:", results)
    for errs in results:
        for name in ("group_norm", "group_norm_offset"):
            torch_own = errs.pop(f"{name}_torch_vs_f64")
            assert errs.pop(f"{name}_vs_f64") <= max(1e-6, torch_own)   # no worse than torch's GroupNorm
        assert max(errs.values()) <= 1e-6, errs   # the convolutions: the same sums, measured 0
    assert "conv2d_subgroup" in results[1] and "conv2d_subgroup" in results[2]


def test_split_rows() -> None:
    assert split_rows(10, 4) == [3, 3, 2, 2]
    assert split_rows(7, 4) == [2, 2, 2, 1]
    assert split_rows(8, 2) == [4, 4]
    assert split_rows(4, 4) == [1, 1, 1, 1]
    assert sum(split_rows(37, 5)) == 37


def test_split_rows_refuses_an_empty_rank() -> None:
    with pytest.raises(ValueError, match="fewer than the 4 ranks"):
        split_rows(3, 4)


def test_surgery_replaces_what_it_must() -> None:
    wan = parallelize_decoder(tiny_vae("wan"), None)
    kinds = {type(m).__name__ for m in wan.decoder.modules()}
    assert {"HaloConv", "GatherRows"} <= kinds
    assert not any(isinstance(m, GatherRows) for m in wan.encoder.modules())
    assert type(wan.post_quant_conv).__name__ == "WanCausalConv3d"   # 1x1x1: nothing to do
    # the time_conv of the temporal upsampling is (3, 1, 1): per row, left alone
    assert all(type(m.time_conv).__name__ == "WanCausalConv3d"
               for m in wan.decoder.modules() if hasattr(m, "time_conv"))
    flux_vae = tiny_vae("flux")
    flux = parallelize_decoder(flux_vae, None)
    wrapped = {name for name, m in flux.decoder.named_modules() if isinstance(m, (DistGroupNorm, GatherRows))}
    norms = [name for name, m in flux.decoder.named_modules() if isinstance(m, nn.GroupNorm)]
    assert len(norms) > 5   # every GroupNorm is wrapped, or inside the attention block (whole tensor)
    assert all(any(name.startswith(w + ".") for w in wrapped) for name in norms)
    # the copy shares the weights and leaves the original alone
    assert flux.decoder.conv_in.inner.weight is flux_vae.decoder.conv_in.weight
    assert isinstance(flux_vae.decoder.conv_in, nn.Conv2d)


def test_surgery_refuses_a_strided_conv() -> None:
    vae = tiny_vae("flux")
    vae.decoder.conv_in.stride = (2, 1)
    with pytest.raises(ValueError, match=r"decoder\.conv_in: .*stride 2 along the height"):
        parallelize_decoder(vae, None)


def test_surgery_refuses_a_transposed_conv() -> None:
    vae = tiny_vae("flux")
    vae.decoder.conv_in = nn.ConvTranspose2d(4, 64, 3, padding=1)
    with pytest.raises(ValueError, match=r"decoder\.conv_in is a ConvTranspose2d"):
        parallelize_decoder(vae, None)
