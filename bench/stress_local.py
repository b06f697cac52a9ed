"""Spurious failures of local verify runs on a loaded CPU (issue 9, item 5).

    python bench/stress_local.py [--runs 100] [--load 2] [--parallel 1] [--timeout 300]
                                 [-- OVERRIDE ...]

Runs ``sporch run --local --cluster local examples/tiny.yaml --verify parallel.ring=4
parallel.ulysses=1`` ``--runs`` times while ``--load`` busy-loop processes keep the CPU loaded
(``--parallel`` runs at once load it further). Every run should complete and verify; a run that
does not is a spurious failure. Prints one line per failure (its run dir and error) and a table:
runs, completed, spurious failures. Exit status 1 when there was any.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OVERRIDES = ("parallel.ring=4", "parallel.ulysses=1")


def _spin(stop) -> None:  # a busy loop until told to stop
    x = 0
    while not stop.is_set():
        x = (x * 31 + 7) % 1000003


def one_run(index: int, folder: Path, overrides: list[str], timeout_s: float) -> tuple[int, bool, str]:
    """(index, ok, what went wrong) of one verify run in ``folder/run<index>``."""
    run_dir = folder / f"run{index}"
    cmd = [sys.executable, "-m", "sporch.orchestrator.cli.main", "run", "--local", "--cluster", "local",
           str(ROOT / "examples" / "tiny.yaml"), "--verify", *overrides, "--run-dir", str(run_dir),
           "--timeout", str(timeout_s)]
    env = {**os.environ, "SPORCH_HOME": str(folder / "home")}
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s + 60)
    except subprocess.TimeoutExpired:
        return index, False, "the run did not end"
    try:
        result = json.loads((run_dir / "result.json").read_text())
    except (OSError, ValueError):
        result = {}
    if proc.returncode == 0 and result.get("status") == "completed" and result.get("verified"):
        return index, True, ""
    why = result.get("error") or (proc.stderr.strip().splitlines() or ["exit %d" % proc.returncode])[-1]
    return index, False, f"{run_dir}: exit {proc.returncode}, status {result.get('status')}, ranks "\
                         f"{sorted(result.get('hosts') or {})}: {why}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--load", type=int, default=2, help="busy-loop processes beside the runs")
    p.add_argument("--parallel", type=int, default=1, help="runs at once")
    p.add_argument("--timeout", type=float, default=300.0, help="per run, seconds")
    p.add_argument("overrides", nargs="*", default=list(DEFAULT_OVERRIDES))
    args = p.parse_args(argv)

    stop = multiprocessing.Event()
    spinners = [multiprocessing.Process(target=_spin, args=(stop,), daemon=True) for _ in range(args.load)]
    for s in spinners:
        s.start()
    failures: list[str] = []
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="sporch-stress-") as tmp, \
                ThreadPoolExecutor(max_workers=args.parallel) as pool:
            futures = [pool.submit(one_run, i, Path(tmp), list(args.overrides), args.timeout)
                       for i in range(args.runs)]
            for fut in futures:
                index, ok, why = fut.result()
                if not ok:
                    failures.append(why)
                    print(f"run {index} failed: {why}", flush=True)
    finally:
        stop.set()
        for s in spinners:
            s.join(5)
    wall = time.monotonic() - started
    print(f"{'runs':>6} {'completed':>10} {'spurious failures':>18} {'load procs':>11} {'wall s':>8}")
    print(f"{args.runs:>6} {args.runs - len(failures):>10} {len(failures):>18} {args.load:>11} {wall:>8.0f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
