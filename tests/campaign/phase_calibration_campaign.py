"""The phase calibration campaigns of tests/campaign/test_phase_calibration_live.py and
bench/phase_calibration_lab.py: the tiny generate job (examples/tiny-generate.yaml's workload, tiny
random weights) on the loopback Slurm lab with one fake GPU per node (calibration_campaign.CLUSTER:
one rank per node), one point at a time. The test runs it twice on 1 rank (:data:`CAMPAIGN`), the
bench three times (:data:`BENCH`). One rank: its phases are its own work; with more, a rank
waiting in a gloo collective spins on the machine's 2 shared cores and the leader's phases
measure the contention (a cfg-2 point's encode swung from 1.4 to 15.8 s at a load average of 40),
which no cost-model term describes (docs/plan.md, Limits).
Each point's result.json times its phases (metrics.stages: startup, load, encode, denoise, decode,
save); `sporch calibrate` fits the phases' constants to them."""

from __future__ import annotations

import json
from pathlib import Path

from tests.campaign.calibration_campaign import CLUSTER, CLUSTER_FILE

CAMPAIGN = {
    "name": "phases",
    "base": {
        "model": {"preset": "tiny"},
        "workload": {"kind": "generate", "prompt": "a red fox running in snow", "negative_prompt": "blurry",
                     "frames": 9, "height": 64, "width": 64, "steps": 4, "guidance_scale": 5.0, "dtype": "float32",
                     "seed": 0, "tiny_weights": True},
        "resources": {"time": "00:08:00"},
    },
    "matrix": {"nodes": [1], "layouts": [{"ulysses": 1, "ring": 1, "cfg": 1}], "repeats": 2},
    # each point its own job (no pack): every one pays its start-up and its first steps' warm-up
    "run": {"throttle": 1, "serial": True, "retries": 0, "pack": False},
}
POINTS = 2
#: The same job three times.
BENCH = {**CAMPAIGN, "matrix": {**CAMPAIGN["matrix"], "repeats": 3}}
#: examples/tiny-generate.yaml's overrides that give the campaign's layout (the bench re-plans the
#: example so: one rank, its two CFG passes on it).
BENCH_OVERRIDES = ("parallel.ulysses=1", "parallel.cfg=1", "resources.nodes=1")
#: The phases a generate point times (metrics.stages) and `sporch calibrate` fits.
PHASES = ("startup", "load", "encode", "denoise", "decode", "save")


def write_campaign(folder: Path, campaign: dict = CAMPAIGN) -> tuple[Path, dict]:
    """The cluster descriptor and the campaign file in ``folder``; the tiny weights are made in
    ``folder``/tiny-wan-pipeline by the first point (workload.tiny_weights)."""
    (folder / CLUSTER_FILE).write_text(CLUSTER)
    base = {**campaign["base"], "model": {**campaign["base"]["model"], "weights": str(folder / "tiny-wan-pipeline")}}
    doc = {**campaign, "base": base, "output_dir": str(folder),
           "matrix": {**campaign["matrix"], "clusters": [str(folder / CLUSTER_FILE)]}}
    path = folder / "phases.yaml"
    path.write_text(json.dumps(doc))
    return path, doc


def calibrated_descriptor(folder: Path, calibration: str) -> Path:
    """A copy of the lab's descriptor that references the calibration file ``calibration``."""
    desc = folder / "slurmlab-1gpu-phases.yaml"
    desc.write_text(CLUSTER + f"calibration: {calibration}\n")
    return desc


def measured_phases(result: dict) -> dict[str, float]:
    """A point's result.json phases (seconds), in PHASES order."""
    stages = (result.get("metrics") or {}).get("stages") or {}
    return {ph: float(stages[ph]["s"]) for ph in PHASES if isinstance(stages.get(ph), dict)}
