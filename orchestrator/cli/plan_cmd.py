"""``sporch plan``: layout, warnings, rank/group map and estimates (or the Plan as JSON);
``--rank``: every feasible layout ranked by predicted step time."""

from __future__ import annotations

import click

from sporch.orchestrator.cli.common import cluster_option, console, job_arguments, json_text, load
from sporch.orchestrator.cli.show import links_words, print_plan, ranking_table
from sporch.orchestrator.cli.terminal import labelled
from sporch.orchestrator.config.cluster import available_clusters, find_cluster
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.plan.advice import fit_line, smallest_fit
from sporch.orchestrator.plan.layouts import compact
from sporch.orchestrator.plan.planner import make_plan, memory_advice, rank_feasible
from sporch.orchestrator.plan.ranking import pick

#: Where `plan --rank`'s note lines' text starts (``note auto chose ...``).
RANK_LABEL = 5


@click.command("plan", short_help="Show the layout, rank/group map and estimates of a job.")
@cluster_option
@job_arguments
@click.option("--json", "as_json", is_flag=True, help="Print the Plan as JSON (the runtime's input).")
@click.option("--all-ranks", is_flag=True, help="List every rank, even for big worlds.")
@click.option("--rank", "rank_layouts", is_flag=True,
              help="Rank every feasible layout by predicted step time, with memory fit (--json: as JSON).")
@click.option("--wide", is_flag=True, help="--rank: every column (the cost model's terms, the peak-rate step).")
def plan(cluster_ref: str, job_path: str, overrides: tuple, as_json: bool, all_ranks: bool,
         rank_layouts: bool, wide: bool) -> None:
    """Plan JOB.yaml on --cluster: layout, rank/group map, estimates."""
    cluster, job = load(cluster_ref, job_path, overrides)
    if rank_layouts:
        _rank(cluster, job, as_json, wide)
        return
    p = make_plan(cluster, job)
    if as_json:
        click.echo(json_text(p.to_dict()))
        return

    con = console()
    print_plan(p, con, all_ranks=all_ranks)
    note = _default_layout_note(cluster, job, p)
    if note:
        labelled(con, "note", note, "cyan")
    if not p.estimates.memory.fits:
        labelled(con, "warning", _where_it_fits(job), "yellow")


def _where_it_fits(job) -> str:
    """The smallest cluster among the known descriptors that fits ``job`` (one line)."""
    clusters = []
    for name in available_clusters():
        try:
            clusters.append(find_cluster(name))
        except SporchError:
            continue  # a broken descriptor elsewhere must not hide the answer
    return fit_line(smallest_fit(job, clusters))


def _default_layout_note(cluster, job, p) -> str:
    """When the job leaves every layout dim to its default and the best ``auto`` layout is
    predicted faster by more than the prediction's band: one line saying so, with the override
    (the default stays)."""
    par = job.parallel
    band = p.estimates.predicted.band
    if not band or any(getattr(par, d) is not None for d in ("dp", "cfg", "ring", "ulysses")):
        return ""
    try:
        ctx, ranked = rank_feasible(cluster, job)
    except SporchError:
        return ""
    best, _ = pick(ctx, ranked)
    mine = next((r for r in ranked if r.layout == p.layout), None)
    if mine is None or best.layout == p.layout or mine.step_s <= best.step_s * (1 + band):
        return ""
    sizes = best.layout.sizes()
    override = " ".join(f"parallel.{d}={sizes[d]}" for d in ("dp", "cfg", "ring", "ulysses"))
    return (f"the default layout {compact(p.layout)} is predicted {mine.step_s / best.step_s - 1:.0%} slower than "
            f"{compact(best.layout)} ({best.step_s:.4g} vs {mine.step_s:.4g} s/step), beyond the ±{band:.0%} band; "
            f"to use it: {override} (the default stays)")


def _too_close(ranked) -> str:
    """The layouts whose predictions are within the fastest's band of it: the model cannot order them."""
    pool = [r for r in ranked if r.fits] or list(ranked)
    if len(pool) < 2:
        return ""
    best = min(pool, key=lambda r: r.step_s)
    band = best.predicted.band
    close = [r for r in pool if r is not best and r.step_s <= best.step_s * (1 + band)]
    if not band or not close:
        return ""
    names = ", ".join(compact(r.layout) for r in close[:6]) + (", ..." if len(close) > 6 else "")
    return (f"{compact(best.layout)} and {names} are within the ±{band:.0%} band of the fastest "
            f"({best.predicted.band_basis}): too close to call; measure with a campaign")


def _rank(cluster, job, as_json: bool, wide: bool = False) -> None:
    ctx, ranked = rank_feasible(cluster, job)
    chosen, reason = pick(ctx, ranked)
    try:  # the layout the job itself asks for (it may be infeasible: ranking still helps)
        requested = make_plan(cluster, job).layout
    except SporchError:
        requested = None
    if as_json:
        click.echo(json_text({
            "cluster": cluster.name, "world_size": ctx.world_size, "auto": compact(chosen.layout), "reason": reason,
            "requested": compact(requested) if requested else None,
            "measured_links": cluster.measured_links.to_dict() if cluster.measured_links is not None else None,
            "layouts": [{"layout": r.layout.sizes(), "compact": compact(r.layout), "fits": r.fits,
                         "memory_gib_per_gpu": r.plan.estimates.memory.memory_gib_per_gpu,
                         "shard_weights": r.plan.placement.shard_weights,
                         "text_encoder": r.plan.placement.text_encoder, "vae": r.plan.placement.vae, **r.predicted.to_dict()}
                        for r in ranked],
        }))
        return

    con = console()
    con.print(ranking_table(ranked, chosen.layout, requested, wide=wide))
    labelled(con, "note", reason, "cyan", column=RANK_LABEL)
    labelled(con, "links", links_words(cluster), "cyan", column=RANK_LABEL)
    close = _too_close(ranked)
    if close:
        labelled(con, "note", close, "cyan", column=RANK_LABEL)
    if not any(r.fits for r in ranked):
        least = min(ranked, key=lambda r: r.plan.estimates.memory.memory_bytes_per_gpu).plan
        advice = memory_advice(least.estimates, cluster.gpu.memory_gib, cluster.gpu.model, least.placement,
                               least.layout)
        labelled(con, "warning", f"no layout fits; the smallest: {advice}", "yellow", column=RANK_LABEL + 3)
        labelled(con, "warning", _where_it_fits(job), "yellow", column=RANK_LABEL + 3)
