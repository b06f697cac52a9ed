"""``sporch campaign plan``: a campaign's points grouped by resource shape, each with its predicted
step, wall time and GPU-hours; the campaign's budget per group and in total (with the band); the
skipped points and why."""

from __future__ import annotations

from typing import Any, Optional

import click

from sporch.orchestrator.benchstats import ideal_ms_per_step
from sporch.orchestrator.campaign.collect import LEVER_COLUMNS
from sporch.orchestrator.campaign.expand import expand
from sporch.orchestrator.campaign.groups import group_points
from sporch.orchestrator.campaign.packs import make_packs
from sporch.orchestrator.campaign.spec import load_campaign
from sporch.orchestrator.cli.campaign_views import Budget, budget_cells, point_budget
from sporch.orchestrator.cli.common import console, json_text, plain_table
from sporch.orchestrator.cli.show import links_words
from sporch.orchestrator.cli.terminal import labelled
from sporch.orchestrator.contract.numbers import counted
from sporch.orchestrator.plan.layouts import compact

#: The point's identifying columns, shown when they differ between a group's points (else in its title).
VALUE_COLUMNS = ("preset", "shape", "dtype")


@click.command("plan")
@click.argument("campaign_file", metavar="CAMPAIGN.yaml", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the points, groups and skipped points as JSON.")
def plan_cmd(campaign_file: str, as_json: bool) -> None:
    """The points of CAMPAIGN.yaml grouped by resource shape, each with its predicted step, wall
    time and GPU-hours, the campaign's budget, and the skipped points with the reason."""
    c = load_campaign(campaign_file)
    exp = expand(c)
    groups = group_points(exp.points)
    if as_json:
        click.echo(json_text(_json_doc(c, exp, groups)))
        return
    con = console()
    run = c.spec.run
    tasks = "one array task per pack of points" if run.pack else "one array task per point"
    labelled(con, "campaign", f"{c.name}: {counted(len(exp.points), 'point')} in {counted(len(groups), 'group')} "
             f"(one job array each, {tasks}), {len(exp.skipped)} skipped; directory {c.directory()}", "bold", column=9)
    for g in groups:
        con.print(_group_table(g, run))
        labelled(con, "budget", Budget.of([p.plan for p in g.points]).text())
        for name, cluster in {p.plan.cluster.name: p.plan.cluster for p in g.points}.items():  # the predictions' links
            labelled(con, f"links ({name}):", links_words(cluster), column=2)
    if groups:
        labelled(con, "total", Budget.of([p.plan for p in exp.points]).text() + "; the band is the held-out ratio "
                 "error of the published tables of each point's GPU and mode (docs/plan.md); queue waits are not "
                 "in it", "bold")
    if exp.skipped:
        con.print(_skipped_table(exp.skipped))


def _group_table(g: Any, run: Any) -> Any:
    s = g.shape
    where = ", ".join(f"{k} {s[k]}" for k in ("partition", "account", "qos") if s.get(k))
    packs = ""
    if run.pack:  # the partition's MaxTime, asked at submission, may cut them further
        n = len(make_packs([p.id for p in g.points], run.pack_size, point_time=s["time"], max_time=run.pack_time))
        packs = f" in {counted(n, 'pack')}"
    values = [p.match_values() for p in g.points]
    same = {k: values[0][k] for k in VALUE_COLUMNS if len({str(v[k]) for v in values}) == 1}
    t = plain_table(title=f"{g.key}: {counted(s['nodes'], 'node')} x {counted(s['gpus_per_node'], 'GPU')}, time "
                    f"{s['time']}" + (f", {where}" if where else "") + "".join(f", {k} {v}" for k, v in same.items())
                    + f" - {counted(len(g.points), 'point')}{packs}", title_justify="left")
    levers = [k for k in LEVER_COLUMNS if any(k in v for v in values)]  # swept ones
    repeat = any(v["repeat"] for v in values)
    cols = ["id", "layout", *(k for k in VALUE_COLUMNS if k not in same), *levers, *(["repeat"] if repeat else []),
            "ms/step", "job", "GPU-h", "GiB/GPU"]
    for col in cols:
        t.add_column(col, justify="left" if col in ("id", "layout", *VALUE_COLUMNS, *levers) else "right")
    for p, v in zip(g.points, values):
        step, job, hours = budget_cells(p.plan)
        t.add_row(p.id, compact(p.plan.layout), *(str(v[k]) for k in VALUE_COLUMNS if k not in same),
                  *(str(v.get(k, "")) for k in levers), *([str(v["repeat"])] if repeat else []),
                  step, job, hours, f"{p.plan.estimates.memory.memory_gib_per_gpu:.1f}")
    return t


def _skipped_table(skipped: list) -> Any:
    t = plain_table(title=f"skipped: {len(skipped)}", title_justify="left")
    for col in ("cluster", "nodes", "layout", "preset", "shape", "dtype", "reason"):
        t.add_column(col, overflow="fold")
    for sk in skipped:
        p = sk.params
        shape = p.get("shape")
        t.add_row(str(p["cluster"]), str(p["nodes"]), _layout_text(p["layout"]), str(p.get("preset") or "base"),
                  "x".join(str(v) for v in shape.values()) if shape else "base", str(p.get("dtype") or "base"),
                  sk.reason)
    return t


def _json_doc(c: Any, exp: Any, groups: list) -> dict[str, Any]:
    return {
        "name": c.name,
        "directory": str(c.directory()),
        "points": len(exp.points),
        "budget": Budget.of([p.plan for p in exp.points]).to_dict(),
        "groups": [{
            "key": g.key, "shape": g.shape,
            # the packs by run.pack_size and run.pack_time (the partition's MaxTime may cut them further)
            "packs": make_packs([p.id for p in g.points], c.spec.run.pack_size, point_time=g.shape["time"],
                                max_time=c.spec.run.pack_time) if c.spec.run.pack else None,
            "budget": Budget.of([p.plan for p in g.points]).to_dict(),
            "points": [{"id": p.id, "params": p.params, "values": p.match_values(),
                        "ideal_ms_per_step": ideal_ms_per_step(p.plan.estimates),
                        "predicted_ms_per_step": _predicted_ms(p.plan),
                        "band": p.plan.estimates.predicted.band,
                        **point_budget(p.plan),
                        "measured_links": p.plan.cluster.measured_links is not None,
                        "memory_gib_per_gpu": p.plan.estimates.memory.memory_gib_per_gpu} for p in g.points],
        } for g in groups],
        "skipped": [{"params": s.params, "reason": s.reason} for s in exp.skipped],
    }


def _layout_text(params_layout) -> str:
    if isinstance(params_layout, dict):
        return " ".join(f"{k}={v}" for k, v in params_layout.items())
    return str(params_layout)


def _predicted_ms(plan) -> Optional[float]:
    """The cost model's step (ms), the band beside it in the table."""
    pred = plan.estimates.predicted
    return pred.step_s * 1e3 if pred is not None else None
