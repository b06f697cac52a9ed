"""Step caching on the tiny generate workload: steps skipped, denoising time and output
quality against the same run without a cache (docs/performance.md, "Step caching").

    python bench/step_cache_tiny.py                       # 20 steps, cfg2 x ulysses2, 4 CPU ranks
    python bench/step_cache_tiny.py --steps 30 --layout parallel.ulysses=4 parallel.cfg=1
    python bench/step_cache_tiny.py --extra model.depth=8 workload.height=128 workload.width=128
    python bench/step_cache_tiny.py --only taylorseer-2o1 taylorseer-3o1 magcache@0 magcache@0.1

Each row is one ``sporch run --local`` of examples/tiny-generate.yaml (tiny random weights, so
the relative changes are large and the thresholds are larger than a real model's); the
reference is the ``none`` row. ``denoise s`` is the ranks' denoise stage (result.json
metrics.stages), ``wall s`` the whole job; PSNR/SSIM are the campaign report's (sporch's
campaign/outputs.py) on the decoded frames, ``lat err`` the largest |latent difference|;
``ms/comp`` and ``ms/skip`` the median step time (rank 0) of computed steps (after the first)
and of skipped ones: what one skip saves, less sensitive to a busy machine than the totals.
A case the planner refuses (a cache not built for the model's diffusers class) prints its
one-line reason under the table. The runs keep their job records and history in the temporary
folder (``SPORCH_HOME``, ``SPORCH_HISTORY``), not the user's store.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

def _case(method: str, threshold: float) -> tuple[str, list[str]]:
    return f"{method}@{threshold:g}", [f"workload.cache.method={method}", f"workload.cache.threshold={threshold}"]


# tiny random weights change a lot per step (first-block residual 0.26-0.57, time projection
# 0.63-1.2 on 20 steps: result.json step_cache "changes"), hence thresholds far above a real model's
def _taylor(interval: int, order: int = 1) -> tuple[str, list[str]]:
    return f"taylorseer-{interval}o{order}", ["workload.cache.method=taylorseer", f"workload.cache.interval={interval}",
                                              f"workload.cache.order={order}", "workload.cache.warmup_steps=2"]


CASES = [("none", []), _case("fbcache", 0.35), _case("fbcache", 0.45), _case("fbcache", 0.6),
         _case("teacache", 1.0), _case("teacache", 2.0), _taylor(2), _taylor(3), _taylor(3, 2),
         # magcache: the ratios come from a first run at threshold 0 (measures them, skips nothing)
         _case("magcache", 0.0), _case("magcache", 0.1), _case("magcache", 0.3)]


def rank_records(folder: Path) -> dict[int, list[dict]]:
    """Each rank's step-cache records of its first prompt, one per cache context ("cond",
    "uncond", ...; the one path's generate records a list: per prompt, per context)."""
    out = {}
    for path in sorted((folder / "ranks").glob("rank*.json")):
        rec = json.loads(path.read_text())["metrics"].get("step_cache")
        if isinstance(rec, list) and rec:
            out[int(path.stem.removeprefix("rank"))] = [v for k, v in sorted(rec[0].items()) if isinstance(v, dict)]
    return out


def cache_summary(folder: Path, result: dict, steps: int) -> dict:
    """steps computed / skipped, whether every rank skipped the same steps, rank 0's skipped steps
    and measured changes. result.json's ``step_cache`` summary where it has one; else (the one
    path's generate records its cache per prompt and context, which the summary does not read
    yet) from the ranks' records."""
    summary = result.get("step_cache")
    if summary:
        return {"computed": summary["steps_computed"], "skipped": summary["steps_skipped"],
                "agree": summary["ranks_agree"], "skipped_steps": set(summary["skipped_by_rank"]["0"][0]),
                "changes": None}
    recs = rank_records(folder)
    if not recs:
        return {"computed": steps, "skipped": 0, "agree": True, "skipped_steps": set(), "changes": None}
    first = recs[min(recs)][0]
    return {"computed": first["steps_computed"], "skipped": first["steps_skipped"],
            "agree": all([r["skipped"] for r in v] == [r["skipped"] for r in recs[min(recs)]] for v in recs.values()),
            "skipped_steps": set(first["skipped"]), "changes": first.get("changes")}


def measured_ratios(cache: dict) -> list[float]:
    """A magcache run's measured magnitude ratios (rank 0's first prompt)."""
    return [1.0 if c is None else float(c) for c in cache["changes"] or []]


