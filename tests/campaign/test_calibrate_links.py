"""Issue 35 item 4: ``sporch calibrate --links PREFLIGHT_DIR`` takes a preflight's measured link
rates and latencies as the calibration's link figures. Pure: the figures of made-up measurements;
a campaign's fit with the links (the link constants held at the measured values, the points
predicted with the measured rates); bad input. Live: a real preflight on gloo (8 CPU ranks, the
lab's 4 nodes emulated) fed to calibrate, and `sporch plan` with that calibration."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sporch.orchestrator.campaign.expand import expand
from sporch.orchestrator.campaign.folder import prepare
from sporch.orchestrator.campaign.spec import load_campaign
from sporch.orchestrator.plan.calibration import Observation, predicted_s, with_links
from sporch.orchestrator.plan.cost_constants import cluster_constants, default_constants
from sporch.orchestrator.plan.cost_inputs import inputs_from_plan
from sporch.orchestrator.plan.measured_links import from_preflight
from tests.campaign.calibration_campaign import CLUSTER_FILE, calibrated_descriptor, write_campaign

ROOT = Path(__file__).resolve().parents[2]


def _preflight_data(gpn: int, nodes: int, a2a_s: float, hop_s: float, lat_a2a: float, lat_hop: float,
                    payload: int = 4 * 2**20) -> dict:
    """Ranks ``gpn`` a node; an all-to-all over each node's ranks, one ring over the nodes per local rank."""
    world = gpn * nodes
    ranks = [{"rank": r, "node": f"n{r // gpn}"} for r in range(world)]
    links = [{"kind": "all_reduce", "group": list(range(world)), "rank": 0, "bytes": payload, "s": 1.0, "gb_per_s": 1.0}]
    if gpn > 1:
        for node in range(nodes):
            group = list(range(node * gpn, (node + 1) * gpn))
            for r in group:
                links.append({"kind": "all_to_all", "group": group, "rank": r, "bytes": payload, "s": a2a_s,
                              "latency_s": lat_a2a, "latency_bytes": 64 * gpn})
    if nodes > 1:
        for local in range(gpn):
            ring = [local + gpn * n for n in range(nodes)]
            for i, src in enumerate(ring):
                dst = ring[(i + 1) % nodes]
                links.append({"kind": "ring_p2p", "group": ring, "src": src, "dst": dst, "rank": dst, "bytes": payload,
                              "s": hop_s, "latency_s": lat_hop, "latency_bytes": 64})
    return {"ranks": ranks, "links": links, "backend": "gloo", "payload_bytes": payload}


def _write_preflight(folder: Path, cluster: str, gpn: int, data: dict) -> Path:
    folder.mkdir(parents=True)
    (folder / "result.json").write_text(json.dumps({"status": "completed", "metrics": {"preflight": data}}))
    (folder / "plan.json").write_text(json.dumps({"gpus_per_node": gpn, "cluster": {"name": cluster, "gpus_per_node": gpn}}))
    return folder


