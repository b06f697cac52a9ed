"""``pipeline.vae`` on the generic path's generate: ``tiled`` (diffusers' ``enable_tiling`` on the
leader) is planned for every family whose VAE has a tiled decode (``Family.vae_tiling``), with the
tiled decode's memory estimate (the family's ``vae_tile_pixels``), and ``auto`` takes it where the
whole decode does not fit; ``parallel`` is refused in one line (sporch's exact parallel decode is
built for the Wan VAE only), through the CLI with exit 2; a family without a tiled decode is
refused ``tiled`` in one line."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.models.families import FAMILIES, get_family
from sporch.orchestrator.plan.generic_checks import check_generic_vae, generic_placements
from sporch.orchestrator.plan.planner import make_plan

GIB = 1024**3
#: each generic preset at its usual size (frames, height, width) and guidance; SD3.5 at 2048 x 2048:
#: its VAE's default tile is 1024 pixels (the config's sample_size), the usual image one tile
USUAL = {"qwen-image": (1, 1328, 1328, 4.0), "sd3.5-large": (1, 2048, 2048, 3.5), "cogvideox-5b": (49, 480, 720, 6.0),
         "ltx-video-2b": (121, 512, 768, 3.0), "ltx-video-13b": (121, 512, 768, 3.0),
         "hunyuanvideo": (129, 720, 1280, 6.0), "pixart-sigma-xl-2-1024-ms": (1, 1024, 1024, 4.5)}
GENERIC = [f for f in FAMILIES if f.pipeline_class]


def _job(preset: str, **pipeline) -> dict:
    frames, height, width, guidance = USUAL[preset]
    return {"name": "vae", "model": {"preset": preset},
            "workload": {"kind": "generate", "prompt": "a fox", "frames": frames, "height": height, "width": width,
                         "steps": 30, "guidance_scale": guidance, "dtype": "bfloat16"},
            "parallel": {"cfg": 1, "dp": 1, "shard_weights": "none"}, "pipeline": pipeline}


def _plan(preset: str, cluster: str = "a100x32", **pipeline):
    return make_plan(find_cluster(cluster), job_from_dict(_job(preset, **pipeline), "<test>"))


def test_every_generic_family_declares_its_tiled_decode():
    """The six generic families' diffusers VAEs (AutoencoderKL for SD3 and PixArt-Sigma,
    AutoencoderKLQwenImage, AutoencoderKLCogVideoX, AutoencoderKLLTXVideo, AutoencoderKLHunyuanVideo)
    all have enable_tiling."""
    assert {f.name for f in GENERIC if f.vae_tiling} == {"qwen-image", "sd3", "cogvideox", "ltx-video", "hunyuanvideo",
                                                         "pixart"}
    for fam in GENERIC:
        assert generic_placements(fam)["vae"] == ("leader", "tiled")


@pytest.mark.parametrize("preset", sorted(USUAL))
def test_tiled_is_planned_and_lowers_the_decode_estimate(preset):
    whole, tiled = _plan(preset, vae="leader"), _plan(preset, vae="tiled")
    assert (whole.placement.vae, tiled.placement.vae) == ("leader", "tiled")
    assert tiled.estimates.pipeline.vae.placement == "tiled"
    w, t = whole.estimates.pipeline.busiest_rank.vae_decode, tiled.estimates.pipeline.busiest_rank.vae_decode
    print(f"{preset}: decode {w / GIB:.2f} GiB whole, {t / GIB:.2f} GiB tiled")
    assert t < w, (preset, w, t)
    assert tiled.estimates.pipeline.vae.decode_bytes < whole.estimates.pipeline.vae.decode_bytes


def test_auto_takes_the_tiled_decode_where_the_whole_decode_does_not_fit():
    """HunyuanVideo, 129 x 720 x 1280 on 48 GB L40S: 50 GiB with the whole decode does not fit, the
    tiled decode (256-pixel tiles) does."""
    whole = _plan("hunyuanvideo", cluster="l40sx8", vae="leader")
    assert not whole.estimates.memory.fits
    auto = _plan("hunyuanvideo", cluster="l40sx8")
    assert (auto.placement.vae, auto.placement.text_encoder) == ("tiled", "leader")
    assert auto.estimates.memory.fits and "VAE decoded in tiles" in auto.placement.reason
    print(f"hunyuanvideo l40sx8: {whole.estimates.memory.memory_bytes_per_gpu / GIB:.1f} GiB whole, "
          f"auto: {auto.placement.reason}")


def test_parallel_is_refused_in_one_line():
    with pytest.raises(SporchError, match="pipeline.vae=parallel is not supported for generate on "
                                          "HunyuanVideoTransformer3DModel .*Wan VAE only") as exc:
        _plan("hunyuanvideo", vae="parallel")
    assert "\n" not in str(exc.value)


def test_tiled_is_refused_for_a_family_without_a_tiled_decode():
    fam = dataclasses.replace(get_family("sd3"), vae_tiling=False)
    assert generic_placements(fam)["vae"] == ("leader",)
    with pytest.raises(SporchError, match="pipeline.vae=tiled is not supported .*set pipeline.vae=leader$") as exc:
        check_generic_vae(fam, "tiled", "SD3Transformer2DModel (family sd3, the generic path)")
    assert "\n" not in str(exc.value)
    check_generic_vae(fam, "leader", "x")
    check_generic_vae(fam, "auto", "x")


def test_the_cli_refuses_parallel_with_exit_2_and_plans_tiled(run_cli, tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(_job("hunyuanvideo")))
    code, out, err = run_cli("plan", "-c", "l40sx8", path, "pipeline.vae=parallel")
    assert code == 2 and "pipeline.vae=parallel is not supported" in err and "Wan VAE only" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    code, out, err = run_cli("plan", "-c", "l40sx8", path, "pipeline.vae=tiled")
    assert code == 0, err
    assert "tiled" in out
