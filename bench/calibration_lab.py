"""Calibration on the loopback Slurm lab: held-back points, predicted beside measured.

    python bench/calibration_lab.py [--out DIR] [--reuse DIR]

Runs the campaign of tests/campaign/test_calibration_live.py (tests/campaign/calibration_campaign.py:
12 points of a 2-block model on the lab with one fake GPU per node, one point at a time) through
`sporch campaign run`, fits the cost model on the 9 training points with `sporch calibrate
--exclude` (the 3 two-node points at 2,048 tokens held back), and prints a table: each point's
measured step (median), its prediction from the calibrated constants and from the defaults (the
fake GPU's table row), and their errors; then the fit's rms and the machine's load average before
and after. Needs the lab (scripts/slurmlab; ``sinfo`` answers); about 3 minutes on a quiet
2-core machine.

The test suite checks the chain on the lab (tests/campaign/test_calibration_live.py) and the
prediction quality on injected timings (tests/campaign/test_calibration_injected.py); how close
the held-back points come on real CPU timings depends on what else shares the cores, so it is
read here, never asserted. ``--out DIR`` keeps the campaign (default: a temporary folder);
``--reuse DIR`` prints the table of a campaign folder this script kept (DIR/calibrate), without
running anything.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.campaign.calibration_campaign: the campaign the test runs

from tests.campaign.calibration_campaign import (CLUSTER_FILE, calibrate_args, calibrated_descriptor,  # noqa: E402
                                                 is_held_back, points, write_campaign)


def sporch(*args: str, env: dict, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def run_campaign(folder: Path, env: dict) -> Path:
    """The campaign through `sporch campaign run` on the lab: its folder (every point done)."""
    path, _ = write_campaign(folder)
    p = sporch("campaign", "run", str(path), "--interval", "1", env=env, cwd=folder, timeout=1800)
    if p.returncode != 0:
        raise SystemExit(f"sporch campaign run failed ({p.returncode}):\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return folder / "calibrate"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="keep the campaign here (default: a temporary folder)")
    ap.add_argument("--reuse", type=Path, help="a folder --out kept: print its table, run nothing")
    args = ap.parse_args()
    from sporch.orchestrator.config.cluster import load_cluster_file
    from sporch.orchestrator.plan.cost_constants import cluster_constants
    from sporch.orchestrator.plan.layouts import compact
    from sporch.orchestrator.plan.plan_prediction import predict_plan

    with tempfile.TemporaryDirectory(prefix="sporch-bench-calibration-") as tmp:
        folder = (args.reuse or args.out or Path(tmp)).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "SPORCH_HOME": str(folder / "home")}
        load_before = os.getloadavg()
        root = folder / "calibrate" if args.reuse else run_campaign(folder, env)
        load_after = os.getloadavg()
        measured = points(root)
        held = sorted(pid for pid, (plan, _) in measured.items() if is_held_back(plan))
        cal = folder / "slurmlab-calibration.yaml"
        p = sporch(*calibrate_args(root, cal, held), "--force", env=env, cwd=folder, timeout=300)
        if p.returncode != 0:
            raise SystemExit(f"sporch calibrate failed ({p.returncode}):\n{p.stdout}{p.stderr}")
        consts, _ = cluster_constants(load_cluster_file(calibrated_descriptor(folder, cal.name)))
        defaults, _ = cluster_constants(load_cluster_file(folder / CLUSTER_FILE))

        rows, fitted_errors = [], []
        for pid, (plan, result) in measured.items():
            step_ms = result["metrics"]["step_ms_median"]
            calibrated = predict_plan(plan, consts).step_s * 1e3
            default = predict_plan(plan, defaults).step_s * 1e3
            if pid not in held:
                fitted_errors.append(calibrated / step_ms - 1)
            rows.append(("held back" if pid in held else "fitted", pid, compact(plan.layout), plan.sequence.seq_len,
                         step_ms, calibrated, calibrated / step_ms - 1, default, default / step_ms - 1))
    rows.sort(key=lambda r: (r[0] != "held back", r[3], r[2], r[1]))
    print(f"{'point':<9} {'id':<14} {'layout':>8} {'tokens':>6} {'measured':>9} {'calibrated':>10} {'err':>7} "
          f"{'defaults':>9} {'err':>7}")
    for kind, pid, layout, tokens, m, c, ce, d, de in rows:
        print(f"{kind:<9} {pid[:14]:<14} {layout:>8} {tokens:>6} {m:>7.1f}ms {c:>8.1f}ms {ce:>+7.1%} "
              f"{d:>7.1f}ms {de:>+7.1%}")
    rms = math.sqrt(sum(e * e for e in fitted_errors) / len(fitted_errors))
    load = "reused: run earlier" if args.reuse else f"before {load_before[0]:.1f}, after {load_after[0]:.1f}"
    print(f"fitted points: {len(fitted_errors)}, rms error {rms:.1%}; load average (1 min) {load} "
          f"on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
