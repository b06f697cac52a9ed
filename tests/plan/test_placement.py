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
from sporch.orchestrator.plan.cost import FITTED, default_constants, features, inputs_from_plan, parameters, predict
from sporch.orchestrator.plan.estimates import GIB
from sporch.orchestrator.plan.planner import make_plan

REPO = Path(__file__).resolve().parents[2]
WAN14B_GENERATE = {"name": "gen14b", "model": {"preset": "wan2.1-t2v-14b"},
                   "workload": {"kind": "generate", "frames": 81, "height": 720, "width": 1280, "steps": 50,
                                "guidance_scale": 5.0, "dtype": "bfloat16", "prompt": "a red fox in the snow"}}


def _plan(cluster: str, shard: str, doc: dict = WAN14B_GENERATE, **parallel):
    job = job_from_dict({**doc, "parallel": {"shard_weights": shard, **parallel}})
    return make_plan(find_cluster(cluster), job)


def test_14b_720p_generate_does_not_fit_a100_40gb_unsharded_and_auto_shards_it():
    plain = _plan("a100-40gx32", "none")
    assert not plain.estimates["fits"] and plain.placement.shard_weights == "none"
    assert any("parallel.shard_weights=world (or auto)" in w for w in plain.warnings)
    # the breakdown: DiT parameters (all 14.6 B in bf16), activations, text encoder, VAE decode
    e = plain.estimates
    assert e["parameter_bytes_per_gpu"] == e["parameter_bytes_full"] == e["parameters"] * 2
    assert e["pipeline"]["text_encoder"]["bytes"] > 10 * GIB and e["pipeline"]["vae"]["decode_bytes"] > 0

    auto = _plan("a100-40gx32", "auto")
    p, a = auto.placement, auto.estimates
    assert a["fits"] and p.shard_weights == "sequence" and p.shard_degree == 32
    assert p.reason.startswith("auto: 37.6 GiB per GPU unsharded does not fit; parameters sharded over each "
                               "replica's sequence ranks (32)")
    # 1/32 of the parameters stay, plus the root unit and two blocks gathered at a time
    assert a["parameter_bytes_sharded"] == -(-a["parameters"] // 32) * 2
    assert a["parameter_bytes_per_gpu"] == a["parameter_bytes_sharded"] + a["parameter_bytes_gathered"]
    assert 0 < a["parameter_bytes_gathered"] < a["parameter_bytes_full"] / 10
    assert a["weight_gather_bytes_per_rank_per_step"] == int(a["parameter_bytes_full"] * 31 / 32)
    assert not any("does not fit" in w or "exceeds 90%" in w for w in auto.warnings)


def test_auto_keeps_the_plain_layout_when_it_fits():
    p = _plan("l40sx8", "auto")
    assert p.estimates["fits"] and p.placement.shard_weights == "none"
    assert p.placement.reason == "auto: fits without sharding the parameters"
    assert p.estimates["weight_gather_bytes_per_rank_per_step"] == 0
    assert p.estimates["predicted"]["breakdown_s_per_step"]["weight_gather"] == 0


def test_auto_says_when_nothing_fits():
    doc = dict(WAN14B_GENERATE, workload=dict(WAN14B_GENERATE["workload"], dtype="float32"))
    doc["workload"]["batch"] = 32
    p = _plan("a100-40gx32", "auto", doc, ring=1, ulysses=1, dp=32, cfg=1)
    # generate with dp 8 cannot shard over the world, and the sequence groups are single ranks
    assert p.placement.shard_weights == "none" and not p.estimates["fits"]
    assert "there is no other rank to shard the parameters over" in p.placement.reason


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
    assert "weights   sharded over 32 ranks (each replica's sequence group), FSDP2, one unit per block" in text
    assert "parameters auto: 37.6 GiB per GPU unsharded does not fit" in text
    assert "1/32 of 26.47 GiB sharded over the sequence group" in text
    assert "weight gather" in text and "text encoder" in text


def test_a_job_that_fits_nowhere_here_names_the_smallest_cluster_that_fits():
    from sporch.orchestrator.plan.advice import fit_line, smallest_fit

    job = job_from_dict(dict(WAN14B_GENERATE, parallel={"ulysses": 4}))
    assert not make_plan(find_cluster("local"), job).estimates["fits"]
    names = ["local", "l40sx8", "a100x8", "a100x32", "a100-40gx32", "h100x64"]
    best = smallest_fit(job, [find_cluster(n) for n in names])
    # 8 GPUs is the fewest that fit (a100x8 and l40sx8); a100x8 leaves more headroom
    assert best.cluster.name == "a100x8" and best.world_size == 8 and best.estimates["fits"]
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
    assert "1/4 world" in out.stdout  # the ranking shows how each layout holds the parameters
