"""Wall time of ``sporch submit --dry-run`` against ``python -c "import torch"``.

    python bench/cli_startup.py [--runs 5] [--cluster a100x32] [--job examples/wan14b-720p.yaml]

Prints a table with the median of each and their ratio (target: <= 0.2). Runs the
``sporch`` script next to this interpreter (not a shell shim), from the repository root.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def sporch_command() -> list[str]:
    exe = Path(sys.executable).parent / "sporch"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("sporch")
    return [found] if found else [sys.executable, "-m", "sporch.orchestrator.cli.main"]


def median_wall(cmd: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cluster", default="a100x32")
    ap.add_argument("--job", default="examples/wan14b-720p.yaml")
    args = ap.parse_args()
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "0")
    dry = sporch_command() + ["submit", "--dry-run", "--cluster", args.cluster, args.job]
    torch = [sys.executable, "-c", "import torch"]
    median_wall(dry, 1)  # warm caches (bytecode, template cache)
    t_dry = median_wall(dry, args.runs)
    t_torch = median_wall(torch, args.runs)
    ratio = t_dry / t_torch
    rows = [
        ("sporch submit --dry-run", f"{t_dry:.3f} s"),
        ('python -c "import torch"', f"{t_torch:.3f} s"),
        ("ratio (target <= 0.2)", f"{ratio:.3f}"),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"{'command'.ljust(width)}  median of {args.runs}")
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
