"""Plan a 1,080-point and a 10,000-point campaign; print the CPU time of each (targets: 0.4 s and
2 s). Never imports torch.

    python bench/campaign_expand.py [--runs 3] [--sizes 1080,10000]

The campaign: the tiny model on h100x64 (8 nodes x 8), nodes 1..8 (pow2), every accepted layout,
two dtypes and as many sequence lengths as it takes to reach each size (each point its own plan;
the largest stays within a campaign's 10,000 points, so it may hold a few less). Timed, per size:
``expand`` + ``group_points`` (what every campaign command does first) and what `sporch campaign
plan FILE --json` adds on top (each point's record and the JSON text), in CPU seconds
(time.process_time: the machine's other load does not count), the best of --runs.
"""

from __future__ import annotations

import argparse
import sys
import time

CAMPAIGN = {
    "name": "bench",
    "base": {"model": {"preset": "tiny"},
             "workload": {"kind": "benchmark", "guidance_scale": 3.0, "batch": 2, "seq_len": 4096}},
    "matrix": {"clusters": ["h100x64"], "nodes": "pow2", "layouts": "all",
               "shapes": [{"seq_len": 4096}, {"seq_len": 8192}], "dtypes": ["bfloat16", "float16"]},
}
#: CPU seconds each size must stay under (issue 49).
TARGETS = {1080: 0.4, 10000: 2.0}


def campaign_of(points: int, clusters: dict):
    """The campaign with as many sequence lengths as make at least ``points`` points, at most 10,000."""
    from sporch.orchestrator.campaign.expand import expand
    from sporch.orchestrator.campaign.spec import MAX_POINTS, campaign_from_dict

    per_shape = len(expand(campaign_from_dict(CAMPAIGN), clusters).points) // len(CAMPAIGN["matrix"]["shapes"])
    shapes = min(-(-points // per_shape), MAX_POINTS // per_shape)
    return campaign_from_dict({**CAMPAIGN, "matrix": {**CAMPAIGN["matrix"],
                                                      "shapes": [{"seq_len": 4096 * (k + 1)} for k in range(shapes)]}})


def timed(campaign, clusters: dict) -> tuple[float, float, int, int]:
    """(CPU s of expand + group, CPU s of the plan --json document and its text, points, groups)."""
    from sporch.orchestrator.campaign.expand import expand
    from sporch.orchestrator.campaign.groups import group_points
    from sporch.orchestrator.cli.campaign_plan_cmd import _json_doc
    from sporch.orchestrator.cli.common import json_text

    start = time.process_time()
    exp = expand(campaign, clusters)
    groups = group_points(exp.points)
    mid = time.process_time()
    json_text(_json_doc(campaign, exp, groups))
    return mid - start, time.process_time() - mid, len(exp.points), len(groups)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--sizes", default="1080,10000", help="comma-separated point counts")
    args = p.parse_args()
    from sporch.orchestrator.config.cluster import find_cluster

    clusters = {"h100x64": find_cluster("h100x64")}
    print(f"{'points':>7} {'groups':>7} {'expand s':>9} {'+json s':>8} {'per point ms':>13} {'target s':>9}")
    ok = True
    for size in (int(s) for s in args.sizes.split(",")):
        campaign = campaign_of(size, clusters)
        runs = [timed(campaign, clusters) for _ in range(args.runs)]
        expand_s, json_s = min(r[0] for r in runs), min(r[1] for r in runs)
        points, groups = runs[0][2], runs[0][3]
        target = TARGETS.get(size)
        ok = ok and (target is None or expand_s < target)
        print(f"{points:>7} {groups:>7} {expand_s:>9.3f} {json_s:>8.3f} {expand_s / points * 1e3:>13.3f} "
              f"{target if target is not None else '-':>9}")
    assert "torch" not in sys.modules, "expanding a campaign imported torch"
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
