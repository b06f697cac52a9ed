"""Every phase of the tiny generate job calibrated on the loopback Slurm lab: measured, predicted
with the defaults, and re-planned with the calibration.

    python bench/phase_calibration_lab.py [--out DIR] [--reuse DIR]

Runs the campaign of tests/campaign/phase_calibration_campaign.py (the tiny generate job on one
rank of the lab with one fake GPU per node, three times, each its own Slurm job) through
`sporch campaign run`, fits the cost model to every point's phases (result.json's metrics.stages)
with `sporch calibrate`, prints the calibration file's phases, then re-plans each point with a
descriptor that references the file (what `sporch plan` shows) and prints, per phase, the measured
seconds beside the prediction before (the defaults: the cpu row) and after, with their errors.
Needs the lab (scripts/slurmlab; ``sinfo`` answers); a few minutes on a quiet 2-core machine.

CPU timings on shared cores swing (docs/plan.md); the test suite checks the chain
(tests/campaign/test_phase_calibration_live.py), this prints the figures.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.campaign.phase_calibration_campaign: the campaign the test runs

from tests.campaign.calibration_campaign import CLUSTER_FILE  # noqa: E402
from tests.campaign.calibration_campaign import points as campaign_points  # noqa: E402
from tests.campaign.phase_calibration_campaign import (BENCH, BENCH_OVERRIDES, PHASES,  # noqa: E402
                                                       calibrated_descriptor, measured_phases, write_campaign)


#: What the points determine: each phase's constants and, for the steps (one layout: the same
#: inputs three times), the per-layer overhead alone (more step constants would be a guess).
FIT = ("layer_overhead_s,startup_s,process_group_s,load_fixed_s,encode_fixed_s,decode_fixed_s,decode_bytes_per_pixel,"
       "save_fixed_s,save_s_per_mpixel")


def sporch(*args: str, env: dict, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="keep the campaign here (default: a temporary folder)")
    ap.add_argument("--reuse", type=Path, help="a folder --out kept: calibrate and print it, run nothing")
    args = ap.parse_args()
    from sporch.orchestrator.config.cluster import load_cluster_file
    from sporch.orchestrator.plan.cost_constants import cluster_constants
    from sporch.orchestrator.plan.layouts import compact
    from sporch.orchestrator.plan.plan_prediction import predict_plan

    with tempfile.TemporaryDirectory(prefix="sporch-bench-phases-") as tmp:
        folder = (args.reuse or args.out or Path(tmp)).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "SPORCH_HOME": str(folder / "home")}
        load_before = os.getloadavg()
        if not args.reuse:
            path, _ = write_campaign(folder, BENCH)
            p = sporch("campaign", "run", str(path), "--interval", "1", env=env, cwd=folder, timeout=3000)
            if p.returncode != 0:
                raise SystemExit(f"sporch campaign run failed ({p.returncode}):\n{p.stdout[-3000:]}{p.stderr[-3000:]}")
        load_after = os.getloadavg()
        root = folder / "phases"
        cal = folder / "slurmlab-phases.yaml"
        p = sporch("calibrate", str(root), "--out", str(cal), "--force", "--fit", FIT, env=env, cwd=folder, timeout=600)
        if p.returncode != 0:
            raise SystemExit(f"sporch calibrate failed ({p.returncode}):\n{p.stdout}{p.stderr}")
        print(p.stdout)
        print(f"# {cal}")
        print(cal.read_text())
        consts, _ = cluster_constants(load_cluster_file(calibrated_descriptor(folder, cal.name)))
        defaults, _ = cluster_constants(load_cluster_file(folder / CLUSTER_FILE))
        print(f"{'point':<14} {'layout':>8} {'phase':<8} {'measured':>9} {'defaults':>9} {'err':>7} "
              f"{'calibrated':>10} {'err':>7}")
        worst = 0.0
        for pid, (plan, result) in campaign_points(root).items():
            measured = measured_phases(result)
            before, after = predict_plan(plan, defaults), predict_plan(plan, consts)
            for ph in PHASES:
                if ph not in measured:
                    continue
                m, b, a = measured[ph], before.phase(ph), after.phase(ph)
                worst = max(worst, abs(a / m - 1))
                print(f"{pid[:14]:<14} {compact(plan.layout):>8} {ph:<8} {m:>8.3f}s {b:>8.3f}s {b / m - 1:>+7.0%} "
                      f"{a:>9.3f}s {a / m - 1:>+7.0%}")
        print(f"largest calibrated error over the phases: {worst:.0%}; load average (1 min) before "
              f"{load_before[0]:.1f}, after {load_after[0]:.1f} on {os.cpu_count()} CPUs\n")
        replan(folder, root, cal, env)
    return 0


def replan(folder: Path, root: Path, cal: Path, env: dict) -> None:
    """`sporch plan --json` of examples/tiny-generate.yaml (its weights the campaign's) on the lab
    descriptor without and with the calibration: each phase beside the points' measured mean."""
    import json

    import yaml

    job = yaml.safe_load((ROOT / "examples" / "tiny-generate.yaml").read_text())
    job["model"]["weights"] = str(folder / "tiny-wan-pipeline")
    job_file = folder / "tiny-generate.yaml"
    job_file.write_text(yaml.safe_dump(job))
    plans = {}
    for name, desc in (("defaults", folder / CLUSTER_FILE), ("calibrated", calibrated_descriptor(folder, cal.name))):
        p = sporch("plan", "--cluster", str(desc), str(job_file), *BENCH_OVERRIDES, "--json", env=env, cwd=folder,
                   timeout=300)
        if p.returncode != 0:
            raise SystemExit(f"sporch plan failed ({p.returncode}):\n{p.stdout}{p.stderr}")
        plans[name] = json.loads(p.stdout)["estimates"]["predicted"]["phases_s"]
    measured = [measured_phases(result) for _, result in campaign_points(root).values()]
    print(f"re-plan of {job_file.name} {' '.join(BENCH_OVERRIDES)} (sporch plan --json, phases_s) beside the "
          f"{len(measured)} points' mean:")
    print(f"{'phase':<8} {'measured':>9} {'before':>9} {'err':>7} {'after':>9} {'err':>7}")
    for ph in PHASES:
        values = [m[ph] for m in measured if ph in m]
        if not values:
            continue
        mean = sum(values) / len(values)
        b, a = plans["defaults"][ph], plans["calibrated"][ph]
        print(f"{ph:<8} {mean:>8.3f}s {b:>8.3f}s {b / mean - 1:>+7.0%} {a:>8.3f}s {a / mean - 1:>+7.0%}")


if __name__ == "__main__":
    raise SystemExit(main())
