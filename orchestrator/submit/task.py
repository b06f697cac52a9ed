"""What every task of a submitit job runs: the runtime entry point with the Plan, as a child
process (``python -m sporch.runtime.launch --plan PLAN --output-dir JOB_DIR``).

``run_rank(plan_path, job_dir)`` is pickled by reference (module + name), so it must stay a
module-level function with plain-string arguments. It runs on the compute node, inside
``python -m submitit.core._submit``; the runtime (torch) runs in the child, so the orchestrator
never imports ``sporch.runtime`` (tests/project/test_no_torch.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from sporch.orchestrator.contract import settings
from sporch.orchestrator.contract.exit_codes import EXIT_OK, EXIT_REQUEUED


class RankFailed(RuntimeError):
    """The runtime returned a non-zero exit code on this rank."""


def launch_command(plan_path: str, job_dir: str, python: str = sys.executable) -> list[str]:
    return [python, "-m", "sporch.runtime.launch", "--plan", plan_path, "--output-dir", job_dir]


def run_rank(plan_path: str, job_dir: str, python: str = sys.executable) -> int:
    """Run the runtime for this task and wait; raise on failure. Exit code 0: done; 3: the
    runtime saved progress and asked Slurm to requeue (this task leaves with 3); any other:
    :class:`RankFailed` naming the rank.

    submitit's task wrapper ignores SIGTERM and turns USR2 into its own checkpoint/requeue;
    here the runtime owns USR2 (it saves progress and requeues: this process passes the signal
    on), and SIGTERM must end the task so that ``scancel``, ``scontrol requeue`` and
    ``srun --kill-on-bad-exit`` are quick (Slurm signals the child too).
    """
    os.environ[settings.JOB_DIR.name] = job_dir
    os.environ[settings.PLAN.name] = plan_path
    for sig in (signal.SIGTERM, signal.SIGCONT):
        signal.signal(sig, signal.SIG_DFL)
    children: list[subprocess.Popen] = []
    previous = signal.signal(signal.SIGUSR2, lambda signum, frame: [c.send_signal(signum) for c in children])
    try:
        children.append(subprocess.Popen(launch_command(plan_path, job_dir, python)))
        code = children[0].wait()
    finally:
        signal.signal(signal.SIGUSR2, previous)
    if code == EXIT_REQUEUED:
        # progress is saved and the runtime asked Slurm to requeue: leave quietly with its code
        raise SystemExit(EXIT_REQUEUED)
    if code != EXIT_OK:
        rank = os.environ.get("SLURM_PROCID", "?")
        raise RankFailed(f"rank {rank}: sporch.runtime.launch exited with code {code} (details: {job_dir}/ranks/rank{rank}.json)")
    return EXIT_OK
