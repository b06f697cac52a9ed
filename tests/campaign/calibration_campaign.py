"""The calibration campaign of tests/campaign/test_calibration_live.py and
bench/calibration_lab.py (run for real on the loopback Slurm lab: the chain checked, the timings
printed) and tests/campaign/test_calibration_injected.py (the same points, timed by known
constants): a 2-block model with hidden 128 on the lab with ONE fake GPU per node, 1 rank
on 1 node and Ulysses 2, ring 2, dp 2 across 2 nodes, at 1,024, 2,048 and 4,096 tokens. The
2-node points at 2,048 tokens are held back from the fit and predicted from it."""

from __future__ import annotations

import json
from pathlib import Path

from sporch.orchestrator.contract.plan import Plan

#: The lab (clusters/slurmlab.yaml) with one fake GPU a node: a rank per node, one CPU a rank.
CLUSTER = """\
name: slurmlab-1gpu
description: the loopback Slurm lab with one fake GPU (one rank) per node
nodes: 4
gpus_per_node: 1
gpu: {model: fake, memory_gib: 4, bf16_tflops: 0.1}
intra_node: {fabric: pcie, gb_per_s: 5}
inter_node: {fabric: ethernet, gb_per_s: 1, nics_per_node: 1}
slurm: {partition: lab, time: "00:10:00", cpus_per_task: 1, exclusive: false, gpu_directive: gpus-per-node}
env: {GLOO_SOCKET_IFNAME: lo}
"""
CLUSTER_FILE = "slurmlab-1gpu.yaml"
SHAPES = [{"seq_len": 1024}, {"seq_len": 2048}, {"seq_len": 4096}]
HELD_BACK_SEQ = 2048
CAMPAIGN = {
    "name": "calibrate",
    "base": {
        "model": {"preset": "tiny", "hidden": 128, "num_heads": 4, "num_kv_heads": 4, "head_dim": 32, "ffn_dim": 256},
        "workload": {"kind": "benchmark", "batch": 2, "guidance_scale": 1.0, "dtype": "float32", "warmup": 1,
                     "repeat": 3},
        "resources": {"time": "00:05:00"},
    },
    "matrix": {"nodes": [1, 2], "shapes": SHAPES,
               "layouts": [{"ulysses": 1, "ring": 1}, {"ulysses": 2, "ring": 1}, {"ulysses": 1, "ring": 2},
                           {"dp": 2, "ulysses": 1, "ring": 1}]},
    "run": {"throttle": 1, "serial": True, "retries": 0},
}
#: The constants `sporch calibrate --fit` fits.
FIT = "gemm_efficiency,attention_efficiency,ring_merge_bytes,a2a_latency_s,p2p_latency_s,layer_overhead_s"
POINTS = 12  # 1 rank on 1 node, 3 layouts on 2 nodes, three shapes; the rest skipped


def write_campaign(folder: Path) -> tuple[Path, dict]:
    """The cluster descriptor and the campaign file (JSON is YAML) in ``folder``, the campaign
    writing into ``folder``/calibrate: (campaign file, its document)."""
    (folder / CLUSTER_FILE).write_text(CLUSTER)
    doc = {**CAMPAIGN, "output_dir": str(folder),
           "matrix": {**CAMPAIGN["matrix"], "clusters": [str(folder / CLUSTER_FILE)]}}
    path = folder / "calibrate.yaml"
    path.write_text(json.dumps(doc))
    return path, doc


def is_held_back(plan) -> bool:
    """The points left out of the fit: 2 ranks (2 nodes) at HELD_BACK_SEQ tokens."""
    return plan.world_size == 2 and plan.sequence.seq_len == HELD_BACK_SEQ


def calibrated_descriptor(folder: Path, calibration: str) -> Path:
    """A copy of the descriptor in ``folder`` that references the calibration file ``calibration``
    (a path relative to ``folder``, or absolute)."""
    desc = folder / "slurmlab-1gpu-cal.yaml"
    desc.write_text(CLUSTER + f"calibration: {calibration}\n")
    return desc


def points(root: Path) -> dict[str, tuple[Plan, dict]]:
    """The campaign folder's points: id -> (its plan, its result.json)."""
    return {d.name: (Plan.load(str(d / "plan.json")), json.loads((d / "result.json").read_text()))
            for d in sorted((root / "points").iterdir())}


def calibrate_args(root: Path, out: Path, held: list[str]) -> list[str]:
    """`sporch calibrate`'s arguments: the campaign at ``root`` fitted (FIT) without ``held``."""
    args = ["calibrate", str(root), "--out", str(out), "--fit", FIT]
    for pid in held:
        args += ["--exclude", pid]
    return args
