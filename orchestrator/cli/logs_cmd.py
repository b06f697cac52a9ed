"""``sporch logs JOB [--rank N] [-f]``: the batch log, or one rank's log; ``-f`` follows it
until the job ends. The files are read on the job's Host (over SFTP for jobs submitted over ssh)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import List, Optional

import click

from sporch.orchestrator.cli.common import POSITIVE_SECONDS
from sporch.orchestrator.cli.terminal import visible
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.host import Tail
from sporch.orchestrator.jobs import store
from sporch.orchestrator.jobs.status import poll_one, record_host


def _paths(rec, rank: Optional[int], stream: str) -> List[Path]:
    if rank is not None and rec.world_size and not 0 <= rank < rec.world_size:
        raise SporchError(f"job {rec.id} has ranks 0..{rec.world_size - 1}, not {rank}")
    kinds = {"out": ["out"], "err": ["err"], "both": ["out", "err"]}[stream]
    prefix = "rank" if rank is not None else "batch"
    paths = [rec.log_path(f"{prefix}_{k}", rank) for k in kinds]
    return list(dict.fromkeys(paths))  # a backend may write out and err into one file (local)


def _emit(text: str, err_stream: bool) -> None:
    if text:
        out = sys.stderr if err_stream else sys.stdout
        out.write(visible(text))  # a log keeps its lines, never its terminal escapes
        out.flush()


@click.command("logs", short_help="Print a job's batch or rank log (-f: follow).")
@click.argument("job", metavar="JOB")
@click.option("--rank", "-r", type=int, default=None, help="This rank's log (default: the batch script's).")
@click.option("--stream", type=click.Choice(["out", "err", "both"]), default="both", show_default=True,
              help="stdout, stderr or both (stderr goes to stderr).")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new output until the job ends.")
@click.option("--interval", type=POSITIVE_SECONDS, default=1.0, show_default=True, help="Seconds between polls with -f.")
def logs(job: str, rank: Optional[int], stream: str, follow: bool, interval: float) -> None:
    """Print JOB's log (batch script, or --rank N)."""
    rec = store.find(job)
    paths = _paths(rec, rank, stream)
    host = record_host(rec)
    tails = [(Tail(host, str(p)), p.name.endswith(".err")) for p in paths]
    where = f" on {host.where}" if host.remote else ""
    if not follow:
        found = [p for p in paths if host.exists(str(p))]
        if not found:
            raise SporchError(f"no log yet for job {rec.id} ({', '.join(str(p) for p in paths)}{where}); "
                              "the job may still be pending: `sporch status " + rec.id + "`")
        for t, is_err in tails:
            _emit(t.read_new(), is_err)
        return
    next_poll = 0.0
    while True:
        for t, is_err in tails:
            _emit(t.read_new(), is_err)
        now = time.monotonic()
        if now >= next_poll:
            st = poll_one(rec)
            next_poll = now + max(interval, 2.0)
            if st.terminal:
                time.sleep(0.5)  # the last lines of a just-ended job
                for t, is_err in tails:
                    _emit(t.read_new(), is_err)
                click.echo(visible(f"-- {rec.id}: {st.state}", one_line=True), err=True)
                return
        time.sleep(max(0.1, interval))
