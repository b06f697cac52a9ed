"""Expand and group a 1,000-point campaign; print the time (target: under 1 s). Never imports torch.

    python bench/campaign_expand.py [--runs 3]

The campaign: the tiny model on h100x64 (8 nodes x 8), nodes 1..8 (pow2), every accepted layout,
two dtypes and as many sequence lengths as it takes to reach 1,000 points (each point its own plan).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

CAMPAIGN = {
    "name": "bench",
    "base": {"model": {"preset": "tiny"},
             "workload": {"kind": "benchmark", "guidance_scale": 3.0, "batch": 2, "seq_len": 4096}},
    "matrix": {"clusters": ["h100x64"], "nodes": "pow2", "layouts": "all",
               "shapes": [{"seq_len": 4096}, {"seq_len": 8192}], "dtypes": ["bfloat16", "float16"]},
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--points", type=int, default=1000)
    args = p.parse_args()
    from sporch.orchestrator.campaign.expand import expand
    from sporch.orchestrator.campaign.groups import group_points
    from sporch.orchestrator.campaign.spec import campaign_from_dict
    from sporch.orchestrator.config.cluster import find_cluster

    clusters = {"h100x64": find_cluster("h100x64")}
    per_shape = len(expand(campaign_from_dict(CAMPAIGN), clusters).points) // len(CAMPAIGN["matrix"]["shapes"])
    shapes = [{"seq_len": 4096 * (k + 1)} for k in range(-(-args.points // per_shape))]
    campaign = campaign_from_dict({**CAMPAIGN, "matrix": {**CAMPAIGN["matrix"], "shapes": shapes}})
    times, n_points, n_groups = [], 0, 0
    for _ in range(args.runs):
        start = time.perf_counter()
        exp = expand(campaign, clusters)
        groups = group_points(exp.points)
        times.append(time.perf_counter() - start)
        n_points, n_groups = len(exp.points), len(groups)
    assert "torch" not in sys.modules, "expanding a campaign imported torch"
    best, median = min(times), statistics.median(times)
    print(f"{'points':>8} {'groups':>7} {'skipped':>8} {'median s':>9} {'best s':>7} {'target s':>9}")
    print(f"{n_points:>8} {n_groups:>7} {len(exp.skipped):>8} {median:>9.3f} {best:>7.3f} {1.0:>9.1f}")
    return 0 if median < 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
