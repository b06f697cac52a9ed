"""``pipeline.vae`` on the generic path's generate: ``tiled`` (diffusers' ``enable_tiling`` on the
leader) is planned for every family whose VAE has a tiled decode (``Family.vae_tiling``), with the
tiled decode's memory estimate (the family's ``vae_tile_pixels``), and ``auto`` takes it where the
whole decode does not fit; ``parallel`` (the rows decoded over the leader's sequence group) is
planned for every family whose VAE decodes exactly by row bands (``Family.vae_parallel``: all five,
checked against the runtime in tests/runtime/pipelines/test_vae_parallel_families.py), with the
parallel decode's estimate, and ``auto`` prefers it to tiles; it is refused in one line naming the VAE
class for a family whose VAE does not, and where the latent has fewer rows than the sequence group
has ranks; a family without a tiled decode is refused ``tiled`` in one line."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.models.families import FAMILIES, get_family
from sporch.orchestrator.plan.family_checks import check_family_vae, generate_placements
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


def test_every_generic_family_declares_its_tiled_and_parallel_decode():
    """The families' diffusers VAEs (AutoencoderKL for Flux.1, SD3 and PixArt-Sigma, AutoencoderKLWan,
    AutoencoderKLQwenImage, AutoencoderKLCogVideoX, AutoencoderKLLTXVideo, AutoencoderKLHunyuanVideo)
    all have enable_tiling and all decode exactly by row bands."""
    names = {"wan", "flux", "qwen-image", "sd3", "cogvideox", "ltx-video", "hunyuanvideo", "pixart"}
    assert {f.name for f in GENERIC if f.vae_tiling} >= names
    assert {f.name for f in GENERIC if f.vae_parallel} >= names
    for fam in GENERIC:
        assert generate_placements(fam)["vae"] == ("leader", "parallel", "tiled")
        assert generate_placements(fam, rows=7, degree=8)["vae"] == ("leader", "tiled")  # a rank would get no row


@pytest.mark.parametrize("preset", sorted(USUAL))
def test_tiled_and_parallel_are_planned_and_lower_the_decode_estimate(preset):
    whole, tiled = _plan(preset, vae="leader"), _plan(preset, vae="tiled")
    assert (whole.placement.vae, tiled.placement.vae) == ("leader", "tiled")
    assert tiled.estimates.pipeline.vae.placement == "tiled"
    w, t = whole.estimates.pipeline.busiest_rank.vae_decode, tiled.estimates.pipeline.busiest_rank.vae_decode
    par = _plan(preset, cluster="a100x8", vae="parallel")  # 8 sequence ranks: every usual size has >= 8 latent rows
    base = _plan(preset, cluster="a100x8", vae="leader")
    p, b = par.estimates.pipeline.busiest_rank.vae_decode, base.estimates.pipeline.busiest_rank.vae_decode
    print(f"{preset}: decode {w / GIB:.2f} GiB whole, {t / GIB:.2f} GiB tiled; on a100x8 {b / GIB:.2f} GiB whole, "
          f"{p / GIB:.2f} GiB parallel over {par.layout.sequence_degree}")
    assert t < w, (preset, w, t)
    assert tiled.estimates.pipeline.vae.decode_bytes < whole.estimates.pipeline.vae.decode_bytes
    assert par.placement.vae == "parallel" and par.placement.pipeline_degree == par.layout.sequence_degree > 1
    assert len(par.estimates.pipeline.vae.ranks) == par.layout.sequence_degree  # the leader's sequence group decodes
    assert par.estimates.pipeline.vae.decode_bytes < base.estimates.pipeline.vae.decode_bytes


def test_auto_takes_a_cheaper_decode_where_the_whole_decode_does_not_fit():
    """HunyuanVideo, 129 x 720 x 1280 on 48 GB L40S: 50 GiB with the whole decode does not fit; the
    parallel decode over the 8 sequence ranks (cheaper than tiles) does; where it may not run
    (pipeline.vae: tiled named), the tiled decode (256-pixel tiles) does too."""
    whole = _plan("hunyuanvideo", cluster="l40sx8", vae="leader")
    assert not whole.estimates.memory.fits
    auto = _plan("hunyuanvideo", cluster="l40sx8")
    assert (auto.placement.vae, auto.placement.text_encoder) == ("parallel", "leader")
    assert auto.estimates.memory.fits and "VAE decode split over the leader's sequence group (8)" in auto.placement.reason
    tiled = _plan("hunyuanvideo", cluster="l40sx8", vae="tiled")
    assert tiled.estimates.memory.fits
    print(f"hunyuanvideo l40sx8: {whole.estimates.memory.memory_bytes_per_gpu / GIB:.1f} GiB whole, "
          f"auto: {auto.placement.reason}")


def test_parallel_is_refused_in_one_line_where_the_vae_does_not_decode_by_rows():
    fam = dataclasses.replace(get_family("hunyuanvideo"), vae_parallel=False)
    assert generate_placements(fam)["vae"] == ("leader", "tiled")
    with pytest.raises(SporchError, match="pipeline.vae=parallel is not supported for generate on "
                                          "HunyuanVideoTransformer3DModel .*: AutoencoderKLHunyuanVideo is not decoded "
                                          "exactly .*; set pipeline.vae=leader or tiled$") as exc:
        check_family_vae(fam, "parallel", "HunyuanVideoTransformer3DModel (family hunyuanvideo, the generic path)")
    assert "\n" not in str(exc.value)


def test_parallel_is_refused_where_a_rank_would_get_no_latent_row():
    """LTX-Video 2B at 512 x 768 on 32 ranks: 16 latent rows (32 pixels each) for 32 sequence ranks."""
    with pytest.raises(SporchError, match="pipeline.vae=parallel is not supported .* splits the latent's 16 rows over the 32 ranks") as exc:
        _plan("ltx-video-2b", vae="parallel")
    assert "\n" not in str(exc.value)
    assert _plan("ltx-video-2b").placement.vae != "parallel"


def test_tiled_is_refused_for_a_family_without_a_tiled_decode():
    fam = dataclasses.replace(get_family("sd3"), vae_tiling=False, vae_parallel=False)
    assert generate_placements(fam)["vae"] == ("leader",)
    with pytest.raises(SporchError, match="pipeline.vae=tiled is not supported .*set pipeline.vae=leader$") as exc:
        check_family_vae(fam, "tiled", "SD3Transformer2DModel (family sd3, the generic path)")
    assert "\n" not in str(exc.value)
    check_family_vae(fam, "leader", "x")
    check_family_vae(fam, "auto", "x")


def test_the_cli_plans_parallel_and_tiled_and_refuses_too_few_rows_with_exit_2(run_cli, tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(_job("hunyuanvideo")))
    for vae in ("parallel", "tiled"):
        code, out, err = run_cli("plan", "-c", "l40sx8", path, f"pipeline.vae={vae}")
        assert code == 0, err
        assert vae in out
    code, out, err = run_cli("plan", "-c", "l40sx8", path, "pipeline.vae=parallel", "workload.height=48")
    assert code == 2 and "splits the latent's 6 rows over the 8 ranks" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def _ltx_folder(root, inject_noise: bool) -> str:
    """An LTX-Video 2B pipeline folder's configs: the published transformer's, and a VAE whose decoder
    injects noise (LTX-Video 0.9.1's) or not (0.9.5's)."""
    import json

    from sporch.orchestrator.models.families import ltx

    (root / "transformer").mkdir(parents=True)
    (root / "vae").mkdir()
    (root / "transformer" / "config.json").write_text(json.dumps({"_class_name": "LTXVideoTransformer3DModel",
                                                                    **ltx.LTX_VIDEO_2B}))
    (root / "vae" / "config.json").write_text(json.dumps({"_class_name": "AutoencoderKLLTXVideo", "timestep_conditioning": True,
                                                            "decoder_inject_noise": [inject_noise] * 3 + [False]}))
    return str(root)


def test_parallel_is_refused_for_a_folder_whose_vae_injects_decoder_noise(tmp_path):
    """The family's class decodes by rows, but LTX-Video 0.9.1's VAE (decoder_inject_noise) draws noise
    for the rows it has: refused in one line for that folder, and auto does not take it; the same
    folder with 0.9.5's VAE plans it."""
    def plan(folder, **pipeline):
        job = _job("ltx-video-2b", **pipeline)
        job["model"] = {"weights": folder}
        return make_plan(find_cluster("a100x8"), job_from_dict(job, "<test>"))

    noisy = _ltx_folder(tmp_path / "noisy", True)
    with pytest.raises(SporchError, match="pipeline.vae=parallel is not supported for generate on "
                                          "LTXVideoTransformer3DModel .* with this folder: its AutoencoderKLLTXVideo "
                                          "injects decoder noise .*; set pipeline.vae=leader or tiled$") as exc:
        plan(noisy, vae="parallel")
    assert "\n" not in str(exc.value)
    assert plan(noisy).placement.vae != "parallel"
    assert all(o.vae != "parallel" for o in plan(noisy).estimates.memory.memory_options)
    assert plan(_ltx_folder(tmp_path / "clean", False), vae="parallel").placement.vae == "parallel"
