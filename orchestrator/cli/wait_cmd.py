"""``sporch wait JOB``: poll until the job ends; the exit code says how it ended.

Exit codes: 0 COMPLETED; 1 FAILED (also NODE_FAIL, OUT_OF_MEMORY, BOOT_FAIL, or a result that
says failed); 3 CANCELLED, TIMEOUT, PREEMPTED or DEADLINE; 124 when ``--timeout`` passed first
(the job keeps running); 75 when Slurm or the login host could not be reached for longer than
``--grace`` (polls are retried with backoff meanwhile: slurmctld restarting, sshd dropped).
"""

from __future__ import annotations

import sys
import time
from typing import Optional

import click

from sporch.orchestrator.cli.common import GRACE_SECONDS, POSITIVE_SECONDS, console
from sporch.orchestrator.jobs import store
from sporch.orchestrator.jobs.retry import DEFAULT_GRACE_S, default_grace, retry_unreachable
from sporch.orchestrator.jobs.status import poll_one

EXIT_WAIT_TIMEOUT = 124
#: Without a terminal, a progress line for new steps at most this often.
STEP_LINE_S = 10.0


def _describe(s) -> str:
    parts = [s.state]
    if s.reason and not s.terminal:
        parts.append(f"({s.reason})")
    if s.elapsed:
        parts.append(f"elapsed {s.elapsed}")
    if s.nodelist:
        parts.append(f"on {s.nodelist}")
    if s.progress and not s.terminal:
        parts.append(s.progress)
    return " ".join(parts)


def final_line(s) -> str:
    line = f"{s.id}: {s.state}"
    if s.exit_code and s.exit_code != "0:0":
        line += f" (exit {s.exit_code})"
    if s.elapsed:
        line += f" after {s.elapsed}"
    if s.reason and s.state != "COMPLETED":
        line += f" ({s.reason})"
    if s.outcome:
        line += f"; {s.outcome}"
    if s.failed_rank is not None or s.error:
        who = f"rank {s.failed_rank}" if s.failed_rank is not None else "error"
        line += f"; {who}: {s.error or 'failed'}"
    if s.restart:
        line += f"; restarted {s.restart}x"
    return line


def report_retry(exc, pause: float, left: float) -> None:
    """One stderr line per retry of an unreachable Slurm or login host."""
    click.echo(f"sporch: {exc}; retrying in {pause:g} s ({left:.0f} s of grace left)", err=True)


def wait_for(record, *, timeout: Optional[float], interval: float = 2.0, quiet: bool = False,
             grace_s: float = DEFAULT_GRACE_S, keeps_running_note: bool = True) -> int:
    """Poll ``record`` until it is terminal; print progress; return the exit code. Polls that
    cannot reach Slurm or the login host are retried for ``grace_s`` seconds (then exit 75).
    ``keeps_running_note``: say that the job keeps running when ``timeout`` passes (False: the
    caller says what happens to it)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    tty = sys.stdout.isatty() and not quiet
    last = None
    last_step, last_line = None, 0.0
    spinner = None
    if tty:
        spinner = console().status(f"waiting for {record.id} (Slurm job {record.backend_job_id})")
        spinner.start()
    try:
        while True:
            st = retry_unreachable(lambda: poll_one(record), grace_s=grace_s,
                                   on_retry=None if quiet else report_retry)
            if st.terminal:
                break
            if spinner is not None:
                spinner.update(f"{record.id} (Slurm job {record.backend_job_id}): {_describe(st)}")
            else:
                # a line per change of state (progress steps: at most every STEP_LINE_S), not per poll
                key = (st.state, st.reason, st.nodelist)
                now = time.monotonic()
                step_due = st.step != last_step and now - last_line >= STEP_LINE_S
                if (key != last or step_due) and not quiet:
                    click.echo(f"{time.strftime('%H:%M:%S')} {record.id}: {_describe(st)}")
                    last_line, last_step = now, st.step
                last = key
            if deadline is not None and time.monotonic() >= deadline:
                if keeps_running_note:
                    click.echo(f"{record.id}: still {st.state} after {timeout:g} s (--timeout); the job keeps running",
                               err=True)
                return EXIT_WAIT_TIMEOUT
            time.sleep(interval if deadline is None else max(0.0, min(interval, deadline - time.monotonic())))
    finally:
        if spinner is not None:
            spinner.stop()
    if not quiet:
        click.echo(final_line(st))
    return st.exit_status()


@click.command("wait", short_help="Wait for a job to end; exit code from the job.")
@click.argument("job", metavar="JOB")
@click.option("--timeout", type=POSITIVE_SECONDS, default=None, help="Give up after this many seconds (exit 124).")
@click.option("--interval", type=POSITIVE_SECONDS, default=2.0, show_default=True, help="Seconds between polls.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing; only the exit code tells.")
@click.option("--grace", "grace_s", type=GRACE_SECONDS, default=None,
              help=f"Seconds to keep retrying while Slurm or the login host cannot be reached "
                   f"(default $SPORCH_GRACE_S or {DEFAULT_GRACE_S:g}); then exit 75.")
def wait(job: str, timeout: Optional[float], interval: float, quiet: bool, grace_s: Optional[float]) -> None:
    """Wait for JOB to end. Exit 0 COMPLETED, 1 FAILED, 3 CANCELLED/TIMEOUT, 124 --timeout,
    75 Slurm or the login host unreachable for longer than --grace."""
    rec = store.find(job)
    code = wait_for(rec, timeout=timeout, interval=max(0.1, interval), quiet=quiet,
                    grace_s=default_grace(DEFAULT_GRACE_S, grace_s))
    sys.exit(code)
