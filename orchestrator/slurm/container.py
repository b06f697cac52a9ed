"""The container every rank runs in: what a ``container`` section may hold, and what it adds to
the ``srun`` line of a batch script (standard library only; docs/clusters.md, "container").

- ``pyxis``: srun options (``--container-image``, ``--container-mounts``, ``--container-workdir``,
  ``--container-env``); the rank command itself runs inside the container.
- ``apptainer`` / ``singularity``: the rank command wrapped in ``apptainer exec [--nv] --bind ...
  IMAGE``; the host's environment (Slurm's variables, the script's exports) reaches the rank.
- ``podman``: the rank command wrapped in ``podman run --rm`` with the host's network, IPC, PID and
  UTS namespaces (NCCL's shared memory and sockets, the node's name), and the variables a rank
  reads passed by name (:data:`PODMAN_PASS`, the cluster's ``env`` names): podman passes none of
  the host's environment otherwise. An image that is an absolute path is a root file system
  folder (``--rootfs``).

The job's folder (an array's: the campaign folder) is always mounted at its own path, so the
rank reads its plan and writes its results where sporch looks for them. Every value is
shell-quoted here; what the runtimes themselves split (commas, colons) is refused by
:func:`check_container` with a one-line :class:`SporchError`.
"""

from __future__ import annotations

import re
import shlex
from typing import Iterable, List, Optional

from sporch.orchestrator.contract.sections import ContainerSpec
from sporch.orchestrator.contract.vocab import CONTAINER_RUNTIMES
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.slurm.directives import CONTROL_RE, ENV_KEY_RE

#: A mount: ``SRC:DST`` or ``SRC:DST:ro|rw``, absolute paths without whitespace, ',' or ':'
#: (pyxis and apptainer split their mount lists on commas, every runtime on colons).
MOUNT_RE = re.compile(r"(/[^\s,:]*):(/[^\s,:]*)(?::(ro|rw))?")
#: An image reference: a registry reference (``nvcr.io/nvidia/pytorch:24.05-py3``, ``name@sha256:...``),
#: an enroot ``host#image``, a URI (``docker://...``, ``library://...``) or a path (``/images/x.sif``,
#: ``./x.sqsh``). It never starts with ``-``: the runtime would read it as one of its options.
IMAGE_RE = re.compile(r"[A-Za-z0-9_./~][A-Za-z0-9_./~:@#+=%-]*")
#: Runtimes that wrap the rank command (the others add srun options).
WRAPPERS = ("apptainer", "singularity", "podman")
#: Variables a rank reads, passed into a podman container by name (``NAME*``: every variable
#: with that prefix, podman's own wildcard): Slurm's task variables, the rendezvous, sporch's
#: and submitit's, the GPUs Slurm gave the task, and the communication libraries' settings.
PODMAN_PASS = ("SLURM_*", "SPORCH_*", "SUBMITIT_*", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE",
               "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "NCCL_*", "TORCH_*", "GLOO_*", "UCX_*",
               "FI_*", "OMP_NUM_THREADS")
#: What a runtime's own parsing of ``container.env`` splits on: srun's ``--export=ALL,K=V,...``
#: (pyxis), apptainer's ``--env`` (a CSV list: commas and double quotes). podman takes ``-e K=V`` whole.
ENV_SPLITS = {"pyxis": ("srun --export", ","), "apptainer": ("apptainer --env", ',"'),
              "singularity": ("singularity --env", ',"')}
#: podman: the GPUs through the NVIDIA Container Toolkit's CDI specification (``nvidia-ctk cdi generate``).
PODMAN_GPUS = ("--device", "nvidia.com/gpu=all")


def check_container(c: ContainerSpec, where: str = "") -> ContainerSpec:
    """``c`` if every value can stand in a batch script and means what it says to its runtime,
    else a one-line SporchError naming the key (``where``: the file, as a prefix)."""
    pre = f"{where}: " if where else ""

    def bad(key: str, msg: str) -> SporchError:
        return SporchError(f"{pre}'container.{key}' {msg}")

    if c.runtime not in CONTAINER_RUNTIMES:
        raise bad("runtime", f"must be one of {', '.join(CONTAINER_RUNTIMES)}, got {c.runtime!r}")
    if not isinstance(c.image, str) or not IMAGE_RE.fullmatch(c.image):
        raise bad("image", "must name the image: a reference (registry/name:tag, docker://..., or a path) of "
                  f"letters, digits and ._/~:@#+=%-, not starting with '-'; got {c.image!r}")
    if c.image.startswith("~"):  # the script passes it quoted (and pyxis as --container-image=~...): never expanded
        raise bad("image", f"{c.image!r} starts with '~', which nothing expands: the batch script passes the image "
                  "quoted; write the full path on the cluster (e.g. /home/USER/img.sif)")
    for m in c.mounts:
        if not isinstance(m, str) or not MOUNT_RE.fullmatch(m):
            raise bad("mounts", f"entry {m!r} is not SRC:DST (absolute paths without whitespace, ',' or ':', "
                      "optionally :ro or :rw), e.g. /scratch:/scratch")
    if c.workdir is not None and (not str(c.workdir).startswith("/") or re.search(r"[\s,]", str(c.workdir))
                                  or CONTROL_RE.search(str(c.workdir))):
        raise bad("workdir", f"must be an absolute path without whitespace or ',', got {c.workdir!r}")
    for key, value in c.env.items():
        if not ENV_KEY_RE.fullmatch(str(key)):
            raise bad("env", f"name {str(key)!r} is not a valid environment variable name")
        if CONTROL_RE.search(str(value)):
            raise bad(f"env.{key}", f"{str(value)!r} must be a single line without control characters")
        carrier, splits = ENV_SPLITS.get(c.runtime, ("", ""))
        if any(ch in str(value) for ch in splits):
            raise bad(f"env.{key}", f"{str(value)!r} holds a {' or '.join(repr(ch) for ch in splits)}, which "
                      f"{carrier} splits on; export it in the cluster's env instead (the host's environment "
                      "reaches the container)")
    if not isinstance(c.python, str) or not c.python.strip() or CONTROL_RE.search(c.python):
        raise bad("python", f"must be the interpreter's command inside the container (one line), got {c.python!r}")
    if not isinstance(c.gpus, bool):
        raise bad("gpus", f"must be true or false, got {c.gpus!r}")
    for option in c.options:
        if not isinstance(option, str) or not option or CONTROL_RE.search(option):
            raise bad("options", f"entry {option!r} must be one non-empty argument on one line")
    return c


