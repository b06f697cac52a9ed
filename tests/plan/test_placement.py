"""Issue 18, the planner side of sharded DiT parameters (``parallel.shard_weights``): the memory
estimate per option, what ``auto`` picks and why, the weight all-gathers in the cost model, and
`sporch plan` on the smaller descriptors (A100-40GB, L40S-48GB)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.plan.cost import predict
from sporch.orchestrator.plan.cost_constants import default_constants
from sporch.orchestrator.plan.cost_features import FITTED, features, parameters
from sporch.orchestrator.plan.cost_inputs import inputs_from_plan
from sporch.orchestrator.plan.estimates import GIB
from sporch.orchestrator.plan.planner import make_plan

REPO = Path(__file__).resolve().parents[2]
WAN14B_GENERATE = {"name": "gen14b", "model": {"preset": "wan2.1-t2v-14b"},
                   "workload": {"kind": "generate", "frames": 81, "height": 720, "width": 1280, "steps": 50,
                                "guidance_scale": 5.0, "dtype": "bfloat16", "prompt": "a red fox in the snow"}}


LEADER = {"text_encoder": "leader", "vae": "leader"}


def _plan(cluster: str, shard: str, doc: dict = WAN14B_GENERATE, pipeline: dict | None = None, **parallel):
    extra = {"pipeline": pipeline} if pipeline else {}
    job = job_from_dict({**doc, "parallel": {"shard_weights": shard, **parallel}, **extra})
    return make_plan(find_cluster(cluster), job)


def test_14b_720p_generate_does_not_fit_a100_40gb_unsharded_and_auto_shards_it():
    plain = _plan("a100-40gx32", "none", pipeline=LEADER)
    assert not plain.estimates.memory.fits and plain.placement.shard_weights == "none"
    assert any("parallel.shard_weights=world (or auto)" in w for w in plain.warnings)
    # the breakdown: DiT parameters (all 14.6 B in bf16), activations, text encoder, VAE decode
    e = plain.estimates
    assert e.memory.parameter_bytes_per_gpu == e.weights.parameter_bytes_full == e.compute.parameters * 2
    assert e.pipeline.text_encoder.bytes > 10 * GIB and e.pipeline.vae.decode_bytes > 0

    auto = _plan("a100-40gx32", "auto", pipeline=LEADER)  # the text encoder and VAE stay on the leader
    p, a = auto.placement, auto.estimates
    assert a.memory.fits and p.shard_weights == "sequence" and p.shard_degree == 32
    assert (p.text_encoder, p.vae) == ("leader", "leader")
    assert p.reason.startswith("auto: 39.4 GiB per GPU unsharded does not fit; parameters sharded over each "
                               "replica's sequence ranks (32)")
    # 1/32 of the parameters stay, plus the root unit and two blocks gathered at a time
    assert a.weights.parameter_bytes_sharded == -(-a.compute.parameters // 32) * 2
    assert a.memory.parameter_bytes_per_gpu == a.weights.parameter_bytes_sharded + a.weights.parameter_bytes_gathered
    assert 0 < a.weights.parameter_bytes_gathered < a.weights.parameter_bytes_full / 10
    assert a.weights.weight_gather_bytes_per_rank_per_step == int(a.weights.parameter_bytes_full * 31 / 32)
    assert not any("does not fit" in w or "exceeds 90%" in w for w in auto.warnings)


def test_auto_keeps_the_plain_layout_when_it_fits():
    p = _plan("l40sx8", "auto")
    assert p.estimates.memory.fits and p.placement.shard_weights == "none"
    assert p.placement.reason == "auto: fits without sharding the parameters, text encoder and VAE on the leader"
    assert p.estimates.weights.weight_gather_bytes_per_rank_per_step == 0
    assert p.estimates.predicted.breakdown_s_per_step.weight_gather == 0


def test_auto_says_when_nothing_fits():
    doc = dict(WAN14B_GENERATE, workload=dict(WAN14B_GENERATE["workload"], dtype="float32"))
    doc["workload"]["batch"] = 32
    p = _plan("a100-40gx32", "auto", doc, ring=1, ulysses=1, dp=32, cfg=1)
    # generate with dp 8 cannot shard over the world, and the sequence groups are single ranks
    assert p.placement.shard_weights == "none" and not p.estimates.memory.fits
    # nothing fits: the least memory of what auto tried (a tiled decode), said to be too much
    assert p.placement.vae == "tiled" and p.placement.reason.endswith(", still too much")
    assert p.estimates.memory.memory_gib_per_gpu == min(o.memory_gib_per_gpu for o in p.estimates.memory.memory_options)
    from sporch.orchestrator.contract.plan import Layout
    from sporch.orchestrator.plan.placement import choose_placement

    big = dataclasses.replace(p.estimates, memory=dataclasses.replace(
        p.estimates.memory, fits=False, memory_bytes_per_gpu=100 * GIB, memory_gib_per_gpu=100.0))

    def too_big(degree, text, vae, experts):
        return big

    one, _ = choose_placement({"shard_weights": "auto"}, Layout(1, 1, 1, 1), too_big)
    assert one.reason == "auto: 100.0 GiB per GPU unsharded does not fit, and there is no other rank to shard the parameters over"


def test_world_sharding_is_refused_for_generate_across_replicas():
    with pytest.raises(SporchError, match=r"parallel.shard_weights=world needs every rank to run the same "
                                          r"forwards.*use parallel.shard_weights=sequence"):
        _plan("a100-40gx32", "world", dict(WAN14B_GENERATE, workload=dict(WAN14B_GENERATE["workload"], batch=2)),
              dp=2, ring="auto", ulysses="auto")
    bench = dict(WAN14B_GENERATE, workload=dict(WAN14B_GENERATE["workload"], kind="benchmark", prompt=None))
    bench["workload"]["batch"] = 2
    p = _plan("a100-40gx32", "world", bench, dp=2, ring="auto", ulysses="auto")
    assert p.placement.shard_weights == "world" and p.placement.shard_degree == 32


def test_bad_shard_weights_value_is_one_line():
    with pytest.raises(SporchError, match=r"'parallel.shard_weights' must be one of none, sequence, world or auto, "
                                          r"got 'all'"):
        _plan("a100-40gx32", "all")


def test_the_gathers_cost_time_and_the_prediction_stays_the_sum_of_its_features():
    consts = default_constants("A100-SXM4-40GB")
    for shard, cluster in (("sequence", "a100-40gx32"), ("world", "l40x16"), ("sequence", "l40sx8")):
        bench = dict(WAN14B_GENERATE, workload=dict(WAN14B_GENERATE["workload"], kind="benchmark", prompt=None))
        p = _plan(cluster, shard, bench)
        x = inputs_from_plan(p)
        pred = predict(x, consts)
        assert pred.weight_gather > 0
        f, par = features(x, consts), parameters(consts)
        assert sum(f[k] * par[k] for k in FITTED) == pytest.approx(pred.step_s, rel=1e-9)
        # a link 1000x slower exposes the gathers: still the sum of its features
        slow = dataclasses.replace(x, gather_bw=x.gather_bw / 1000)
        ps = predict(slow, consts)
        assert ps.weight_gather > pred.weight_gather * 100
        fs = features(slow, consts)
        assert sum(fs[k] * par[k] for k in FITTED) == pytest.approx(ps.step_s, rel=1e-9)


def test_plan_json_round_trips_the_placement_and_old_plans_still_load():
    from sporch.orchestrator.contract.plan import Plan

    p = _plan("a100-40gx32", "auto")
    again = Plan.from_json(p.to_json())
    assert again.placement == p.placement
    d = json.loads(p.to_json())
    del d["placement"]  # a plan written before the section existed
    assert Plan.from_dict(d).placement.shard_weights == "none"


def test_sporch_plan_prints_the_choice_and_the_breakdown(tmp_path):
    job = tmp_path / "gen14b.yaml"
    job.write_text(json.dumps(WAN14B_GENERATE))
    out = subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", "plan", "--cluster", "a100-40gx32",
                          str(job)], capture_output=True, text=True, timeout=120, env={"COLUMNS": "200",
                                                                                       "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "weights   on every rank" in text
    # the diffusers pipeline encodes with the transformer loaded: the encoder is the peak, so auto shards it
    assert "pipeline  text encoder sharded over each sequence group (32 ranks, FSDP2); VAE decode on the leader" in text
    assert ("memory auto: 39.4 GiB per GPU unsharded does not fit; text encoder sharded over each sequence group "
            "(32): 34.4 GiB") in text
    # the busiest rank's memory, part by part, and what auto tried
    for row in ("DiT parameters", "DiT activations", "text encoder (encode)", "VAE parameters",
                "VAE decode + frames", "CUDA context, workspaces", "memory options auto tried"):
        assert row in text, row
    assert "weight gather" in text


def test_a_job_that_fits_nowhere_here_names_the_smallest_cluster_that_fits():
    from sporch.orchestrator.plan.advice import fit_line, smallest_fit

    job = job_from_dict(dict(WAN14B_GENERATE, parallel={"ulysses": 4}))
    assert not make_plan(find_cluster("local"), job).estimates.memory.fits
    names = ["local", "l40sx8", "a100x8", "a100x32", "a100-40gx32", "h100x64"]
    best = smallest_fit(job, [find_cluster(n) for n in names])
    # 8 GPUs is the fewest that fit (a100x8 and l40sx8); a100x8 leaves more headroom
    assert best.cluster.name == "a100x8" and best.world_size == 8 and best.estimates.memory.fits
    assert fit_line(best).startswith("the smallest known cluster that fits: a100x8 (1 x 8 A100-SXM4-80GB, ")
    assert smallest_fit(job, [find_cluster("local")]) is None
    assert fit_line(None).startswith("no known cluster fits this job")


def test_sporch_plan_and_plan_rank_name_where_it_fits(tmp_path):
    job = tmp_path / "gen14b.yaml"
    job.write_text(json.dumps(WAN14B_GENERATE))
    env = {"COLUMNS": "250", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SPORCH_CLUSTERS": str(tmp_path)}
    for extra in ([], ["--rank"]):
        out = subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", "plan", "--cluster", "local",
                              str(job), *extra], capture_output=True, text=True, timeout=300, env=env)
        assert out.returncode == 0, out.stderr
        assert "the smallest known cluster that fits: a100x8 (1 x 8 A100-SXM4-80GB" in out.stdout, out.stdout[-800:]
    # the ranking shows how each layout holds the parameters, the text encoder and the VAE
    assert "1/4 seq, te sharded, vae tiled" in out.stdout and "1/2 seq, te cpu, vae tiled" in out.stdout


# -- the text encoder and the VAE (pipeline.text_encoder, pipeline.vae) ----------------------

#: 1080p on eight 48 GB GPUs: the 14B model and its text encoder fit the encode, the decode on the
#: leader does not (1088 / 8 = 136 latent rows)
WAN14B_1080P = dict(WAN14B_GENERATE, workload=dict(WAN14B_GENERATE["workload"], height=1088, width=1920))


def test_auto_moves_the_vae_decode_before_sharding_the_dit():
    """Everything auto: the cheapest change that fits wins; a parallel decode costs no step time,
    sharded parameters cost gathers at every step."""
    plain = _plan("l40sx8", "none", WAN14B_1080P, pipeline=LEADER)
    auto = _plan("l40sx8", "auto", WAN14B_1080P)
    p, a = auto.placement, auto.estimates
    assert not plain.estimates.memory.fits and plain.estimates.pipeline.busiest_rank.peak_stage == "denoise + decode"
    assert a.memory.fits
    assert (p.shard_weights, p.text_encoder, p.vae, p.pipeline_degree) == ("none", "leader", "parallel", 8)
    assert [(o.shard_weights, o.text_encoder, o.vae, o.fits) for o in a.memory.memory_options] == [
        ("none", "leader", "leader", False), ("none", "leader", "parallel", True)]
    assert a.memory.memory_options[0].memory_gib_per_gpu == plain.estimates.memory.memory_gib_per_gpu
    # the decode's working set is its rows' share (+ a halo row per conv) on each of the 8 ranks
    dec_plain, dec = plain.estimates.pipeline.vae, a.pipeline.vae
    assert dec.decode_bytes == pytest.approx(dec_plain.decode_bytes * (-(-136 // 8) + 1) / 136, rel=1e-6)
    assert dec.frames_bytes == 2 * dec_plain.frames_bytes == 2 * 81 * 1088 * 1920 * 3 * 4
    assert a.pipeline.vae.ranks == tuple(range(8))
    # each stage's memory is the sum of its parts: the plain decode was the peak; split, the encode
    # (the diffusers pipeline encodes with the transformer and the VAE loaded) is
    busy0 = plain.estimates.pipeline.busiest_rank
    assert plain.estimates.memory.memory_bytes_per_gpu == (busy0.dit_parameters + busy0.dit_activations
                                                           + busy0.reserved + busy0.vae + busy0.vae_decode)
    busy = a.pipeline.busiest_rank
    assert busy.peak_stage == "encode"
    assert a.memory.memory_bytes_per_gpu == busy.dit_parameters + busy.text_encoder + busy.vae + busy.reserved
    assert busy.dit_activations + busy.vae_decode < busy.text_encoder


def test_each_text_encoder_and_vae_option_has_its_memory():
    from sporch.orchestrator.models.families.wan import PARTS
    from sporch.orchestrator.plan.pipeline_estimate import sharded_encoder_bytes

    wan = PARTS
    rows = {}
    for text in ("leader", "sharded", "cpu"):
        for vae in ("leader", "tiled", "parallel"):
            e = _plan("a100-40gx32", "none", pipeline={"text_encoder": text, "vae": vae}).estimates.pipeline
            rows[text, vae] = e
            assert (e.text_encoder.placement, e.vae.placement) == (text, vae)
    full = wan["text_encoder_parameters"] * 2
    enc = {t: rows[t, "leader"].text_encoder for t in ("leader", "sharded", "cpu")}
    assert (enc["leader"].bytes_per_rank, enc["cpu"].bytes_per_rank) == (full, 0)
    assert enc["cpu"].host_bytes == full and enc["leader"].host_bytes == 0
    # 1/32 of it + the biggest unit gathered at a time (umT5's 1.05 B embedding table)
    assert enc["sharded"].bytes_per_rank == sharded_encoder_bytes(wan, 2, 32) == int((-(-5_680_000_000 // 32)
                                                                                        + 256_384 * 4096) * 2)
    assert enc["sharded"].ranks == tuple(range(32)) and enc["leader"].ranks == (0,)
    work = {v: rows["leader", v].vae.decode_bytes for v in ("leader", "tiled", "parallel")}
    assert work["tiled"] == pytest.approx(work["leader"] * 256 * 256 / (720 * 1280)) and work["parallel"] < work["leader"]


def test_the_text_encoder_is_the_peak_when_the_decode_is_small():
    """A short low-resolution video with the 1.3B model: the 11 GB umT5 is the leader's peak (the
    diffusers pipeline runs it with the transformer and the VAE already loaded); on the CPU it is out
    of the GPU's count."""
    doc = dict(WAN14B_GENERATE, model={"preset": "wan2.1-t2v-1.3b"},
               workload=dict(WAN14B_GENERATE["workload"], frames=5, height=256, width=256))
    plain = _plan("l40sx8", "none", doc, pipeline=LEADER)
    busy = plain.estimates.pipeline.busiest_rank
    assert busy.peak_stage == "encode" and busy.text_encoder == 5_680_000_000 * 2
    enc = _plan("l40sx8", "none", doc, pipeline={"text_encoder": "cpu", "vae": "leader"}).estimates.pipeline
    assert enc.busiest_rank.text_encoder == 0 and enc.busiest_rank.peak_stage == "denoise + decode"


