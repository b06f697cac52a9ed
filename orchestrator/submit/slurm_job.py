"""One job's Slurm request and files, built once from the Plan (pure, standard library only).

``SlurmJob.from_plan(plan, job_dir)`` holds everything both Slurm backends need: the job's
paths (:class:`~sporch.orchestrator.contract.job_files.JobFiles`), the resources (nodes, tasks, GPU directive,
CPUs, time, partition/account/qos/constraint/mem/exclusive), the requeue signal, the cluster's
``slurm.extra`` options (parsed here, once), the environment and setup lines of the batch script,
the srun arguments, and the container the ranks run in (:mod:`sporch.orchestrator.slurm.container`:
pyxis's srun options, or the apptainer/podman command wrapped around the rank's python).
``templates/sbatch.j2`` renders it; :mod:`.submitit_backend` maps it onto submitit's parameters.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
import shlex
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.contract import settings
from sporch.orchestrator.contract.job_files import JobFiles
from sporch.orchestrator.hangs import DEFAULT_COLLECTIVE_TIMEOUT_S, collective_timeout_s, pg_timeout_s
from sporch.orchestrator.plan.layouts import short
from sporch.orchestrator.contract.durations import time_to_minutes
from sporch.orchestrator.contract.plan import Plan
from sporch.orchestrator.contract.sections import ContainerSpec
from sporch.orchestrator.slurm import container as containers
from sporch.orchestrator.slurm.directives import (
    ENV_KEY_RE,
    JOB_ID_RE,
    OPTION_RE,
    OPTIONAL_OPTIONS,
    WORD_RE,
    check_directive_value,
    check_line,
    filename_pattern,
    parse_extra,
)

#: USR2, 90 s before the time limit: the runtime saves progress and the job is requeued
#: (submitit's default signal; USR1 is NCCL's).
SIGNAL = "USR2"
SIGNAL_DELAY_S = 90
#: One failed rank ends the job.
SRUN_ARGS = ("--kill-on-bad-exit=1",)
#: GPU models that mean "no GPU": the ranks run gloo, NCCL's variables are left out.
CPU_MODELS = frozenset({"cpu"})
#: Entries of PyTorch's flight recorder per rank (TORCH_FR_BUFFER_SIZE; torch's default when on).
FR_TRACE_ENTRIES = 2000


@dataclass(frozen=True)
class SlurmJob:
    files: JobFiles
    name: str
    nodes: int
    tasks_per_node: int
    gpu_directive: str  # gpus-per-node | gres | gpus-per-task
    cpus_per_task: int
    time: str
    options: Dict[str, str]  # partition, account, qos, constraint, mem (set ones only)
    exclusive: bool
    extra: Tuple[Tuple[str, Optional[str]], ...]
    env: Dict[str, str]  # the Plan's cluster environment
    setup: Tuple[str, ...]  # the cluster's lines before srun
    python: str  # the rank's interpreter: the cluster's python, or container.python inside a container
    world_size: int
    layout_text: str
    signal: str = SIGNAL
    signal_delay_s: int = SIGNAL_DELAY_S
    requeue: bool = True
    srun_args: Tuple[str, ...] = SRUN_ARGS
    comment: Dict[str, str] = field(default_factory=dict)  # what the script's header says
    array: Optional[str] = None  # ``--array`` (``0-N[%throttle]``) of a job array
    after: Tuple[str, ...] = ()  # job ids this job waits for (``--dependency=afterany:...``)
    batch_logs: Optional[str] = None  # folder of the batch script's own output (default: files.logs)
    nccl: bool = True  # GPU ranks (NCCL): the script sets PyTorch's flight recorder (hang_env)
    collective_timeout_s: float = DEFAULT_COLLECTIVE_TIMEOUT_S  # the ranks' watchdog (hangs)
    container: Optional[ContainerSpec] = None  # the container every rank runs in (the Plan's cluster section)

    @classmethod
    def from_plan(cls, plan: Plan, job_dir: str) -> "SlurmJob":
        if not job_dir or re.search(r"\s", job_dir):
            raise SporchError(f"job dir {job_dir!r} must be a non-empty path without whitespace")
        c, slurm = plan.cluster, plan.cluster.slurm
        options = {k: str(getattr(slurm, k)) for k in OPTIONAL_OPTIONS if getattr(slurm, k) not in (None, "")}
        container = c.container
        return cls.checked(
            files=JobFiles(job_dir.rstrip("/") or "/"),
            name=plan.job.name,
            nodes=plan.nodes,
            tasks_per_node=plan.gpus_per_node,
            gpu_directive=slurm.gpu_directive,
            cpus_per_task=slurm.cpus_per_task,
            time=plan.job.time or slurm.time,
            options=options,
            exclusive=slurm.exclusive,
            extra=parse_extra(list(slurm.extra)),
            env=dict(c.env),
            setup=tuple(c.setup),
            python=container.python if container else (c.python or "python"),
            world_size=plan.world_size,
            layout_text=short(plan.layout),
            comment={"cluster": c.name, "intra_fabric": c.intra_node.fabric, "inter_fabric": c.inter_node.fabric},
            nccl=c.gpu.model.strip().lower() not in CPU_MODELS,
            collective_timeout_s=collective_timeout_s(plan.job.collective_timeout, plan.job.time or slurm.time),
            container=container,
        )

    @classmethod
    def checked(cls, **fields) -> "SlurmJob":
        return cls(**fields).check()

    def check(self) -> "SlurmJob":
        """Refuse (SporchError, one line) any value that could leave the line it lands on in the
        batch script: directive values are single-line words, environment names are identifiers,
        comments are single lines. Values on shell lines are quoted by the templates (``| sh``);
        ``setup`` and ``python`` are shell by design (docs/clusters.md) and only kept to one line each."""
        if not WORD_RE.fullmatch(self.name):
            raise SporchError(f"job name {self.name!r} must be letters, digits, '-', '_' or '.'")
        check_directive_value("job dir", self.files.job_dir)
        if self.batch_logs is not None:
            check_directive_value("batch log folder", self.batch_logs)
        check_directive_value("slurm.time", self.time)
        for key, value in self.options.items():
            check_directive_value(f"slurm.{key}", value)
        for key, value in self.extra:
            if not OPTION_RE.fullmatch(str(key)):
                raise SporchError(f"slurm.extra option {key!r} is not an sbatch option name")
            check_directive_value(f"slurm.extra --{key}", key if value is None else value)
        if self.array is not None:
            check_directive_value("array", self.array)
        for job_id in self.after:
            if not JOB_ID_RE.fullmatch(str(job_id)):
                raise SporchError(f"dependency {job_id!r} is not a Slurm job id")
        for key in self.env:
            if not ENV_KEY_RE.fullmatch(str(key)):
                raise SporchError(f"env name {key!r} is not a valid environment variable name")
        for key in ("nodes", "tasks_per_node", "cpus_per_task", "world_size", "signal_delay_s"):
            if not isinstance(getattr(self, key), int):
                raise SporchError(f"{key} must be an integer, got {getattr(self, key)!r}")
        check_directive_value("signal", self.signal)
        self.gpu_option()
        check_line("python", self.python)
        for key, value in self.comment.items():
            check_line(key, value)
        check_line("layout", self.layout_text)
        if self.container is not None:
            containers.check_container(self.container)
            self.container_srun_args(), self.container_wrapper()  # the job dir must be mountable
        return self

    def as_array(self, name: str, count: int, throttle: Optional[int], batch_logs: str,
                 after: Sequence[str] = ()) -> "SlurmJob":
        """This request as a job array of ``count`` tasks (at most ``throttle`` at once), its
        batch output under ``batch_logs`` (one file per array task), started once every job in
        ``after`` has ended (whatever its outcome)."""
        spec = f"0-{count - 1}" + (f"%{throttle}" if throttle else "")
        return dataclasses.replace(self, name=name, array=spec, batch_logs=batch_logs,
                                   after=tuple(str(a) for a in after)).check()

    @property
    def time_minutes(self) -> int:
        return time_to_minutes(self.time)

    def gpu_option(self) -> Tuple[str, str]:
        """(sbatch option, value) of the cluster's GPU directive."""
        if self.gpu_directive == "gpus-per-node":
            return "gpus-per-node", str(self.tasks_per_node)
        if self.gpu_directive == "gres":
            return "gres", f"gpu:{self.tasks_per_node}"
        if self.gpu_directive == "gpus-per-task":
            return "gpus-per-task", "1"
        raise SporchError(f"unknown gpu_directive {self.gpu_directive!r}")

    def directives(self) -> List[str]:
        """The ``#SBATCH`` options of the batch script, in order."""
        opt, val = self.gpu_option()
        out = [f"--job-name={self.name}"] + ([f"--array={self.array}"] if self.array else [])
        if self.after:
            out.append("--dependency=afterany:" + ":".join(self.after))
        out += [f"--nodes={self.nodes}", f"--ntasks-per-node={self.tasks_per_node}",
                f"--{opt}={val}", f"--cpus-per-task={self.cpus_per_task}", f"--time={self.time}"]
        out += [f"--{k}={self.options[k]}" for k in OPTIONAL_OPTIONS if k in self.options]
        if self.exclusive:
            out.append("--exclusive")
        out.append(f"--signal={self.signal}@{self.signal_delay_s}")
        if self.requeue:
            out.append("--requeue")
        logs, name = filename_pattern(self.batch_logs or self.files.logs), "%A_%a" if self.array else "%j"
        out += [f"--output={logs}/{name}.out", f"--error={logs}/{name}.err"]
        out += [f"--{k}" if v is None else f"--{k}={v}" for k, v in self.extra]
        return out

    def container_srun_args(self) -> List[str]:
        """srun's container options (pyxis), one argument each, unquoted; [] otherwise."""
        if self.container is None:
            return []
        containers.check_container(self.container)
        return containers.srun_options(self.container, self.files.job_dir)

    def container_srun_options(self) -> List[str]:
        """:meth:`container_srun_args` shell-quoted, one per script line."""
        return [shlex.quote(a) for a in self.container_srun_args()]

    def container_wrapper(self) -> List[str]:
        """The quoted words before the rank's python (apptainer/singularity exec, podman run), one
        script line each; [] without a container or for pyxis. A podman container is also passed
        the names of the script's exported environment (the cluster's env), and ends at the job's
        time limit at the latest."""
        if self.container is None:
            return []
        containers.check_container(self.container)
        return containers.wrapper(self.container, self.files.job_dir, host_env=list(self.env),
                                  time_limit_s=self.time_minutes * 60)

    def in_job_dir(self, path: str) -> str:
        """One of ``files``' paths as the batch script writes it after exporting ``job_env``: under
        ``$SPORCH_JOB_DIR``, double-quoted (``"$SPORCH_JOB_DIR/logs"``), so that the script spells a
        long job dir once and its lines stay short."""
        return f'"${settings.JOB_DIR.name}/{posixpath.relpath(path, self.files.job_dir)}"'

    def job_env(self) -> Dict[str, str]:
        """What every rank finds in its environment about the job's files."""
        return {settings.JOB_DIR.name: self.files.job_dir, settings.PLAN.name: self.files.plan}

    def hang_env(self) -> Dict[str, str]:
        """On GPU clusters, PyTorch's flight recorder of the NCCL collectives, dumped on a timeout
        (docs/troubleshooting.md; the names torch 2.13 reads, ProcessGroupNCCL.hpp and
        FlightRecorder.hpp): the batch script exports these before the cluster's ``env`` (which
        wins), with ``TORCH_FR_DUMP_TEMP_FILE`` pointing into the job folder's ``hang/``
        (``files.fr_trace_prefix``; a job array's per point). NCCL's own heartbeat monitor
        gives up with the process group, after the ranks' collective watchdog."""
        if not self.nccl:
            return {}
        return {"TORCH_FR_BUFFER_SIZE": str(FR_TRACE_ENTRIES), "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
                "TORCH_NCCL_ENABLE_MONITORING": "1",
                "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": str(pg_timeout_s(self.collective_timeout_s))}
