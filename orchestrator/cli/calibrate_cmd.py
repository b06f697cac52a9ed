"""``sporch calibrate [CAMPAIGN_DIR] [--links PREFLIGHT_DIR]``: fit the cost model's constants to a
campaign's measured points, and/or take a preflight's link measurements as the cluster's link
figures; write a calibration file a cluster descriptor can reference."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import click

from sporch.orchestrator.campaign.calibration_points import campaign_observations
from sporch.orchestrator.cli.common import console, plain_table
from sporch.orchestrator.cli.show_prediction import ms_text
from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.safe_files import check_output
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.plan.calibration import fit, with_links
from sporch.orchestrator.plan.calibration_output import write_calibration
from sporch.orchestrator.plan.cost_constants import cluster_constants, default_constants
from sporch.orchestrator.plan.cost_features import FITTED
from sporch.orchestrator.plan.measured_links import LinkFigures, read_preflight

CALIBRATION_FILE = "calibration.yaml"


@click.command("calibrate", short_help="Fit the cost model to a campaign's measured steps and phases.")
@click.argument("directory", metavar="[CAMPAIGN_DIR]", required=False, type=click.Path(file_okay=False))
@click.option("--links", "links_dir", default=None, metavar="PREFLIGHT_DIR", type=click.Path(),
              help="A `sporch preflight` job's folder: its measured link rates and latencies become the "
                   "calibration's link figures (in place of the descriptor's and the fit's).")
@click.option("--out", "out_file", default=None, type=click.Path(dir_okay=False),
              help=f"Calibration file to write (default: CAMPAIGN_DIR/{CALIBRATION_FILE}; required without CAMPAIGN_DIR).")
@click.option("--force", is_flag=True, help="Replace --out if it exists (a link there is replaced, never followed).")
@click.option("--cluster", "cluster_name", default=None,
              help="The cluster whose points to fit (several in DIR); without CAMPAIGN_DIR, the descriptor "
                   "(name or path) the preflight ran on.")
@click.option("--exclude", "exclude", multiple=True, metavar="POINT_ID",
              help="Leave this point out of the fit (repeatable): held back to check the prediction.")
@click.option("--fit", "fit_names", default=None,
              help="Comma-separated constants to fit (default: every one the points determine).")
def calibrate(directory: Optional[str], links_dir: Optional[str], out_file: Optional[str], force: bool,
              cluster_name: Optional[str], exclude: tuple, fit_names: Optional[str]) -> None:
    """Fit efficiencies, latencies and overheads to DIR's measured step times and each generate
    point's phases (start-up, load, encode, denoise, decode, save: result.json's metrics.stages),
    and/or take a preflight's measured links (--links) (docs/plan.md). An existing --out file is
    replaced only with --force; the default file in DIR is sporch's own and is replaced."""
    if directory is None and links_dir is None:
        raise SporchError("give a campaign folder to fit (CAMPAIGN_DIR), a preflight job's folder (--links), or both")
    if directory is None and not (out_file and cluster_name):
        raise SporchError("--links without CAMPAIGN_DIR needs --cluster (the descriptor the preflight ran on) "
                          "and --out (the calibration file to write)")
    if out_file:  # before any work: a name that is taken is refused (safe_files.check_output)
        check_output(out_file, force, "--out")
    names = FITTED
    if fit_names:
        names = tuple(n.strip() for n in fit_names.split(",") if n.strip())
        bad = [n for n in names if n not in FITTED]
        if bad:
            raise SporchError(f"--fit: unknown constant(s) {', '.join(bad)}; choose from {', '.join(FITTED)}")
    links = read_preflight(links_dir) if links_dir else None
    con = console()
    if directory is None:
        cluster = find_cluster(cluster_name)
        _check_same_cluster(links, cluster)
        before, _ = cluster_constants(cluster)
        out = Path(out_file)
        write_calibration(out, None, {"cluster": cluster.name, "gpu_model": cluster.gpu.model}, replace=force,
                          links=links, constants={**before, **links.constants()})
        _print_links(con, links, cluster, before)
        con.print(f"wrote {out}; use it with `calibration: {out.resolve()}` in the cluster descriptor", markup=False)
        return
    obs, cluster = campaign_observations(directory, cluster_name, exclude)
    base = default_constants(cluster.gpu.model)
    if links is not None:
        _check_same_cluster(links, cluster)
        # the points were planned with the descriptor's figures: predict them with the measured ones
        obs = [o.__class__(with_links(o.inputs, links, cluster.intra_node.gb_per_s, cluster.inter_node.gb_per_s,
                                      cluster.gpus_per_node), o.measured_s, o.level, o.label) for o in obs]
        base = {**base, **links.constants()}
        names = tuple(n for n in names if n not in links.constants())
    result = fit(obs, base, names)
    before, _ = cluster_constants(cluster)
    out = Path(out_file) if out_file else Path(directory) / CALIBRATION_FILE
    write_calibration(out, result, {"cluster": cluster.name, "gpu_model": cluster.gpu.model,
                                    "campaign": str(Path(directory).resolve())}, replace=force or not out_file,
                      links=links)
    points = len({o.label.split(" ", 1)[0] for o in obs})
    phased = len(obs) > sum(1 for o in obs if o.level == "step")
    t = plain_table(title=f"{points} points on {cluster.name}: measured vs calibrated prediction"
                          + (f" ({len(obs)} measurements: a step in ms, a generate job's phases in s)" if phased else ""),
                    title_justify="left")
    for col in ("point", "what", "measured", "predicted", "error"):
        t.add_column(col, justify="left" if col in ("point", "what") else "right")
    for o, p, e in zip(obs, result.predictions, result.relative_errors):
        scale, unit = (1e3, " ms") if o.level == "step" else (1.0, " s")
        t.add_row(o.label.rsplit(" ", 1)[0] if o.level != "step" else o.label, o.level,
                  ms_text(o.measured_s * scale) + unit, ms_text(p * scale) + unit, f"{e:+.1%}")
    con.print(t)
    c = plain_table(title="constants", title_justify="left")
    for col in ("constant", "before", "fitted"):
        c.add_column(col, justify="left" if col == "constant" else "right")
    for k in result.fitted:
        c.add_row(k, f"{before[k]:.4g}", f"{result.constants[k]:.4g}")
    con.print(c)
    if links is not None:
        _print_links(con, links, cluster, before)
    con.print(f"rms error {result.rms_relative_error:.1%}, max {result.max_relative_error:.1%}; not fitted (default, "
              f"held at a bound, or measured): {', '.join(result.held) or 'none'}")
    con.print(f"wrote {out}; use it with `calibration: {out.resolve()}` in the cluster descriptor", markup=False)


