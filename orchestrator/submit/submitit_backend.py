"""Submit through submitit (the default backend).

One submitit job with ``nodes`` x ``tasks_per_node`` (= GPUs per node) tasks; each task calls
:func:`sporch.orchestrator.submit.task.run_rank` with the Plan, which runs ``sporch.runtime.launch``.
The Slurm request is the request's :class:`~sporch.orchestrator.submit.slurm_job.SlurmJob` (the same
object the sbatch template renders), mapped onto submitit's parameters: the GPU directive,
partition/account/qos/constraint/mem/exclusive, time, ``--requeue``, ``--signal=USR2@90``,
``srun --kill-on-bad-exit=1``, ``slurm.extra``, and the Plan's environment in the batch script.

A container (the Plan's ``cluster.container``) is carried the way submitit documents for
singularity: pyxis's options join the srun arguments, and an apptainer/podman wrapper stands
before the container's python in submitit's ``python`` command (``<wrapper> python -u -m
submitit.core._submit <folder>``). The image must then hold submitit and sporch (the task
unpickles :func:`~sporch.orchestrator.submit.task.run_rank`); the submitit folder lies in the
job folder, which is mounted.

Files: ``<job_dir>/submitit/`` (submitit's pickles, ``<jobid>_submission.sh``, and the logs
``<jobid>_<rank>_log.out|err``; the batch script's own output goes to rank 0's files).
"""

from __future__ import annotations

import contextlib
import io
import shlex
import subprocess
from typing import Any, Dict, List, Sequence

from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.host import LOCAL, Host
from sporch.orchestrator.contract import durations
from sporch.orchestrator.contract.numbers import is_digits
from sporch.orchestrator.contract.job_files import LOG_LAYOUTS
from sporch.orchestrator.slurm.commands import SlurmCommandError, asked, command_failure, scancel, slurm_reason
from sporch.orchestrator.submit.backend import Submitted
from sporch.orchestrator.submit.request import SubmitRequest
from sporch.orchestrator.submit.task import run_rank

LOGS = LOG_LAYOUTS["submitit"]
#: Launcher variables a task must not inherit from the submitter (the runtime would take them
#: for torchrun's).
SCRUB_ENV = ("RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
             "TORCHELASTIC_RUN_ID")


def time_to_minutes(text: str) -> int:
    """Slurm time -> whole minutes, rounded up (submitit's ``timeout_min``)."""
    try:
        return durations.time_to_minutes(text)
    except ValueError as e:
        raise SporchError(str(e)) from None


def setup_lines(request: SubmitRequest) -> List[str]:
    """Batch-script lines before srun: the cluster's setup, the Plan's env, the job's paths."""
    job = request.job
    lines = list(job.setup)
    # Stale launcher variables out; each task then derives MASTER_ADDR (first node) and
    # MASTER_PORT (from the job id) itself: sporch.runtime.rank_env, the same rule as the template.
    lines.append("unset " + " ".join(SCRUB_ENV))
    hang = {**job.hang_env(), "TORCH_FR_DUMP_TEMP_FILE": job.files.fr_trace_prefix} if job.nccl else {}
    for key, value in {**hang, **job.env, **job.job_env()}.items():
        lines.append(f"export {key}={shlex.quote(str(value))}")
    lines.append("mkdir -p " + " ".join(shlex.quote(d) for d in [job.files.logs] + ([job.files.hang] if job.nccl else [])))
    return lines


#: SlurmJob's GPU option -> submitit's parameter.
GPU_PARAMETERS = {"gpus-per-node": "gpus_per_node", "gres": "slurm_gres", "gpus-per-task": "slurm_gpus_per_task"}


def executor_parameters(request: SubmitRequest) -> Dict[str, Any]:
    """``AutoExecutor.update_parameters`` keywords for the request's SlurmJob (pure; unit-tested)."""
    job = request.job
    option, value = job.gpu_option()
    params: Dict[str, Any] = {
        "name": job.name,
        "nodes": job.nodes,
        "tasks_per_node": job.tasks_per_node,
        "cpus_per_task": job.cpus_per_task,
        "timeout_min": time_to_minutes(job.time),
        "slurm_signal_delay_s": job.signal_delay_s,
        "slurm_srun_args": list(job.srun_args) + job.container_srun_args(),
        "slurm_setup": setup_lines(request),
        GPU_PARAMETERS[option]: int(value) if is_digits(value) else value,
    }
    additional: Dict[str, Any] = {"requeue": True} if job.requeue else {}
    for key, val in job.options.items():
        if key == "mem":  # submitit's mem_gb would round; pass Slurm's own text
            additional["mem"] = val
        else:
            params[f"slurm_{key}"] = val
    if job.exclusive:
        params["slurm_exclusive"] = True
    additional.update({k.replace("-", "_"): True if v is None else v for k, v in job.extra})
    params["slurm_additional_parameters"] = additional
    return params


def python_command(request: SubmitRequest) -> str | None:
    """The cluster's ``python`` when it is not the default (``python``); None = submitit's
    default, this interpreter (``sys.executable``), which jobs on a shared filesystem see.
    In a container: the container's python, after the apptainer/podman wrapper (if any)."""
    job = request.job
    py = job.python
    if job.container is not None:
        return " ".join(job.container_wrapper() + [py])
    return None if py in ("python", "python3") else py


class SubmititBackend:
    name = "submitit"

    def __init__(self, host: Host = LOCAL) -> None:
        self.host = host  # always this machine (get_backend refuses a remote host)

    def submit(self, request: SubmitRequest) -> Submitted:
        import submitit

        folder = request.job.files.submitit
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
            raise command_failure("sbatch", reason, asked(self.host, "sbatch"),
                                  subprocess.CompletedProcess(["sbatch"], 1, "", text)) from None
        except FileNotFoundError:
            raise SlurmCommandError("Slurm command 'sbatch' not found on PATH on this machine", tool="sbatch",
                                    reason="command not found", returncode=None) from None
        return Submitted(backend_job_id=str(job.job_id), backend=self.name, logs=dict(LOGS))

    def cancel(self, job_ids: Sequence[str]) -> None:
        scancel(list(job_ids), host=self.host)
