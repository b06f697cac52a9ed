"""A generate plan of a generic-path pipeline folder sizes the folder's own text encoders and VAE from
their safetensors headers (models/pipeline_sizes.py, read once with the transformer's config.json) and
counts them in the leader's memory: the tiny folders of two families with several encoders (SD3.5:
CLIP-L, CLIP-G, T5; HunyuanVideo: Llama, CLIP-L), against the parameters of the pipeline diffusers
loads from the folder."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from sporch.orchestrator.config.cluster import find_cluster  # noqa: E402
from sporch.orchestrator.config.job import job_from_dict  # noqa: E402
from sporch.orchestrator.plan.planner import make_plan  # noqa: E402

FAMILIES = {"sd3": (1, 64, 48), "hunyuanvideo": (9, 64, 48)}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from sporch.runtime.pipelines.tiny import save_tiny_pipeline

    root = tmp_path_factory.mktemp("sized-pipelines")
    return {fam: save_tiny_pipeline(fam, root / fam, seed=3) for fam in FAMILIES}


def _count(module) -> int:
    return sum(p.numel() for p in module.parameters())


def _plan(fam, folder, **pipeline):
    frames, height, width = FAMILIES[fam]
    job = {"name": "sized", "model": {"weights": str(folder)},
           "workload": {"kind": "generate", "prompt": "a fox", "frames": frames, "height": height, "width": width,
                        "steps": 2, "guidance_scale": 1.0, "dtype": "float32"},
           "parallel": {"cfg": 1, "ring": 2, "ulysses": 2}, "pipeline": pipeline}
    return make_plan(dataclasses.replace(find_cluster("local"), gpus_per_node=4), job_from_dict(job, "<test>"))


@pytest.mark.parametrize("fam", list(FAMILIES))
def test_the_folder_text_encoders_and_vae_are_sized_from_their_headers(folders, fam):
    from diffusers import DiffusionPipeline

    pipe = DiffusionPipeline.from_pretrained(folders[fam], dtype=torch.float32)
    encoders = [getattr(pipe, n) for n in ("text_encoder", "text_encoder_2", "text_encoder_3")
                if getattr(pipe, n, None) is not None]
    enc, vae = sum(_count(e) for e in encoders), _count(pipe.vae)
    plan = _plan(fam, folders[fam])
    sizes, pipeline = plan.model.pipeline_sizes, plan.estimates.pipeline
    assert sizes["text_encoder"] == " + ".join(type(e).__name__ for e in encoders)
    assert (sizes["text_encoder_parameters"], sizes["vae"], sizes["vae_parameters"]) == (
        enc, type(pipe.vae).__name__, vae)
    assert pipeline.busiest_rank.text_encoder == enc * 4 and pipeline.busiest_rank.vae == vae * 4  # float32
    cpu = _plan(fam, folders[fam], text_encoder="cpu").estimates.pipeline
    assert cpu.busiest_rank.text_encoder == 0 and cpu.text_encoder.host_bytes == enc * 4


@pytest.mark.parametrize("fam", list(FAMILIES))
def test_the_sharded_text_encoders_estimate_is_a_quarter_plus_the_largest_gathered_unit(folders, fam):
    """``pipeline.text_encoder: sharded`` on U2R2: every rank holds a quarter of the folder's encoders
    plus what is gathered at a time: the largest table (the largest tensor) or the largest layer
    unit (read from the headers: the largest one ``shard_encoder`` makes) and the next one."""
    from diffusers import DiffusionPipeline

    from sporch.runtime.pipelines.text import encoder_units

    pipe = DiffusionPipeline.from_pretrained(folders[fam], dtype=torch.float32)
    encoders = [part for name, part in pipe.components.items() if name.startswith("text_encoder") and part is not None]
    enc = sum(_count(e) for e in encoders)
    layer = max(_count(m) for e in encoders for group in encoder_units(e)[0] for m in group)
    table = max(p.numel() for e in encoders for p in e.parameters())
    plan = _plan(fam, folders[fam], text_encoder="sharded")
    assert plan.model.pipeline_sizes["text_encoder_layer"] == layer
    est = plan.estimates.pipeline
    assert (plan.placement.text_encoder, est.text_encoder.placement, est.text_encoder.ranks) == (
        "sharded", "sharded", (0, 1, 2, 3))
    assert est.busiest_rank.text_encoder == est.text_encoder.bytes_per_rank == (-(-enc // 4) + max(table, 2 * layer)) * 4
    print(f"{fam}: encoders {enc * 4} B, sharded per rank {est.busiest_rank.text_encoder} B")