def _job_mount(job_dir: str) -> str:
    """The job's folder at its own path; refused when a runtime would split it."""
    if re.search(r"[\s,:]", job_dir) or CONTROL_RE.search(job_dir):
        raise SporchError(f"job dir {job_dir!r} cannot be mounted into a container: use a path without "
                          "whitespace, ',' or ':'")
    return f"{job_dir}:{job_dir}"


def _mounts(c: ContainerSpec, job_dir: str) -> List[str]:
    own = _job_mount(job_dir)
    return [own] + [m for m in c.mounts if m != own]


def _q(words: Iterable[str]) -> str:
    return " ".join(shlex.quote(str(w)) for w in words)


def srun_options(c: ContainerSpec, job_dir: str) -> List[str]:
    """pyxis: srun's container options, unquoted (one argument each); [] for the others."""
    if c.runtime != "pyxis":
        return []
    out = [f"--container-image={c.image}", "--container-mounts=" + ",".join(_mounts(c, job_dir))]
    if c.workdir:
        out.append(f"--container-workdir={c.workdir}")
    if c.env:
        # srun puts the values into the task's environment; --container-env makes them win over
        # the image's own values of the same names
        out.append("--export=ALL," + ",".join(f"{k}={v}" for k, v in c.env.items()))
        out.append("--container-env=" + ",".join(c.env))
    return out + list(c.options)


def wrapper(c: ContainerSpec, job_dir: str, host_env: Iterable[str] = (),
            time_limit_s: Optional[int] = None) -> List[str]:
    """apptainer/singularity/podman: the words before the rank's python, as quoted script lines
    (the runtime and its options, then the image); [] for pyxis. ``host_env``: names of the
    variables the batch script exports (the cluster's env), passed into a podman container.
    ``time_limit_s``: the job's time limit, podman's ``--timeout`` -- a podman container runs
    under conmon, outside the Slurm step's processes: one whose ``podman run`` was killed before
    it passed Slurm's SIGTERM on (a cancelled job) ends at the job's time limit at the latest."""
    if c.runtime not in WRAPPERS:
        return []
    mounts = _mounts(c, job_dir)
    if c.runtime == "podman":
        timeout = ["--timeout", str(int(time_limit_s))] if time_limit_s else []
        lines = [_q(["podman", "run", "--rm", *timeout, "--network", "host", "--ipc", "host", "--pid", "host",
                     "--uts", "host"])]
        lines.append(_q(w for m in mounts for w in ("-v", m)))
        if c.workdir:
            lines.append(_q(["-w", c.workdir]))
        names = list(PODMAN_PASS) + [n for n in host_env if not any(
            n == p or (p.endswith("*") and n.startswith(p[:-1])) for p in PODMAN_PASS)]
        lines.append(_q(w for n in names for w in ("-e", n)))
        if c.env:
            lines.append(_q(w for k, v in c.env.items() for w in ("-e", f"{k}={v}")))
        if c.gpus:
            lines.append(_q(PODMAN_GPUS))
        if c.options:
            lines.append(_q(c.options))
        lines.append(_q(["--rootfs", c.image] if c.image.startswith("/") else [c.image]))
        return lines
    head = [c.runtime, "exec"] + (["--nv"] if c.gpus else [])
    lines = [_q(head + ["--bind", ",".join(mounts)])]
    if c.workdir:
        lines.append(_q(["--pwd", c.workdir]))
    if c.env:
        lines.append(_q(w for k, v in c.env.items() for w in ("--env", f"{k}={v}")))
    if c.options:
        lines.append(_q(c.options))
    lines.append(_q([c.image]))
    return lines


def describe(c: ContainerSpec) -> str:
    """One line for people (``sporch plan``): runtime, image, mounts."""
    extra = f", mounts {', '.join(c.mounts)}" if c.mounts else ""
    image = f"root file system {c.image}" if c.runtime == "podman" and c.image.startswith("/") else c.image
    return f"{c.runtime} {image} (python {c.python}{extra}; the job folder mounted at its own path)"
