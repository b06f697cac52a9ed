"""Low-bit weights (``model.quant``) on the tiny model: resident weight bytes per rank, the
planner's estimate of them, step time, and the error of the final latents against float32
(docs/performance.md, "Low-bit weights").

    python bench/quant_tiny.py                         # examples/tiny.yaml, ulysses 4 on 4 CPU ranks
    python bench/quant_tiny.py --extra model.depth=8 model.hidden=256 model.num_heads=4 model.ffn_dim=1024

Each mode runs twice with ``sporch run --local``: a ``benchmark`` job (every rank's
``resident_parameter_bytes`` and median step time, result ranks/rankN.json) and an ``inference``
job (``workload.steps`` Euler steps; the final latents, compared with the ``none`` run's:
largest |difference| and that over the reference's largest |value|). The float8 modes need a
GPU (sm89+) and are refused on the CPU; on a GPU pass ``--cluster`` and ``--modes``. The runs keep
their job records and history in the temporary folder (``SPORCH_HOME``, ``SPORCH_HISTORY``), not
the user's store.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from sporch.orchestrator.contract.plan import Plan

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "examples" / "tiny.yaml"


def run(folder: Path, cluster: str, overrides: list[str]) -> Path:
    cmd = [sys.executable, "-m", "sporch.orchestrator.cli.main", "run", "--local", "--cluster", cluster, str(JOB),
           *overrides, "--run-dir", str(folder)]
    home = folder.parent / "home"  # job records and history in the bench's temporary folder
    env = {**os.environ, "SPORCH_HOME": str(home), "SPORCH_HISTORY": str(home / "history.sqlite")}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(overrides)}: exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return folder


def rank_metrics(folder: Path) -> list[dict]:
    return [json.loads(p.read_text())["metrics"] for p in sorted((folder / "ranks").glob("rank*.json"))]


def latents(folder: Path):
    from safetensors.numpy import load_file

    [path] = sorted(folder.rglob("latents_dp0.safetensors"))
    return load_file(str(path))["latents"].astype("float64")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cluster", default="local")
    ap.add_argument("--modes", nargs="*", default=["none", "int8_weight"])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--layout", nargs="*", default=["parallel.ulysses=4", "parallel.ring=1", "parallel.cfg=1"])
    ap.add_argument("--extra", nargs="*", default=[], help="more job overrides (a bigger model, workload.dtype)")
    args = ap.parse_args()
    import numpy as np

    rows, ref = [], None
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ["none"] + [m for m in args.modes if m != "none"]:
            common = [*args.layout, *args.extra, f"model.quant={mode}"]
            bench = run(Path(tmp) / f"bench-{mode}", args.cluster,
                        ["workload.kind=benchmark", "workload.warmup=1", "workload.repeat=5", *common])
            plan = Plan.load(str(bench / "plan.json"))
            per_rank = rank_metrics(bench)
            resident = [int(m["resident_parameter_bytes"]) for m in per_rank]
            step_ms = max(float(m["step_ms_median"]) for m in per_rank)
            inf = run(Path(tmp) / f"inference-{mode}", args.cluster,
                      ["workload.kind=inference", f"workload.steps={args.steps}", *common])
            lat = latents(inf)
            ref = lat if ref is None else ref
            err = float(np.max(np.abs(lat - ref)))
            rows.append((mode, resident, int(plan.estimates.weights.parameter_bytes_full), step_ms, err,
                         err / float(np.max(np.abs(ref)))))
    print(f"tiny model ({' '.join(args.layout + args.extra) or 'examples/tiny.yaml'}), {args.steps} inference steps, "
          f"cluster {args.cluster}")
    print(f"{'quant':12} {'resident bytes per rank':>26} {'plan estimate':>13} {'vs none':>7} {'step ms':>8} "
          f"{'max latent err':>14} {'rel':>8}")
    base = rows[0][1][0]
    for mode, resident, est, ms, err, rel in rows:
        ranks = ",".join(str(r) for r in sorted(set(resident)))
        print(f"{mode:12} {ranks:>26} {est:13d} {resident[0] / base:7.3f} {ms:8.2f} {err:14.3e} {rel:8.2e}")


if __name__ == "__main__":
    main()
