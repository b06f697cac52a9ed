"""A generate plan on the generic path counts its family's text encoders and VAE (the published sizes
the family module declares: models/families/*.py ``PARTS``) in the busiest rank's memory, and the
placement moves them: ``pipeline.text_encoder: cpu`` takes the encoders off the GPU, ``auto`` tries only
what the generic generate runs (leader, sharded or cpu; the VAE on the leader, parallel or tiled)."""

from __future__ import annotations

import json

import pytest

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.models.families import FAMILIES
from sporch.orchestrator.models.families import qwenimage
from sporch.orchestrator.plan.planner import make_plan

#: each generic preset's usual size (frames, height, width) and guidance
USUAL = {"qwen-image": (1, 1328, 1328, 4.0), "sd3.5-large": (1, 1024, 1024, 3.5), "sd3.5-medium": (1, 1024, 1024, 4.0),
         "cogvideox-5b": (49, 480, 720, 6.0), "ltx-video-2b": (121, 512, 768, 3.0), "ltx-video-13b": (121, 512, 768, 3.0),
         "hunyuanvideo": (129, 720, 1280, 6.0), "pixart-sigma-xl-2-512-ms": (1, 512, 512, 4.5),
         "pixart-sigma-xl-2-1024-ms": (1, 1024, 1024, 4.5), "pixart-sigma-xl-2-2k-ms": (1, 2048, 2048, 4.5),
         "wan2.1-t2v-1.3b": (81, 480, 832, 5.0), "wan2.1-t2v-14b": (81, 720, 1280, 5.0),
         "wan2.1-i2v-14b-480p": (81, 480, 832, 5.0), "wan2.1-i2v-14b-720p": (81, 720, 1280, 5.0),
         "wan2.2-t2v-a14b": (81, 720, 1280, 4.0), "wan2.2-i2v-a14b": (81, 720, 1280, 3.5),
         "wan2.2-ti2v-5b": (121, 704, 1280, 5.0), "flux.1-dev": (1, 1024, 1024, 3.5), "flux.1-schnell": (1, 1024, 1024, 1.0),
         "cogview4-6b": (1, 1024, 1024, 5.0), "lumina-image-2.0": (1, 1024, 1024, 4.0),
         "flux.2-dev": (1, 1024, 1024, 4.0),
         # SkyReelsV2Pipeline's defaults (97 x 544 x 960, guidance 6) and its 720P size; the I2V and DF 1.3B
         # presets are refused (generate_refusal)
         "skyreels-v2-t2v-14b-540p": (97, 544, 960, 6.0), "skyreels-v2-t2v-14b-720p": (121, 720, 1280, 6.0),
         "z-image-turbo": (1, 1024, 1024, 0.0)}  # Turbo: no guidance (ZImagePipeline's scale counts from 0)
#: every published preset a generic family generates with (FLUX.2 [klein]'s folders name another pipeline:
#: refused, ``Family.generate_refusal``)
GENERIC = [(fam, p.name) for fam in FAMILIES if fam.pipeline_class for p in fam.presets if not p.test_model
           and not (fam.generate_refusal and fam.generate_refusal(p.config))]


def _plan(preset: str, cluster: str = "a100x32", model: dict | None = None, shard: str = "auto", **pipeline):
    frames, height, width, guidance = USUAL.get(preset, (1, 1024, 1024, 4.0))
    image = {"image": __file__} if "i2v" in preset else {}  # an image-to-video model needs its first frame (a file)
    job = {"name": "mem", "model": model or {"preset": preset},
           "workload": {"kind": "generate", "prompt": "a fox", "frames": frames, "height": height, "width": width,
                        "steps": 30, "guidance_scale": guidance, "dtype": "bfloat16", **image},
           "parallel": {"cfg": 1, "dp": 1, "shard_weights": shard}, "pipeline": pipeline}
    return make_plan(find_cluster(cluster), job_from_dict(job, "<test>"))


def test_every_generic_preset_is_covered():
    assert {name for _, name in GENERIC} == set(USUAL)