def test_pipeline_settings_are_checked_in_one_line():
    with pytest.raises(SporchError, match=r"'pipeline.vae' must be one of leader, tiled, parallel or auto, got 'gpu'"):
        _plan("a100-40gx32", "auto", pipeline={"vae": "gpu"})
    bench = dict(WAN14B_GENERATE, workload=dict(WAN14B_GENERATE["workload"], kind="benchmark", prompt=None))
    with pytest.raises(SporchError, match=r"'pipeline.text_encoder' places generate's text encoder, but "
                                          r"workload.kind is benchmark: remove it"):
        _plan("a100-40gx32", "auto", bench, pipeline={"text_encoder": "sharded"})
    # a benchmark keeps its placement words (it has no text encoder or VAE)
    p = _plan("a100-40gx32", "auto", bench).placement
    assert (p.text_encoder, p.vae, p.pipeline_degree) == ("leader", "leader", 1)


def test_plan_json_says_fits_with_what_auto_picks(tmp_path):
    job = tmp_path / "gen14b.yaml"
    job.write_text(json.dumps(WAN14B_GENERATE))
    for extra, fits in (([], True), (["parallel.shard_weights=none", "pipeline.vae=leader",
                                      "pipeline.text_encoder=leader"], False)):
        out = subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", "plan", "--cluster", "a100-40gx32",
                              str(job), "--json", *extra], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        plan = json.loads(out.stdout)
        assert plan["estimates"]["fits"] is fits, extra
        assert plan["placement"]["text_encoder"] == ("sharded" if fits else "leader")
