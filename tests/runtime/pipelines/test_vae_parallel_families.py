"""The row-parallel VAE decode (runtime/pipelines/vae_parallel/) on every generic family's VAE.

``Family.vae_parallel`` (what the planner reads to plan or refuse ``pipeline.vae: parallel``) is
checked against :func:`parallelize_decoder` on each family's tiny VAE (the family module's
``tiny_pipeline``: its real diffusers VAE class, ``Family.vae_class``), so the two cannot drift.
Then the five VAEs are decoded on 4 gloo ranks from a latent of 7 rows (bands of 2, 2, 2, 1: the
last band one row, as tall as a 3-row kernel's halo) through :func:`decode_rows` and through
:func:`row_parallel_vae` (the whole latent in, the whole output out on every rank: what the
generic generate hands its pipeline), float32, against one process's ``vae.decode`` of the whole
latent: AutoencoderKL (SD3.5: GroupNorm, the mid-block Attention), AutoencoderKLCogVideoX
(frame-batched decode with conv caches, spatial norms), AutoencoderKLLTXVideo (per-channel RMS
norms, depth-to-space upsampling), AutoencoderKLQwenImage (causal convs that pad in their forward,
with frame caches; the attention block) and AutoencoderKLHunyuanVideo (replicate-padded causal
convs; the mid block's frame-causal attention over all tokens, run on the gathered rows).

Measured (bench/vae_parallel_families.py: the same calls, 2 and 4 ranks, 6 and 7 latent rows): at
most 6.7e-6 (CogVideoX, outputs up to 11.5; 2e-6 to 3e-6 for SD3.5, LTX-Video and HunyuanVideo,
3e-7 for Qwen-Image), as far from a float64 decode as the single float32 decode is (at most 1.25
times). TOL as
test_vae_parallel.py's, scaled by the output's size; the control (the halos taken out again) moves
every family's output by more than CONTROL_MIN.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("diffusers")

from torch import nn  # noqa: E402

from sporch.orchestrator.models.families import FAMILIES  # noqa: E402
from sporch.runtime.pipelines.vae_parallel.decode import decode_rows, row_parallel_vae  # noqa: E402
from sporch.runtime.pipelines.vae_parallel.gathered_attention import GatherRows  # noqa: E402
from sporch.runtime.pipelines.vae_parallel.surgery import parallelize_decoder  # noqa: E402
from sporch.runtime.testing import run_distributed  # noqa: E402
from tests.runtime.pipelines.test_vae_parallel import plain_decode, without_halos  # noqa: E402

GENERIC = tuple(f for f in FAMILIES if f.pipeline_class)
TOL = 1e-5  # relative to max(1, the output's largest value)
CONTROL_MIN = 1e-2
ROWS = 7
#: each family's latent (None: the rows), as its pipeline hands it to vae.decode
SHAPES = {"sd3": (1, 4, None, 8), "qwen-image": (1, 4, 1, None, 8), "cogvideox": (1, 4, 3, None, 8),
          "ltx-video": (1, 8, 2, None, 3), "hunyuanvideo": (1, 4, 3, None, 8), "pixart": (1, 4, None, 8),
          "flux": (1, 4, None, 8), "cogview4": (1, 4, None, 8), "lumina2": (1, 4, None, 8), "flux2": (1, 4, None, 8),
          "wan": (1, 4, 3, None, 8), "skyreels-v2": (1, 4, 3, None, 8), "z-image": (1, 4, None, 8)}


def tiny_vae(name: str) -> nn.Module:
    from sporch.runtime.models.families import family_module

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return family_module(name).tiny_pipeline(0).vae.float().eval()


@pytest.fixture(scope="module")
def vaes() -> dict[str, nn.Module]:
    return {f.name: tiny_vae(f.name) for f in GENERIC}


@torch.no_grad()
def _decode_everywhere(vaes: dict[str, nn.Module]) -> dict[str, dict[str, float]]:
    """On every rank, for every family: the row-parallel decodes against the whole decode."""
    out = {}
    for name, vae in vaes.items():
        z = torch.randn(tuple(ROWS if s is None else s for s in SHAPES[name]), generator=torch.Generator().manual_seed(2))
        whole = plain_decode(vae, z)
        pvae = parallelize_decoder(vae, None)
        rows = decode_rows(pvae, z, None, plain_decode)
        pipeline_side = plain_decode(row_parallel_vae(vae, None), z)
        no_halo = decode_rows(without_halos(pvae), z, None, plain_decode)
        out[name] = {"decode_rows": (rows - whole).abs().max().item(),
                     "row_parallel_vae": (pipeline_side - whole).abs().max().item(),
                     "no_halo": (no_halo - whole).abs().max().item(), "scale": max(1.0, whole.abs().max().item())}
    return out


def test_vae_parallel_is_what_parallelize_decoder_accepts(vaes):
    """Family.vae_class is the tiny pipeline's VAE class, and Family.vae_parallel holds exactly
    where parallelize_decoder accepts that VAE."""
    for fam in GENERIC:
        vae = vaes[fam.name]
        assert type(vae).__name__ == fam.vae_class, fam.name
        try:
            parallelize_decoder(vae, None)
            accepted = True
        except ValueError:
            accepted = False
        assert accepted == fam.vae_parallel, fam.name


def test_every_generic_vae_decodes_on_four_ranks_as_one_process(vaes):
    results = run_distributed(_decode_everywhere, 4, vaes, timeout=600)
    for name in vaes:
        errs = {k: max(r[name][k] for r in results) for k in ("decode_rows", "row_parallel_vae", "no_halo")}
        scale = results[0][name]["scale"]
        print(f"{name}: 4 ranks, {ROWS} latent rows: max abs err {errs} (output scale {scale:.3g})")
        assert max(errs["decode_rows"], errs["row_parallel_vae"]) <= TOL * scale, (name, errs)
        assert errs["no_halo"] > CONTROL_MIN, (name, errs)


def test_a_decoder_that_injects_noise_is_refused():
    """LTX-Video 0.9.1's decoder draws noise of its input's rows in its forward (decoder_inject_noise):
    a band would draw other noise, so the surgery refuses it in one line."""
    from diffusers import AutoencoderKLLTXVideo

    vae = AutoencoderKLLTXVideo(latent_channels=8, block_out_channels=(8, 8, 8, 8), decoder_block_out_channels=(8, 8, 8, 8),
                                layers_per_block=(1, 1, 1, 1, 1), decoder_layers_per_block=(1, 1, 1, 1, 1),
                                decoder_inject_noise=(True, False, False, False, False))
    with pytest.raises(ValueError, match=r"decoder\.\S+ is a LTXVideoResnetBlock3d that injects "
                                         "noise") as exc:
        parallelize_decoder(vae, None)
    assert "\n" not in str(exc.value)


def test_the_causal_convs_that_pad_in_their_forward_take_the_halo_around_the_whole_module(vaes):
    """Qwen-Image's causal convs (``_padding``) and HunyuanVideo's (``time_causal_padding`` around a
    padding-0 ``conv``) are wrapped whole; HunyuanVideo's mid block runs on the gathered rows."""
    qwen = parallelize_decoder(vaes["qwen-image"], None)
    assert type(qwen.decoder.conv_in).__name__ == "HaloConv"
    assert type(qwen.decoder.conv_in.inner).__name__ == "QwenImageCausalConv3d"
    hunyuan = parallelize_decoder(vaes["hunyuanvideo"], None)
    assert type(hunyuan.decoder.conv_in.inner).__name__ == "HunyuanVideoCausalConv3d"
    assert isinstance(hunyuan.decoder.conv_in.inner.conv, nn.Conv3d)  # left as it is inside
    assert isinstance(hunyuan.decoder.mid_block, GatherRows)


def test_gather_rows_refuses_a_token_tensor():
    with pytest.raises(ValueError, match="3-D tensor: its dim -2 is not the image rows"):
        GatherRows(nn.Identity(), None)(torch.zeros(1, 6, 4))