def _check_same_cluster(links: LinkFigures, cluster) -> None:
    if links.cluster != cluster.name or links.gpus_per_node != cluster.gpus_per_node:
        raise SporchError(f"--links: the preflight ran on {links.cluster} ({links.gpus_per_node} GPUs per node), "
                          f"not on {cluster.name} ({cluster.gpus_per_node}); run `sporch preflight --cluster "
                          f"{cluster.name}` and give its folder")


def _print_links(con, links: LinkFigures, cluster, before: dict) -> None:
    """Which figures of the calibration the preflight measured, against what they replace."""
    t = plain_table(title=f"link figures measured by the preflight {links.source} ({links.backend}, "
                          f"{links.nodes} node(s))", title_justify="left")
    for col in ("figure", "was", "measured", "from"):
        t.add_column(col, justify="right" if col in ("was", "measured") else "left")
    was = {"intra_node_gb_per_s": cluster.intra_node.gb_per_s, "inter_node_gb_per_s": cluster.inter_node.gb_per_s,
           "a2a_latency_s": before["a2a_latency_s"], "p2p_latency_s": before["p2p_latency_s"]}
    for k, f in links.figures().items():
        if f is None:
            t.add_row(k, f"{was[k]:.4g}", "not measured", "kept" if "latency" in k else
                      "kept (one node: no hop between nodes)" if k.startswith("inter") else "kept")
        else:
            t.add_row(k, f"{was[k]:.4g}", f"{f.value:.4g}", f"{f.what} ({f.measurements})")
    if links.rates():
        t.add_row("link_efficiency", f"{before['link_efficiency']:.4g}", "1", "the measured rates are what the links deliver")
    con.print(t)