@pytest.mark.parametrize("fam, preset", GENERIC, ids=[n for _, n in GENERIC])
def test_a_generic_generate_plan_counts_the_family_encoders_and_vae(fam, preset):
    parts = fam.pipeline_parts(preset)
    assert parts is not None, f"{fam.name} declares no text encoder / VAE for {preset}"
    p = _plan(preset, text_encoder="leader")  # the whole encoders on the leader (auto may shard a large one)
    pipe, b = p.estimates.pipeline, 2  # bfloat16: the generic pipeline loads every part in the workload dtype
    assert pipe.text_encoder.what == parts["text_encoder"] and pipe.vae.what == parts["vae"]
    assert pipe.text_encoder.bytes == parts["text_encoder_parameters"] * b
    assert pipe.busiest_rank.text_encoder == parts["text_encoder_parameters"] * b
    assert pipe.busiest_rank.vae == parts["vae_parameters"] * b and pipe.busiest_rank.vae_decode > 0


def test_qwen_image_on_a100x32_holds_encoder_vae_and_transformer_and_cpu_removes_the_encoder():
    leader = _plan("qwen-image", text_encoder="leader")
    enc, vae = (qwenimage.PARTS["text_encoder_parameters"] * 2, qwenimage.PARTS["vae_parameters"] * 2)
    mem, pipe = leader.estimates.memory, leader.estimates.pipeline
    # the generic pipeline encodes with the transformer and the VAE already loaded
    assert pipe.busiest_rank.peak_stage == "encode"
    assert mem.memory_bytes_per_gpu == mem.parameter_bytes_per_gpu + enc + vae + mem.reserved_bytes_per_gpu
    assert leader.placement.text_encoder == "leader"

    cpu = _plan("qwen-image", text_encoder="cpu")
    cmem, cpipe = cpu.estimates.memory, cpu.estimates.pipeline
    assert cpu.placement.text_encoder == "cpu"
    assert cpipe.busiest_rank.text_encoder == 0 and cpipe.text_encoder.host_bytes == enc
    assert cpipe.busiest_rank.peak_stage == "denoise + decode"
    assert cmem.memory_bytes_per_gpu == (cmem.dit_memory_bytes_per_gpu + vae + cpipe.busiest_rank.vae_decode)
    assert cmem.memory_bytes_per_gpu < mem.memory_bytes_per_gpu


def test_auto_moves_the_generic_encoder_to_the_cpu_and_never_picks_what_the_generic_generate_cannot_run():
    """On 40 GiB GPUs Qwen-Image's 38 GiB transformer leaves no room for its 15 GiB encoder: auto takes
    the CPU and the parallel decode over the 32 sequence ranks, the least memory, still too much (the
    sharded encoder, tried, needs more). With shard_weights=auto the transformer is sharded instead,
    and the encoder and VAE stay on the leader."""
    p = _plan("qwen-image", cluster="a100-40gx32", shard="none")
    assert (p.placement.text_encoder, p.placement.vae) == ("cpu", "parallel") and not p.estimates.memory.fits
    tried = {(o.text_encoder, o.vae) for o in p.estimates.memory.memory_options}
    assert ("sharded", "leader") in tried and tried <= {(t, v) for t in ("leader", "sharded", "cpu")
                                                        for v in ("leader", "parallel", "tiled")}
    sharded = _plan("qwen-image", cluster="a100-40gx32")
    assert sharded.placement.shard_weights != "none" and sharded.placement.text_encoder == "leader"


def test_a_published_checkpoint_folder_has_its_preset_parts_another_shape_none(tmp_path):
    preset = qwenimage.FAMILY.presets[0]
    for name, config in (("published", preset.config), ("smaller", {**preset.config, "num_layers": 2})):
        where = tmp_path / name / "transformer"
        where.mkdir(parents=True)
        (where / "config.json").write_text(json.dumps({"_class_name": qwenimage.FAMILY.classes[0], **config}))
        pipe = _plan("qwen-image", model={"weights": str(tmp_path / name)}).estimates.pipeline
        if name == "published":
            assert pipe.text_encoder.bytes == qwenimage.PARTS["text_encoder_parameters"] * 2
        else:
            assert pipe.text_encoder.bytes is None and "size unknown" in pipe.text_encoder.what
