"""``sporch logs JOB [--rank N] [-f]``: the batch log, or one rank's log; ``-f`` follows it
until the job ends. Jobs submitted over ssh: the files are read over SFTP (``-f`` polls)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import List, Optional

import click


def _paths(rec, rank: Optional[int], stream: str) -> List[Path]:
    from orchestrator.errors import SporchError

    if rank is not None and rec.world_size and not 0 <= rank < rec.world_size:
        raise SporchError(f"job {rec.id} has ranks 0..{rec.world_size - 1}, not {rank}")
    kinds = {"out": ["out"], "err": ["err"], "both": ["out", "err"]}[stream]
    prefix = "rank" if rank is not None else "batch"
    return [rec.log_path(f"{prefix}_{k}", rank) for k in kinds]


class _Tail:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.pos = 0

    def read_new(self) -> str:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(0, 2)
                size = fh.tell()
                if size < self.pos:  # truncated / recreated (requeue)
                    self.pos = 0
                fh.seek(self.pos)
                data = fh.read()
                self.pos = fh.tell()
        except FileNotFoundError:
            return ""
        return data.decode("utf-8", errors="replace")


class _RemoteTail(_Tail):
    """The same over SFTP (``host``: a connected orchestrator.remote.ssh.SshHost)."""

    def __init__(self, path: Path, host) -> None:
        super().__init__(path)
        self.host = host

    def exists(self) -> bool:
        return self.host.exists(str(self.path))

    def read_new(self) -> str:
        size = self.host.size(str(self.path))
        if size is None:
            return ""
        if size < self.pos:
            self.pos = 0
        if size == self.pos:
            return ""
        try:
            data = self.host.read_bytes(str(self.path), self.pos)
        except FileNotFoundError:
            return ""
        self.pos += len(data)
        return data.decode("utf-8", errors="replace")


def _emit(text: str, err_stream: bool) -> None:
    if text:
        out = sys.stderr if err_stream else sys.stdout
        out.write(text)
        out.flush()


@click.command("logs")
@click.argument("job", metavar="JOB")
@click.option("--rank", "-r", type=int, default=None, help="This rank's log (default: the batch script's).")
@click.option("--stream", type=click.Choice(["out", "err", "both"]), default="both", show_default=True,
              help="stdout, stderr or both (stderr goes to stderr).")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new output until the job ends.")
@click.option("--interval", type=float, default=1.0, show_default=True, help="Seconds between polls with -f.")
def logs(job: str, rank: Optional[int], stream: str, follow: bool, interval: float) -> None:
    """Print JOB's log (batch script, or --rank N)."""
    from orchestrator.errors import SporchError
    from orchestrator.jobs import store

    rec = store.find(job)
    paths = _paths(rec, rank, stream)
    if rec.remote:
        from orchestrator.remote.ssh import connect

        host = connect(rec.remote)
        tails = [(_RemoteTail(p, host), p.name.endswith(".err")) for p in paths]
        where = f" on {host.where}"
        exists = lambda p: host.exists(str(p))  # noqa: E731
    else:
        tails = [(_Tail(p), p.name.endswith(".err")) for p in paths]
        where = ""
        exists = lambda p: p.exists()  # noqa: E731
    if not follow:
        found = [p for p in paths if exists(p)]
        if not found:
            raise SporchError(f"no log yet for job {rec.id} ({', '.join(str(p) for p in paths)}{where}); "
                              "the job may still be pending: `sporch status " + rec.id + "`")
        for t, is_err in tails:
            _emit(t.read_new(), is_err)
        return
    from orchestrator.jobs.status import poll_one

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
                click.echo(f"-- {rec.id}: {st.state}", err=True)
                return
        time.sleep(max(0.1, interval))