def test_figures_of_a_preflight():
    payload = 4 * 2**20
    data = _preflight_data(gpn=4, nodes=2, a2a_s=0.011, hop_s=0.021, lat_a2a=0.003, lat_hop=0.001, payload=payload)
    f = from_preflight(data, cluster="c", gpus_per_node=4, source="/x")
    # all-to-all of 4: each rank moves 3/4 of the payload in 0.011 - 0.003 s
    assert f.intra_node_gb_per_s.value == pytest.approx(0.75 * payload / 0.008 / 1e9, rel=1e-12)
    # a hop between nodes: payload in 0.021 - 0.001 s per GPU, 4 GPUs a node
    assert f.inter_node_gb_per_s.value == pytest.approx(4 * payload / 0.020 / 1e9, rel=1e-12)
    assert f.a2a_latency_s.value == pytest.approx(0.001)  # 0.003 s over 3 peers
    assert f.p2p_latency_s.value == pytest.approx(0.001)
    assert f.constants() == {"link_efficiency": 1.0, "a2a_latency_s": pytest.approx(0.001),
                             "p2p_latency_s": pytest.approx(0.001)}
    # one node: nothing between nodes is measured (the descriptor's figure stays)
    one = from_preflight(_preflight_data(4, 1, 0.011, 0.021, 0.003, 0.001), cluster="c", gpus_per_node=4, source="/x")
    assert one.inter_node_gb_per_s is None and one.p2p_latency_s is None and set(one.rates()) == {"intra_node_gb_per_s"}
    # a preflight from before latencies were measured: rates from the raw times, no latency
    old = _preflight_data(4, 2, 0.011, 0.021, 0.003, 0.001)
    for m in old["links"]:
        m.pop("latency_s", None)
    o = from_preflight(old, cluster="c", gpus_per_node=4, source="/x")
    assert o.intra_node_gb_per_s.value == pytest.approx(0.75 * 4 * 2**20 / 0.011 / 1e9)
    assert o.a2a_latency_s is None and o.constants() == {"link_efficiency": 1.0}


@pytest.fixture
def campaign_with_links(tmp_path):
    """The calibration campaign's points (1 GPU a node: every group crosses nodes) "measured" as
    the cost model predicts them with the preflight's rates and latencies and a layer overhead of
    3 ms; the preflight's folder."""
    path, _ = write_campaign(tmp_path)
    exp = expand(load_campaign(path))
    cdir = prepare(exp, tmp_path / "calibrate")
    data = _preflight_data(gpn=1, nodes=2, a2a_s=0.0, hop_s=0.0105, lat_a2a=0.0, lat_hop=0.0005)
    pf = _write_preflight(tmp_path / "preflight", "slurmlab-1gpu", 1, data)
    links = from_preflight(data, cluster="slurmlab-1gpu", gpus_per_node=1, source=str(pf))
    cluster = exp.points[0].plan.cluster
    truth = {**default_constants(cluster.gpu.model), **links.constants(), "layer_overhead_s": 3e-3}
    for p in exp.points:
        x = with_links(inputs_from_plan(p.plan), links, cluster.intra_node.gb_per_s, cluster.inter_node.gb_per_s, 1)
        step_ms = predicted_s(Observation(x, 1.0), truth) * 1e3
        cdir.result_file(p.id).write_text(json.dumps({"status": "completed", "metrics": {"step_ms_median": step_ms}}))
    return cdir, pf, links


def test_a_campaign_fit_takes_the_measured_links(campaign_with_links, tmp_path, run_cli):
    cdir, pf, links = campaign_with_links
    code, out, err = run_cli("calibrate", cdir.root, "--links", pf, "--fit", "layer_overhead_s,a2a_latency_s,p2p_latency_s")
    assert code == 0, err
    doc = yaml.safe_load((cdir.root / "calibration.yaml").read_text())
    # the measured p2p latency is held (not refitted); the free constants come out exact (one GPU a
    # node: no all-to-all inside a node, so its latency is fitted)
    assert doc["fitted"] == ["a2a_latency_s", "layer_overhead_s"] and doc["max_relative_error"] < 1e-6
    assert doc["constants"]["layer_overhead_s"] == pytest.approx(3e-3, rel=1e-5)
    assert doc["constants"]["p2p_latency_s"] == pytest.approx(0.0005, rel=1e-5)
    assert doc["constants"]["link_efficiency"] == 1.0
    assert doc["links"]["inter_node_gb_per_s"] == pytest.approx(4 * 2**20 / 0.01 / 1e9, rel=1e-5)
    assert "intra_node_gb_per_s" not in doc["links"]  # one GPU a node: no all-to-all inside one
    assert doc["links"]["sets"] == ["link_efficiency", "p2p_latency_s"]
    assert "link figures measured by the preflight" in out and "median ring hop between nodes" in out
    # without the links the same points need other constants: the fit is not exact
    code, _, err = run_cli("calibrate", cdir.root, "--fit", "layer_overhead_s,a2a_latency_s,p2p_latency_s", "--out",
                           tmp_path / "nolinks.yaml")
    assert code == 0, err
    assert yaml.safe_load((tmp_path / "nolinks.yaml").read_text())["max_relative_error"] > 1e-3
    # a descriptor that references the file plans with the measured rate between nodes
    desc = calibrated_descriptor(tmp_path, str(cdir.root / "calibration.yaml"))
    from sporch.orchestrator.config.cluster import load_cluster_file

    spec = load_cluster_file(desc)
    assert spec.inter_node.gb_per_s == doc["links"]["inter_node_gb_per_s"] and spec.intra_node.gb_per_s == 5
    assert cluster_constants(spec)[0]["p2p_latency_s"] == doc["constants"]["p2p_latency_s"]


