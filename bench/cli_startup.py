"""Wall time of ``sporch submit --dry-run`` against ``python -c "import torch"``.

    python bench/cli_startup.py [--runs 5] [--cluster a100x32] [--job examples/wan14b-720p.yaml]
                                [--no-bytecode-cache]

Prints a table with the median wall time of each, its CPU time (user + system: what a loaded,
shared machine disturbs least) and their ratios (target: wall ratio <= 0.15). Runs the
``sporch`` script next to this interpreter (not a shell shim), from the repository root.

Both commands run as an installed program does: with compiled bytecode. The children write and
read it under a temporary ``PYTHONPYCACHEPREFIX`` (nothing lands in the checkout or in
site-packages; an inherited ``PYTHONDONTWRITEBYTECODE`` is dropped for them), after one warm-up
run of each. ``--no-bytecode-cache`` keeps the caller's environment instead: with
``PYTHONDONTWRITEBYTECODE`` set and no ``__pycache__`` in the checkout, every sporch module is
compiled from source on every run (what this script measured before it set a prefix).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def sporch_command() -> list[str]:
    exe = Path(sys.executable).parent / "sporch"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("sporch")
    return [found] if found else [sys.executable, "-m", "sporch.orchestrator.cli.main"]


def one_run(cmd: list[str], env: dict) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system of the child) of one run of ``cmd``. On a shared,
    loaded machine the wall time waits for other processes; the CPU time much less."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def medians(commands: list[list[str]], runs: int, env: dict) -> list[tuple[float, float]]:
    """(median wall, median CPU) of each command, run in turns (a, b, a, b, ...) so that a change
    of the machine's load falls on all of them alike."""
    times: list[list[tuple[float, float]]] = [[] for _ in commands]
    for _ in range(runs):
        for cmd, out in zip(commands, times):
            out.append(one_run(cmd, env))
    return [(statistics.median(w for w, _ in t), statistics.median(c for _, c in t)) for t in times]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cluster", default="a100x32")
    ap.add_argument("--job", default="examples/wan14b-720p.yaml")
    ap.add_argument("--no-bytecode-cache", action="store_true",
                    help="run with the caller's environment (no bytecode prefix; see the module docstring)")
    args = ap.parse_args()
    dry = sporch_command() + ["submit", "--dry-run", "--cluster", args.cluster, args.job]
    torch = [sys.executable, "-c", "import torch"]
    with tempfile.TemporaryDirectory(prefix="sporch-bench-pyc-") as prefix:
        env = dict(os.environ)
        if not args.no_bytecode_cache:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = prefix
        medians([dry, torch], 1, env)  # warm caches (bytecode, template cache, file system)
        (t_dry, c_dry), (t_torch, c_torch) = medians([dry, torch], args.runs, env)
    rows = [
        ("sporch submit --dry-run", f"{t_dry:.3f} s", f"{c_dry:.3f} s"),
        ('python -c "import torch"', f"{t_torch:.3f} s", f"{c_torch:.3f} s"),
        ("ratio (target <= 0.15)", f"{t_dry / t_torch:.3f}", f"{c_dry / c_torch:.3f}"),
    ]
    width = max(len(r[0]) for r in rows)
    cache = "caller's environment" if args.no_bytecode_cache else "bytecode cached"
    print(f"{'command'.ljust(width)}  {'wall':>8}  {'cpu':>8}   median of {args.runs} ({cache})")
    for name, wall, cpu in rows:
        print(f"{name.ljust(width)}  {wall:>8}  {cpu:>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
