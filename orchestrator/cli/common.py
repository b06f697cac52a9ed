"""Shared CLI pieces: options, loading cluster + job, a rich console."""

from __future__ import annotations

import json
import math
import sys
from typing import Any, Callable, Optional, Sequence

import click

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import load_job
from sporch.orchestrator.cli.tables import fitted_table
from sporch.orchestrator.cli.terminal import terminal_size
from sporch.orchestrator.contract.durations import seconds
from sporch.orchestrator.errors import SporchError

cluster_option = click.option(
    "--cluster", "-c", "cluster_ref", required=True, metavar="NAME|PATH",
    help="Cluster name (built-in, $SPORCH_CLUSTERS, ~/.config/sporch/clusters) or YAML path.",
)


class Seconds(click.ParamType):
    """A finite number of seconds for a CLI option: above ``minimum`` (0 unless given), or at least
    it with ``inclusive``. nan, inf and negatives are refused with one line (click: exit 2)."""

    name = "seconds"

    def __init__(self, minimum: float = 0.0, inclusive: bool = False) -> None:
        self.minimum, self.inclusive = float(minimum), inclusive

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        try:
            return seconds(value, self.minimum, self.inclusive)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)

    def __repr__(self) -> str:
        return f"Seconds({'>=' if self.inclusive else '>'} {self.minimum:g})"


class FiniteRange(click.FloatRange):
    """click's FloatRange that refuses nan (which passes every bound check: a gate switched off)
    and inf, with one line."""

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


#: The seconds options of the commands: a time limit or a poll interval (> 0), a grace (>= 0).
POSITIVE_SECONDS = Seconds()
GRACE_SECONDS = Seconds(inclusive=True)


def job_arguments(fn: Callable) -> Callable:
    """JOB.yaml followed by KEY=VALUE overrides (``parallel.ring=2``)."""
    fn = click.argument("overrides", nargs=-1, metavar="[KEY=VALUE]...")(fn)
    fn = click.argument("job_path", metavar="JOB.yaml", type=click.Path(dir_okay=False))(fn)
    return fn


def load(cluster_ref: str, job_path: str, overrides: Sequence[str]):
    """(ClusterSpec, JobSpec), or SporchError."""
    return find_cluster(cluster_ref), load_job(job_path, overrides)


def invocation() -> list:
    """The argv given to ``sporch`` (``main`` passes it as the click context's obj)."""
    obj = click.get_current_context().find_root().obj
    return list(obj["argv"]) if isinstance(obj, dict) and "argv" in obj else sys.argv[1:]


def console(stderr: bool = False) -> Any:
    """A rich Console on stdout (or stderr) at :func:`~sporch.orchestrator.cli.terminal.terminal_size`:
    both sizes are always given, so rich never reads ``$COLUMNS`` itself (it would with
    ``str.isdigit``: ``COLUMNS=²`` passes that and then fails in ``int``)."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width, height = terminal_size(stream)
    return Console(file=stream, width=width, height=height, highlight=False, soft_wrap=False)


def json_text(doc: Any, indent: Optional[int] = 2) -> str:
    """``doc`` as strict JSON (what ``--json`` prints): a non-finite number (nan, Infinity), which
    strict parsers refuse, is a one-line SporchError naming where it is."""
    try:
        return json.dumps(doc, indent=indent, allow_nan=False)
    except ValueError:
        raise SporchError(f"refusing to print non-finite JSON: {_non_finite(doc) or 'a number'} is not finite; "
                          "check the inputs that produce it (calibration constants, workload sizes)") from None


def _non_finite(doc: Any, where: str = "") -> Optional[str]:
    if isinstance(doc, float) and not math.isfinite(doc):
        return f"{where or 'the value'} = {doc}"
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, (list, tuple)) else ()
    for k, v in items:
        found = _non_finite(v, f"{where}.{k}" if where else str(k))
        if found:
            return found
    return None


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"


def fmt_int(n: int) -> str:
    return f"{n:,}"


def plain_table(*args: Any, **kwargs: Any) -> Any:
    """A rich Table whose string cells are shown as they are, never parsed as markup: cells
    carry names, paths and error lines from YAML, result files and logs (a gloo error line
    holds ``[/__w/...]``, which rich would take for a closing tag), and control characters in
    them (terminal escapes, newlines) are written out as ``\\xNN`` escapes (:func:`visible`). Style a cell with
    ``rich.text.Text(value, style=...)``. It fits the terminal without cutting a word
    (:mod:`sporch.orchestrator.cli.tables`)."""
    return fitted_table(*args, **kwargs)