def test_links_that_are_not_a_preflight_are_refused_in_one_line(campaign_with_links, tmp_path, run_cli):
    cdir, pf, _ = campaign_with_links

    def refused(*args, words=()):
        code, _, err = run_cli("calibrate", *args)
        assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        for w in words:
            assert w in err, err

    other = tmp_path / "job"
    other.mkdir()
    (other / "result.json").write_text(json.dumps({"status": "completed", "metrics": {"step_ms_median": 1}}))
    refused(cdir.root, "--links", other, words=("is not a completed `sporch preflight` job",))
    refused(cdir.root, "--links", tmp_path / "nowhere", words=("not found",))
    refused("--links", pf, words=("needs --cluster",))
    refused(words=("give a campaign folder",))
    elsewhere = _write_preflight(tmp_path / "pf-lab", "slurmlab", 2, _preflight_data(2, 2, 0.01, 0.01, 0.001, 0.001))
    refused(cdir.root, "--links", elsewhere, words=("the preflight ran on slurmlab (2 GPUs per node), not on slurmlab-1gpu",))
    assert not (cdir.root / "calibration.yaml").exists()
    bad = tmp_path / "bad.yaml"
    bad.write_text("constants: {}\nlinks: {intra_node_gb_per_s: -1}\n")
    (tmp_path / "d.yaml").write_text((tmp_path / CLUSTER_FILE).read_text() + f"calibration: {bad}\n")
    code, _, err = run_cli("plan", "--cluster", tmp_path / "d.yaml", ROOT / "examples" / "tiny.yaml")
    assert code == 2 and "links.intra_node_gb_per_s must be a number > 0" in err, err


def _median(values):
    return statistics.median(values)


def _less(s, latency):
    return s - latency if latency < s else s


