"""Submit through submitit (the default backend).

One submitit job with ``nodes`` x ``tasks_per_node`` (= GPUs per node) tasks; each task calls
:func:`orchestrator.submit.task.run_rank` with the Plan, which runs ``runtime.launch``.
The Slurm request follows the Plan and its cluster: the cluster's GPU directive,
partition/account/qos/constraint/mem/exclusive, time, ``--requeue``, ``--signal=USR2@90``
(submitit's default signal; USR1 is NCCL's), ``srun --kill-on-bad-exit=1`` so one failed rank
ends the job, and the Plan's environment exported in the batch script.

Files: ``<job_dir>/submitit/`` (submitit's pickles, ``<jobid>_submission.sh``, and the logs
``<jobid>_<rank>_log.out|err``; the batch script's own output goes to rank 0's files).
"""

from __future__ import annotations

import contextlib
import io
import shlex
from typing import Any, Dict, List, Sequence

from orchestrator.errors import SporchError
from orchestrator.host import LOCAL, Host
from orchestrator.plan import rules
from orchestrator.slurm.commands import SlurmCommandError, scancel, slurm_reason
from orchestrator.submit.backend import Submitted
from orchestrator.submit.request import SubmitRequest
from orchestrator.submit.task import run_rank

FOLDER = "submitit"
SIGNAL_DELAY_S = 90
LOGS = {
    "batch_out": FOLDER + "/{job_id}_0_log.out",
    "batch_err": FOLDER + "/{job_id}_0_log.err",
    "rank_out": FOLDER + "/{job_id}_{rank}_log.out",
    "rank_err": FOLDER + "/{job_id}_{rank}_log.err",
}
#: Launcher variables a task must not inherit from the submitter (the runtime would take them
#: for torchrun's).
SCRUB_ENV = ("RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
             "TORCHELASTIC_RUN_ID")

def time_to_minutes(text: str) -> int:
    """Slurm time -> whole minutes, rounded up (submitit's ``timeout_min``)."""
    try:
        return rules.time_to_minutes(text)
    except ValueError as e:
        raise SporchError(str(e)) from None


def _extra_parameters(lines: List[str]) -> Dict[str, Any]:
    """cluster.slurm.extra (``--reservation=x``, ``#SBATCH --foo``) -> submitit additional parameters."""
    out: Dict[str, Any] = {}
    for line in lines:
        line = line.strip()
        if line.startswith("#SBATCH"):
            line = line[len("#SBATCH"):].strip()
        if not line.startswith("--"):
            raise SporchError(f"slurm.extra line {line!r} is not a long sbatch option (e.g. --reservation=NAME)")
        key, eq, value = line[2:].partition("=")
        out[key.replace("-", "_")] = value if eq else True
    return out


def setup_lines(request: SubmitRequest) -> List[str]:
    """Batch-script lines before srun: the cluster's setup, the Plan's env, the job's paths."""
    plan = request.plan
    cluster = plan.cluster.to_dict()
    jd = request.job_dir.rstrip("/") or "/"
    lines = list(cluster.get("setup", []))
    # Stale launcher variables out; each task then derives MASTER_ADDR (first node) and
    # MASTER_PORT (from the job id) itself: runtime.rank_env, the same rule as the template.
    lines.append("unset " + " ".join(SCRUB_ENV))
    for key, value in dict(cluster.get("env", {})).items():
        lines.append(f"export {key}={shlex.quote(str(value))}")
    lines.append(f"export SPORCH_JOB_DIR={shlex.quote(jd)}")
    lines.append(f"export SPORCH_PLAN={shlex.quote(request.plan_path)}")
    lines.append(f"mkdir -p {shlex.quote(jd + '/logs')}")
    return lines


def executor_parameters(request: SubmitRequest) -> Dict[str, Any]:
    """``AutoExecutor.update_parameters`` keywords for the request (pure; unit-tested)."""
    plan = request.plan
    slurm = plan.cluster.slurm.to_dict()
    gpn = int(plan.gpus_per_node)
    time = plan.job.time or slurm["time"]
    additional: Dict[str, Any] = {"requeue": True}
    params: Dict[str, Any] = {
        "name": plan.job.name,
        "nodes": int(plan.nodes),
        "tasks_per_node": gpn,
        "cpus_per_task": int(slurm.get("cpus_per_task") or 1),
        "timeout_min": time_to_minutes(time),
        "slurm_signal_delay_s": SIGNAL_DELAY_S,
        "slurm_srun_args": ["--kill-on-bad-exit=1"],
        "slurm_setup": setup_lines(request),
    }
    directive = slurm.get("gpu_directive", "gpus-per-node")
    if directive == "gpus-per-node":
        params["gpus_per_node"] = gpn
    elif directive == "gres":
        params["slurm_gres"] = f"gpu:{gpn}"
    elif directive == "gpus-per-task":
        params["slurm_gpus_per_task"] = 1
    else:
        raise SporchError(f"unknown gpu_directive {directive!r}")
    for key in ("partition", "account", "qos", "constraint"):
        if slurm.get(key) not in (None, ""):
            params[f"slurm_{key}"] = str(slurm[key])
    if slurm.get("mem") not in (None, ""):
        additional["mem"] = str(slurm["mem"])
    if slurm.get("exclusive"):
        params["slurm_exclusive"] = True
    additional.update(_extra_parameters(list(slurm.get("extra", []))))
    params["slurm_additional_parameters"] = additional
    return params


def python_command(request: SubmitRequest) -> str | None:
    """The cluster's ``python`` when it is not the default (``python``); None = submitit's
    default, this interpreter (``sys.executable``), which jobs on a shared filesystem see."""
    py = request.plan.cluster.python or "python"
    return None if py in ("python", "python3") else py


class SubmititBackend:
    name = "submitit"

    def __init__(self, host: Host = LOCAL) -> None:
        self.host = host  # always this machine (get_backend refuses a remote host)

    def submit(self, request: SubmitRequest) -> Submitted:
        import submitit

        folder = f"{request.job_dir.rstrip('/')}/{FOLDER}"
        kwargs = {}
        py = python_command(request)
        if py:
            kwargs["slurm_python"] = py
        try:
            executor = submitit.AutoExecutor(folder=folder, cluster="slurm", **kwargs)
            executor.update_parameters(**executor_parameters(request))
        except (ValueError, RuntimeError) as e:
            raise SporchError(f"submitit: {' '.join(str(e).split())}") from None
        captured = io.StringIO()
        try:
            # submitit prints sbatch's stderr itself on failure; keep it for our one-line error
            with contextlib.redirect_stderr(captured):
                job = executor.submit(run_rank, request.plan_path, request.job_dir)
        except submitit.core.utils.FailedJobError as e:
            text = str(e) or captured.getvalue()
            reason = slurm_reason(text) or "sbatch failed"
            raise SlurmCommandError(f"Slurm rejected the job: {reason}", tool="sbatch", reason=reason,
                                    returncode=None, stderr=text) from None
        except FileNotFoundError:
            raise SlurmCommandError("Slurm command 'sbatch' not found on PATH", tool="sbatch",
                                    reason="command not found", returncode=None) from None
        return Submitted(slurm_job_id=str(job.job_id), backend=self.name, logs=dict(LOGS))

    def cancel(self, job_ids: Sequence[str]) -> None:
        scancel(list(job_ids), host=self.host)
