"""Every phase of a job in the prediction (issue 49; plan/phase_cost.py): each phase's seconds are
its linear form (what calibration fits) evaluated, for every placement of the text encoder and the
VAE; and each term moves the way its physics says (planning only, no run)."""

from __future__ import annotations

import dataclasses

import pytest
from tests.testutil import EXAMPLES

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import load_job
from sporch.orchestrator.plan.cost import predict
from sporch.orchestrator.plan.cost_constants import cluster_constants
from sporch.orchestrator.plan.cost_features import FITTED, LEVELS, features, parameters, unfitted_s
from sporch.orchestrator.plan.cost_inputs import inputs_from_plan
from sporch.orchestrator.plan.cost_terms import gemm_occupancy
from sporch.orchestrator.plan.phase_cost import PHASES
from sporch.orchestrator.plan.planner import make_plan

I2V = EXAMPLES / "wan2.1-i2v-14b-720p.yaml"
QWEN = {"name": "qwen", "model": {"preset": "qwen-image"},
        "workload": {"kind": "generate", "prompt": "a fox", "frames": 1, "height": 1328, "width": 1328, "steps": 50,
                     "guidance_scale": 4.0, "dtype": "bfloat16"}}


def plan(job=I2V, *overrides: str, cluster: str = "a100x32"):
    if isinstance(job, dict):
        from sporch.orchestrator.config.job import job_from_dict

        return make_plan(find_cluster(cluster), job_from_dict(job, "qwen"))
    return make_plan(find_cluster(cluster), load_job(job, list(overrides)))


def phases(p) -> dict[str, float]:
    return p.estimates.predicted.phases_s.to_dict()


@pytest.mark.parametrize("text_encoder", ["leader", "sharded", "cpu"])
@pytest.mark.parametrize("vae", ["leader", "tiled", "parallel"])
def test_every_phase_is_its_linear_form(text_encoder, vae):
    p = plan(I2V, f"pipeline.text_encoder={text_encoder}", f"pipeline.vae={vae}")
    x, c = inputs_from_plan(p), cluster_constants(p.cluster)[0]
    pred, par = predict(x, c), parameters(c)
    want = {"step": pred.step_s, "job": pred.generation_s, "all": pred.job_s, **dict(pred.phases)}
    assert set(want) == set(LEVELS)
    for level, seconds in want.items():
        f = features(x, c, level)
        assert sum(f[k] * par[k] for k in FITTED) + unfitted_s(x, level, c) == pytest.approx(seconds, rel=1e-9), level
    assert pred.phase("encode") > 0 and pred.phase("decode") > 0 and pred.phase("save") > 0


def test_each_phase_moves_as_its_physics_says():
    base = phases(plan())
    # the encoder on the host: its 5.7 B parameters x 512 tokens x 2 prompts at 1 TFLOP/s, seconds more
    assert phases(plan(I2V, "pipeline.text_encoder=cpu"))["encode"] > base["encode"] + 10
    # a decode split over the 32 sequence ranks is faster; tiles recompute their overlaps
    assert phases(plan(I2V, "pipeline.vae=parallel"))["decode"] < base["decode"] / 10
    assert phases(plan(I2V, "pipeline.vae=tiled"))["decode"] > base["decode"]
    # every node reads the checkpoint from the shared file system at once: 1 node reads faster
    one = phases(plan(I2V, "resources.nodes=1", "parallel.ring=1"))
    assert one["load"] < base["load"] and one["startup"] < base["startup"]  # log2(8) < log2(32) communicators
    # a benchmark has no pipeline: nothing encoded, decoded or written; its loop is warm-up + repeat
    bench = plan(EXAMPLES / "wan14b-720p.yaml").estimates.predicted
    assert bench.phases_s.encode == bench.phases_s.decode == bench.phases_s.save == 0
    assert bench.phases_s.denoise == pytest.approx(4 * bench.step_s, rel=1e-6)


def test_staged_and_sharded_weights_load_as_they_are_read():
    p = plan()
    x, c = inputs_from_plan(p), cluster_constants(p.cluster)[0]
    shared = predict(x, c).phase("load")
    staged = dataclasses.replace(x, phases=dataclasses.replace(x.phases, staged=True))
    # read from the node's disk (local_read_s_per_gb) instead of 4 nodes sharing 2 GB/s
    assert predict(staged, c).phase("load") < shared / 4
    sharded = phases(plan(I2V, "parallel.shard_weights=sequence"))
    assert sharded["load"] < phases(p)["load"]  # each GPU receives 1/32 of the transformer


def test_a_small_image_over_many_gpus_leaves_gemm_units_idle():
    """Issue 49: few tokens per rank (Qwen-Image 1328 px over 32 GPUs: 216 a rank) fill fewer
    GEMM tiles than the SMs; a 720p video's share fills them."""
    qwen, wan = plan(QWEN), plan()
    units = cluster_constants(qwen.cluster)[0]["parallel_units"]
    assert gemm_occupancy(inputs_from_plan(qwen), units) < 0.95
    assert gemm_occupancy(inputs_from_plan(wan), units) == 1.0
    # and the all-to-all's fixed cost grows with the group: 2 calls x (U - 1) messages a layer
    x = inputs_from_plan(qwen)
    c = cluster_constants(qwen.cluster)[0]
    u4, u8 = (predict(dataclasses.replace(x, ulysses=u), c).all_to_all for u in (4, 8))
    assert c["a2a_latency_s"] > 0 and u8 > u4


def test_the_job_adds_up_its_phases_and_names_its_gpu_hours():
    pred = plan().estimates.predicted
    assert pred.job_s == pytest.approx(sum(phases(plan()).values()) + pred.fixed_s, rel=1e-6)
    assert pred.gpu_hours == pytest.approx(pred.job_s * 32 / 3600, rel=1e-4)
    assert list(pred.phases_s.to_dict()) == list(PHASES)
    assert pred.generation_s == pytest.approx(sum(phases(plan())[k] for k in ("encode", "denoise", "switch", "decode"))
                                              + pred.fixed_s, rel=1e-6)


def test_repeated_runs_of_a_phase_fit_their_mean():
    """Three runs of one job measured 1, 2 and 6 s of encode: relative to the phase's mean over the
    runs (calibration_points sets ``scale_s``), the fit is their mean, 3 s (what a budget adds up);
    relative to each run, it leans to the fastest."""
    from sporch.orchestrator.plan.calibration import Observation, fit

    p = plan()
    x, c = inputs_from_plan(p), cluster_constants(p.cluster)[0]
    # the encode's fixed cost alone (no encoder to read or run): the fit's one parameter
    x = dataclasses.replace(x, phases=dataclasses.replace(x.phases, encoder_read_bytes=0.0, encode_flops=0.0))
    runs = [Observation(x, s, "encode", f"r{i}") for i, s in enumerate((1.0, 2.0, 6.0))]
    mean = fit([dataclasses.replace(o, scale_s=3.0) for o in runs], c, ["encode_fixed_s"])
    assert mean.predictions == pytest.approx([3.0] * 3, rel=1e-6)
    relative = fit(runs, c, ["encode_fixed_s"])
    assert relative.predictions[0] < 2.0  # sum(1/m) / sum(1/m^2) of the three
