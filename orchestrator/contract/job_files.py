"""The files of one job, named once: what the orchestrator writes into a job dir, what the ranks
write there, and where each backend puts the logs (standard library only; the runtime uses it)::

    <job_dir>/plan.json                 the Plan (runtime input)
    <job_dir>/job.sbatch                the batch script (sbatch backend; a copy for the others)
    <job_dir>/record.json               the job record's copy (``$SPORCH_HOME/jobs/<id>.json`` is the authority)
    <job_dir>/logs/                     logs (per backend: :data:`LOG_LAYOUTS`)
    <job_dir>/ranks/rank<N>.json        one per rank (orchestrator/contract/results.py)
    <job_dir>/result.json               rank 0's summary
    <job_dir>/checkpoint/progress.json  progress of a resumable workload (runtime/progress.py)
    <job_dir>/hang/rank<N>.txt          a rank's stacks when a collective hung (runtime/watchdog/)
    <job_dir>/hang/rank<N>.json         the same rank's record of it (orchestrator/hangs.py)
    <job_dir>/hang/fr_trace_rank_<N>    PyTorch's flight recorder of its collectives (docs/troubleshooting.md)
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Dict

PLAN_FILE = "plan.json"
SCRIPT_FILE = "job.sbatch"
RECORD_FILE = "record.json"
RESULT_FILE = "result.json"
LOGS_DIR = "logs"
RANKS_DIR = "ranks"
CHECKPOINT_DIR = "checkpoint"
PROGRESS_FILE = "progress.json"
#: What the collective watchdog writes when a collective hangs (runtime/watchdog/).
HANG_DIR = "hang"
#: The prefix of PyTorch's flight-recorder dumps (TORCH_FR_DUMP_TEMP_FILE), in HANG_DIR.
FR_TRACE_PREFIX = "fr_trace_rank_"
#: submitit's own folder in the job dir (pickles, its submission script, its logs).
SUBMITIT_DIR = "submitit"

#: Log kind -> path relative to the job dir, with ``{job_id}`` and ``{rank}`` placeholders,
#: per backend (kinds: batch_out, batch_err, rank_out, rank_err). A record keeps its backend's.
LOG_LAYOUTS: Dict[str, Dict[str, str]] = {
    "sbatch": {
        "batch_out": LOGS_DIR + "/{job_id}.out",
        "batch_err": LOGS_DIR + "/{job_id}.err",
        "rank_out": LOGS_DIR + "/{job_id}_{rank}.out",
        "rank_err": LOGS_DIR + "/{job_id}_{rank}.err",
    },
    "submitit": {  # the batch script's own output goes to rank 0's files
        "batch_out": SUBMITIT_DIR + "/{job_id}_0_log.out",
        "batch_err": SUBMITIT_DIR + "/{job_id}_0_log.err",
        "rank_out": SUBMITIT_DIR + "/{job_id}_{rank}_log.out",
        "rank_err": SUBMITIT_DIR + "/{job_id}_{rank}_log.err",
    },
    "local": {  # one process per rank, stdout and stderr together; no batch script
        "batch_out": LOGS_DIR + "/rank0.log",
        "batch_err": LOGS_DIR + "/rank0.log",
        "rank_out": LOGS_DIR + "/rank{rank}.log",
        "rank_err": LOGS_DIR + "/rank{rank}.log",
    },
}


@dataclass(frozen=True)
class JobFiles:
    """The paths of a job dir (posix paths: the dir may be on a login host)."""

    job_dir: str

    def path(self, *parts: str) -> str:
        return posixpath.join(self.job_dir, *parts)

    @property
    def plan(self) -> str:
        return self.path(PLAN_FILE)

    @property
    def script(self) -> str:
        return self.path(SCRIPT_FILE)

    @property
    def record(self) -> str:
        return self.path(RECORD_FILE)

    @property
    def result(self) -> str:
        return self.path(RESULT_FILE)

    @property
    def logs(self) -> str:
        return self.path(LOGS_DIR)

    @property
    def ranks(self) -> str:
        return self.path(RANKS_DIR)

    def rank_file(self, rank: int) -> str:
        return self.path(RANKS_DIR, f"rank{rank}.json")

    @property
    def checkpoint(self) -> str:
        return self.path(CHECKPOINT_DIR)

    @property
    def progress(self) -> str:
        return self.path(CHECKPOINT_DIR, PROGRESS_FILE)

    @property
    def hang(self) -> str:
        return self.path(HANG_DIR)

    def hang_stack(self, rank: int) -> str:
        """A rank's stacks (faulthandler) when a collective hung, with a header saying where it was."""
        return self.path(HANG_DIR, f"rank{rank}.txt")

    def hang_record(self, rank: int) -> str:
        """The same, for machines (:mod:`sporch.orchestrator.hangs`)."""
        return self.path(HANG_DIR, f"rank{rank}.json")

    @property
    def fr_trace_prefix(self) -> str:
        return self.path(HANG_DIR, FR_TRACE_PREFIX)

    @property
    def submitit(self) -> str:
        return self.path(SUBMITIT_DIR)
