"""What every task of a submitit job runs: the runtime entry point with the Plan.

``run_rank(plan_path, job_dir)`` is pickled by reference (module + name), so it must stay a
module-level function with plain-string arguments. It runs on the compute node, inside
``python -m submitit.core._submit``, and imports the runtime (torch) only there: the
orchestrator never imports ``runtime`` at module level (tests/orchestrator/test_no_torch.py).
"""

from __future__ import annotations

import os
import signal

from sporch.orchestrator.contract.exit_codes import EXIT_REQUEUED


class RankFailed(RuntimeError):
    """The runtime returned a non-zero exit code on this rank."""


def run_rank(plan_path: str, job_dir: str) -> int:
    """Run ``sporch.runtime.launch.main(["--plan", plan_path])`` on this task; raise on failure.

    submitit's task wrapper ignores SIGTERM and turns USR2 into its own checkpoint/requeue;
    here the runtime owns USR2 (it saves progress and requeues), and SIGTERM must end the
    task so that ``scancel``, ``scontrol requeue`` and ``srun --kill-on-bad-exit`` are quick.
    """
    os.environ["SPORCH_JOB_DIR"] = job_dir
    os.environ["SPORCH_PLAN"] = plan_path
    for sig in (signal.SIGTERM, signal.SIGCONT):
        signal.signal(sig, signal.SIG_DFL)
    from sporch.runtime import launch  # torch: only on the compute node, never at module level
    code = launch.main(["--plan", plan_path, "--output-dir", job_dir])
    if code == EXIT_REQUEUED:
        # progress is saved and the runtime asked Slurm to requeue: leave quietly with its code
        raise SystemExit(EXIT_REQUEUED)
    if code:
        rank = os.environ.get("SLURM_PROCID", "?")
        raise RankFailed(f"rank {rank}: sporch.runtime.launch exited with code {code} (details: {job_dir}/ranks/rank{rank}.json)")
    return 0
