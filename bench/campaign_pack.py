"""Packed vs unpacked campaign points on the loopback Slurm lab (issue 20 item 1).

    sudo bash scripts/slurmlab/start.sh          # once
    python bench/campaign_pack.py [--repeat 3]

Runs the 12-point tiny campaign (nodes 1 and 2 x three layouts x two shapes, the tiny model's
benchmark workload, as tests/campaign/test_campaign_run.py) through ``sporch campaign run`` twice
per repeat: ``run.pack: false`` (one array task per point) and ``run.pack: true`` (one task per
resource group), alternating. Prints the wall time of each campaign run (submit to all points
done), the packed/unpacked ratio, and every point's median step time under both, so that the step
figures can be seen to agree within noise (the steps run the same code; only the launches differ).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE = {"model": {"preset": "tiny"},
        "workload": {"kind": "benchmark", "frames": 5, "height": 32, "width": 32, "guidance_scale": 2.0,
                     "dtype": "float32", "warmup": 1, "repeat": 2},
        "resources": {"time": "00:05:00"}}
MATRIX = {"clusters": ["slurmlab"], "nodes": [1, 2],
          "layouts": [{"ulysses": 2, "ring": "auto"}, {"ulysses": 1, "ring": "auto"},
                      {"cfg": 2, "ulysses": 1, "ring": "auto"}],
          "shapes": [{"frames": 5, "height": 32, "width": 32}, {"frames": 5, "height": 32, "width": 64}]}


def run_campaign(folder: Path, name: str, pack: bool) -> tuple[float, dict[str, float]]:
    """(wall seconds of ``campaign run``, point id -> step_ms_median)."""
    doc = {"name": name, "output_dir": str(folder), "base": BASE, "matrix": MATRIX,
           "run": {"pack": pack, "retries": 0}}
    path = folder / f"{name}.yaml"
    path.write_text(json.dumps(doc))
    env = {**os.environ, "SPORCH_HOME": str(folder / "home"), "SPORCH_HISTORY": str(folder / "history.sqlite")}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", "campaign", "run", str(path),
                           "--interval", "1"], cwd=folder, env=env, capture_output=True, text=True, timeout=3600)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{name}: campaign run failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
    steps = {}
    for d in sorted((folder / name / "points").iterdir()):
        res = json.loads((d / "result.json").read_text())
        steps[d.name] = res["metrics"]["step_ms_median"]
    return wall, steps


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=1, help="campaign runs of each kind (alternating)")
    args = p.parse_args(argv)
    walls: dict[bool, list[float]] = {False: [], True: []}
    steps: dict[bool, dict[str, list[float]]] = {False: {}, True: {}}
    with tempfile.TemporaryDirectory(prefix="sporch-pack-bench-") as tmp:
        for i in range(args.repeat):
            for pack in (False, True):
                name = f"{'packed' if pack else 'unpacked'}{i}"
                wall, per_point = run_campaign(Path(tmp), name, pack)
                walls[pack].append(wall)
                for pid, ms in per_point.items():
                    steps[pack].setdefault(pid, []).append(ms)
                print(f"{name}: {wall:.1f} s", file=sys.stderr, flush=True)
    unpacked, packed = statistics.median(walls[False]), statistics.median(walls[True])
    print(f"{'campaign':>10} {'points':>7} {'runs':>5} {'median wall s':>14}")
    print(f"{'unpacked':>10} {12:>7} {args.repeat:>5} {unpacked:>14.1f}")
    print(f"{'packed':>10} {12:>7} {args.repeat:>5} {packed:>14.1f}")
    print(f"packed / unpacked wall time: {packed / unpacked:.2f}")
    print()
    print(f"{'point':<44} {'unpacked step ms':>17} {'packed step ms':>15} {'ratio':>6}")
    for pid in sorted(steps[False]):
        a, b = statistics.median(steps[False][pid]), statistics.median(steps[True][pid])
        print(f"{pid:<44} {a:>17.2f} {b:>15.2f} {b / a:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