def test_a_real_preflight_becomes_the_calibrations_link_figures(tmp_path):
    """gloo on this machine: preflight 2 of the lab's nodes (4 CPU ranks, 2 emulated nodes: an
    all-to-all inside each node and a hop between them is all the links need), calibrate with its
    folder, and plan with the calibration: its link figures are the measured ones, and the plan's
    all-to-all term is the measured rate's and latency's."""
    env = {**os.environ, "COLUMNS": "250"}

    def sporch(*args):
        return subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", *map(str, args)],
                              capture_output=True, text=True, timeout=400, cwd=ROOT, env=env)

    pf = sporch("preflight", "--cluster", "slurmlab", "--nodes", "2", "--local", "--output-dir", tmp_path / "runs")
    assert pf.returncode in (0, 1), pf.stderr[-2000:]  # 1: a hop named slow (loopback noise)
    (folder,) = (tmp_path / "runs" / "preflight").iterdir()
    data = json.loads((folder / "result.json").read_text())["metrics"]["preflight"]
    node = {r["rank"]: r["node"] for r in data["ranks"]}
    a2a = [m for m in data["links"] if m["kind"] == "all_to_all"]
    cross = [m for m in data["links"] if m["kind"] == "ring_p2p" and node[m["src"]] != node[m["dst"]]]
    assert len(a2a) == 4 and len(cross) == 4 and all(m["latency_s"] > 0 for m in a2a + cross)
    # the latency is taken off the payload's time (unless noise made it the longer: then the raw time)
    intra = _median([0.5 * m["bytes"] / _less(m["s"], m["latency_s"]) / 1e9 for m in a2a])
    inter = 2 * _median([m["bytes"] / _less(m["s"], m["latency_s"]) / 1e9 for m in cross])
    a2a_lat, p2p_lat = _median([m["latency_s"] for m in a2a]), _median([m["latency_s"] for m in data["links"]
                                                                          if m["kind"] == "ring_p2p"])
    cal = tmp_path / "cal.yaml"
    out = sporch("calibrate", "--links", folder, "--cluster", "slurmlab", "--out", cal)
    assert out.returncode == 0, out.stderr
    assert "link figures measured by the preflight" in out.stdout
    for line in ("intra_node_gb_per_s", "inter_node_gb_per_s", "a2a_latency_s", "p2p_latency_s"):
        assert any(row.split("│")[1].strip() == line and "median" in row for row in out.stdout.splitlines()
                   if row.count("│") > 3), (line, out.stdout)
    doc = yaml.safe_load(cal.read_text())
    assert doc["links"]["intra_node_gb_per_s"] == pytest.approx(intra, rel=1e-5)
    assert doc["links"]["inter_node_gb_per_s"] == pytest.approx(inter, rel=1e-5)
    assert doc["constants"]["a2a_latency_s"] == pytest.approx(a2a_lat, rel=1e-5)  # one peer in each group of 2
    assert doc["constants"]["p2p_latency_s"] == pytest.approx(p2p_lat, rel=1e-5)
    assert doc["constants"]["link_efficiency"] == 1.0

    desc = tmp_path / "lab-cal.yaml"
    desc.write_text((ROOT / "clusters" / "slurmlab.yaml").read_text() + f"calibration: {cal}\n")
    plans = {}
    for name, c in (("nominal", "slurmlab"), ("measured", desc)):
        p = sporch("plan", "--cluster", c, ROOT / "examples" / "tiny.yaml", "--json")
        assert p.returncode == 0, p.stderr
        plans[name] = json.loads(p.stdout)
    nominal, measured = plans["nominal"]["estimates"], plans["measured"]["estimates"]
    assert nominal["all_to_all_gb_per_s"] == 5.0
    assert measured["all_to_all_gb_per_s"] == doc["links"]["intra_node_gb_per_s"]
    ring_rate = min(doc["links"]["intra_node_gb_per_s"], doc["links"]["inter_node_gb_per_s"] / 2)
    assert measured["ring_gb_per_s"] == pytest.approx(ring_rate, rel=1e-12)
    # the all-to-all term: layers x (bytes / measured rate + 2 calls x 1 peer x measured latency)
    layers = measured["attention_calls_per_step"]
    want = layers * (measured["all_to_all_bytes_per_rank"] / (doc["links"]["intra_node_gb_per_s"] * 1e9)
                     + 2 * doc["constants"]["a2a_latency_s"])
    got = measured["predicted"]["breakdown_s_per_step"]["all_to_all"]
    assert got == pytest.approx(want, rel=1e-4)
    assert got != pytest.approx(nominal["predicted"]["breakdown_s_per_step"]["all_to_all"], rel=1e-3)