class Refused(Exception):
    """The planner refused the case (exit 2, one line): e.g. a cache not built for the model's class."""


def run(name: str, overrides: list[str], work: Path, steps: int, layout: list[str],
        extra: list[str] = ()) -> tuple[Path, dict]:
    folder = work / name.replace("@", "_")
    cmd = [sys.executable, "-m", "sporch.orchestrator.cli.main", "run", "--local", "--cluster", "local",
           str(ROOT / "examples" / "tiny-generate.yaml"), f"model.weights={work / 'tiny-wan-pipeline'}",
           f"workload.steps={steps}", *layout, *extra, *overrides, "--run-dir", str(folder)]
    home = work / "home"  # job records and history in the bench's temporary folder
    env = {**os.environ, "SPORCH_HOME": str(home), "SPORCH_HISTORY": str(home / "history.sqlite")}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    lines = proc.stderr.strip().splitlines()
    if proc.returncode == 2 and lines and lines[-1].startswith("sporch: error:"):
        raise Refused(lines[-1].removeprefix("sporch: error:").strip())
    if proc.returncode != 0:
        raise SystemExit(f"{name}: exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return folder, json.loads((folder / "result.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--layout", nargs="*", default=["parallel.cfg=2", "parallel.ulysses=2", "parallel.ring=1"])
    ap.add_argument("--extra", nargs="*", default=[], help="more job overrides for every run (a bigger model)")
    ap.add_argument("--only", nargs="*", help="case names to run (the none row always runs)")
    args = ap.parse_args()
    from sporch.orchestrator.campaign.outputs import compare, read_outputs

    cases = [c for c in CASES if c[0] == "none" or not args.only or c[0] in args.only]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rows, ref = [], None
        # creates the tiny pipeline first: a plan made before it exists differs (no config.json)
        run("setup", [], work, 1, args.layout, args.extra)
        ratios = None
        refused: list[tuple[str, str]] = []
        for name, overrides in cases:
            if name.startswith("magcache@") and name != "magcache@0":
                if ratios is None and any(n == "magcache@0" for n, _ in refused):
                    refused.append((name, "magcache@0 was refused"))
                    continue
                if ratios is None:
                    raise SystemExit(f"{name} needs the ratios of magcache@0: run it too (--only ... magcache@0)")
                overrides = [*overrides, f"workload.cache.ratios=[{','.join(f'{r:.6g}' for r in ratios)}]"]
            try:
                folder, result = run(name, overrides, work, args.steps, args.layout, args.extra)
            except Refused as why:
                refused.append((name, str(why)))
                continue
            cache = cache_summary(folder, result, args.steps)
            if name == "magcache@0":
                ratios = measured_ratios(cache)
            outs = read_outputs(folder, result)
            ref = ref or outs
            q = compare(ref, outs)
            stages = result["metrics"].get("stages", {})
            denoise = stages.get("denoise", {}).get("s") if isinstance(stages.get("denoise"), dict) else None
            skipped = cache["skipped_steps"]
            ms = result["metrics"].get("step_ms", [])
            comp = [t for i, t in enumerate(ms) if i not in skipped and i > 0]  # step 0 includes warm-up
            skip = [t for i, t in enumerate(ms) if i in skipped]
            rows.append((name, cache["computed"], cache["skipped"], cache["agree"], denoise, result.get("wall_s"), q,
                         statistics.median(comp) if comp else math.nan, statistics.median(skip) if skip else math.nan))
    print(f"tiny generate, {args.steps} steps, {' '.join(args.layout + args.extra)}, {os.cpu_count()} CPU cores")
    print(f"{'cache':14} {'computed':>8} {'skipped':>7} {'agree':>5} {'denoise s':>9} {'wall s':>7} "
          f"{'PSNR dB':>8} {'SSIM':>6} {'lat err':>8} {'ms/comp':>8} {'ms/skip':>8}")
    base = rows[0][4]
    for name, comp, skip, agree, den, wall, q, ms_c, ms_s in rows:
        speed = f" ({base / den:.2f}x)" if den and base else ""
        print(f"{name:14} {comp:8d} {skip:7d} {str(agree):>5} {den or float('nan'):9.2f} {wall or float('nan'):7.1f} "
              f"{q['psnr_db']:8.1f} {q['ssim']:6.3f} {q['latent_max_abs_err']:8.3f} {ms_c:8.0f} {ms_s:8.0f}{speed}")
    for name, why in refused:
        print(f"{name:14} refused: {why}")


if __name__ == "__main__":
    main()
