"""``sporch calibrate CAMPAIGN_DIR``: fit the cost model's constants to a campaign's measured
points and write a calibration file a cluster descriptor can reference."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import click

from sporch.orchestrator.campaign.calibration_points import campaign_observations
from sporch.orchestrator.cli.common import console, plain_table
from sporch.orchestrator.safe_files import check_output
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.plan.calibration import fit, write_calibration
from sporch.orchestrator.plan.cost import FITTED, cluster_constants, default_constants

CALIBRATION_FILE = "calibration.yaml"


@click.command("calibrate")
@click.argument("directory", metavar="CAMPAIGN_DIR", type=click.Path(file_okay=False))
@click.option("--out", "out_file", default=None, type=click.Path(dir_okay=False),
              help=f"Calibration file to write (default: CAMPAIGN_DIR/{CALIBRATION_FILE}).")
@click.option("--force", is_flag=True, help="Replace --out if it exists (a link there is replaced, never followed).")
@click.option("--cluster", "cluster_name", default=None, help="The cluster whose points to fit (several in DIR).")
@click.option("--exclude", "exclude", multiple=True, metavar="POINT_ID",
              help="Leave this point out of the fit (repeatable): held back to check the prediction.")
@click.option("--fit", "fit_names", default=None,
              help="Comma-separated constants to fit (default: every one the points determine).")
def calibrate(directory: str, out_file: Optional[str], force: bool, cluster_name: Optional[str], exclude: tuple,
              fit_names: Optional[str]) -> None:
    """Fit efficiencies, latencies and overheads to DIR's measured step times (docs/plan.md).
    An existing --out file is replaced only with --force; the default file in DIR is sporch's
    own and is replaced."""
    if out_file:  # before any work: a name that is taken is refused (safe_files.check_output)
        check_output(out_file, force, "--out")
    names = FITTED
    if fit_names:
        names = tuple(n.strip() for n in fit_names.split(",") if n.strip())
        bad = [n for n in names if n not in FITTED]
        if bad:
            raise SporchError(f"--fit: unknown constant(s) {', '.join(bad)}; choose from {', '.join(FITTED)}")
    obs, cluster = campaign_observations(directory, cluster_name, exclude)
    base = default_constants(cluster.gpu.model)
    result = fit(obs, base, names)
    before, _ = cluster_constants(cluster)
    out = Path(out_file) if out_file else Path(directory) / CALIBRATION_FILE
    write_calibration(out, result, {"cluster": cluster.name, "gpu_model": cluster.gpu.model,
                                    "campaign": str(Path(directory).resolve())}, replace=force or not out_file)
    con = console()
    t = plain_table(title=f"{len(obs)} points on {cluster.name}: measured vs calibrated prediction", title_justify="left")
    for col in ("point", "measured ms", "predicted ms", "error"):
        t.add_column(col, justify="left" if col == "point" else "right")
    for o, p, e in zip(obs, result.predictions, result.relative_errors):
        t.add_row(o.label, f"{o.measured_s * 1e3:.4g}", f"{p * 1e3:.4g}", f"{e:+.1%}")
    con.print(t)
    c = plain_table(title="constants", title_justify="left")
    for col in ("constant", "before", "fitted"):
        c.add_column(col, justify="left" if col == "constant" else "right")
    for k in result.fitted:
        c.add_row(k, f"{before[k]:.4g}", f"{result.constants[k]:.4g}")
    con.print(c)
    con.print(f"rms error {result.rms_relative_error:.1%}, max {result.max_relative_error:.1%}; not fitted (default, or held at a bound): "
              f"{', '.join(result.held) or 'none'}")
    con.print(f"wrote {out}; use it with `calibration: {out.resolve()}` in the cluster descriptor", markup=False)