def test_the_plan_says_which_link_figures_were_measured(tmp_path, run_cli, monkeypatch):
    """`plan` (terminal and --json) records which link figures a preflight measured, where and
    when (``cluster.measured_links``), and which are the descriptor's and the model's."""
    from datetime import datetime, timezone

    from sporch.orchestrator.contract.plan import Plan

    job = ROOT / "examples" / "tiny.yaml"
    lab = (ROOT / "clusters" / "slurmlab.yaml").read_text()
    (tmp_path / "slurmlab.yaml").write_text(lab)
    # one node measured: the all-to-all inside it (rate and latency), nothing between nodes
    pf = _write_preflight(tmp_path / "preflight", "slurmlab", 2, _preflight_data(2, 1, 0.011, 0.0, 0.003, 0.0))
    finished = 1795000000.0  # 2026-11-18T11:06:40Z
    result = json.loads((pf / "result.json").read_text())
    (pf / "result.json").write_text(json.dumps({**result, "provenance": {"finished_at": finished}}))
    cal = tmp_path / "cal.yaml"
    code, _, err = run_cli("calibrate", "--links", pf, "--cluster", tmp_path / "slurmlab.yaml", "--out", cal)
    assert code == 0, err
    when = datetime.fromtimestamp(finished, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert when == "2026-11-18T11:06:40Z" and yaml.safe_load(cal.read_text())["links"]["measured_at"] == when
    desc = tmp_path / "lab-cal.yaml"
    desc.write_text(lab + f"calibration: {cal}\n")

    def planned(cluster, *extra):
        code, out, err = run_cli("plan", "--cluster", cluster, job, *extra)
        assert code == 0, err
        return out

    plan = json.loads(planned(desc, "--json"))
    assert plan["schema_version"] == 4
    assert plan["cluster"]["measured_links"] == {
        "calibration": str(cal.resolve()), "preflight": str(pf.resolve()), "measured_at": when, "backend": "gloo",
        "figures": ["intra_node_gb_per_s", "a2a_latency_s"]}
    intra = 0.5 * 4 * 2**20 / 0.008 / 1e9
    assert plan["cluster"]["intra_node"]["gb_per_s"] == pytest.approx(intra, rel=1e-5)
    assert Plan.from_dict(plan).cluster.measured_links.figures == ["intra_node_gb_per_s", "a2a_latency_s"]
    monkeypatch.setenv("COLUMNS", "400")  # the line unwrapped (rich reads COLUMNS when it prints)
    (line,) = [row for row in planned(desc).splitlines() if row.startswith("links ")]
    (nominal,) = [row for row in planned(tmp_path / "slurmlab.yaml").splitlines() if row.startswith("links ")]
    assert line == (f"links     measured {when} by preflight {pf.resolve()} (gloo, calibration {cal.resolve()}): "
                    f"intra-node {intra:.4g} GB/s, a2a latency 3,000 us; descriptor's inter-node 1 GB/s; "
                    "model's hop latency 200 us"), line
    assert nominal.startswith("links     none measured: descriptor's intra-node 5 GB/s, inter-node 1 GB/s; "
                              "model's a2a latency 200 us, hop latency 200 us"), nominal
    assert json.loads(planned(tmp_path / "slurmlab.yaml", "--json"))["cluster"]["measured_links"] is None
    # plan --rank says it too, under its table (and in its JSON)
    (ranked,) = [row for row in planned(desc, "--rank").splitlines() if row.startswith("links ")]
    assert ranked == "links " + line[len("links     "):], ranked
    assert json.loads(planned(desc, "--rank", "--json"))["measured_links"] == plan["cluster"]["measured_links"]
    # a latency the descriptor sets itself is not the measured one any more
    inline = tmp_path / "lab-inline.yaml"
    inline.write_text(lab + f"calibration: {cal}\ncalibration_constants: {{a2a_latency_s: 0.0004}}\n")
    assert json.loads(planned(inline, "--json"))["cluster"]["measured_links"]["figures"] == ["intra_node_gb_per_s"]
    # a plan of schema 3 (before the record) still loads, with none; a descriptor may not write it
    plan3 = {**plan, "schema_version": 3, "cluster": {k: v for k, v in plan["cluster"].items() if k != "measured_links"}}
    old = Plan.from_dict(plan3)
    assert old.cluster.measured_links is None and old.schema_version == 4
    forged = tmp_path / "forged.yaml"
    forged.write_text(lab + "measured_links: {calibration: x, preflight: y, measured_at: null, backend: nccl, figures: []}\n")
    code, _, err = run_cli("plan", "--cluster", forged, job)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "'measured_links' is filled in from the calibration" in err, err
