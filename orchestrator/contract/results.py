"""The result files of a run, typed: :class:`RankRecord` (``ranks/rank<N>.json``) and
:class:`JobResult` (``result.json``), written atomically (temporary file in the same folder,
then rename).

Standard library only: the runtime writes these files through these classes and the
orchestrator reads them through them (``sporch status``, ``sporch run --local``, campaigns).
Like the Plan's sections, ``from_dict`` refuses unknown keys; every problem with a file
(not JSON, not an object, an unknown key, a newer ``schema_version``) is a
:class:`ResultFileError` with one line naming the file. Keys are the contract
(docs/contracts.md): add fields, never rename.

Layout of a run's output directory:
    <output_dir>/ranks/rank<N>.json   one per rank: host, timings, status, error
    <output_dir>/result.json          written by rank 0: layout, hosts per rank, timings, errors
    <output_dir>/checkpoint/          progress of a resumable workload (see sporch.runtime.progress)
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Dict, FrozenSet, List, Optional, Type, TypeVar

from sporch.orchestrator.contract.job_files import JobFiles
from sporch.orchestrator.safe_files import write_atomic

#: Version of the result files' keys; a file without ``schema_version`` is version 1. Version 2
#: adds result.json's ``fingerprint`` (:class:`Fingerprint`); version 1 files still load.
RESULT_SCHEMA_VERSION = 2
#: The versions this sporch reads.
READABLE_SCHEMA_VERSIONS = (1, 2)
#: What a rank and a job can end as.
STATUSES = ("completed", "failed", "requeued")
#: The largest result file read (a real one is a few KiB; this bounds a file gone wrong).
MAX_RESULT_BYTES = 16 * 1024 * 1024

R = TypeVar("R", bound="ResultSection")


class BadInputError(ValueError):
    """A failure the job's input caused (weights that do not fit the model, a broken adapter file),
    with a one-line message for the user: a rank that fails with one records it as ``bad_input``.
    :class:`sporch.orchestrator.models.checkpoint_files.CheckpointError` is one."""


class ResultFileError(ValueError):
    """A result file that cannot be read as the contract says; the message is one line."""


# -- writing ------------------------------------------------------------------------------------
def write_json_atomic(path: str | os.PathLike, data: Any) -> Path:
    """``data`` as indented JSON: a new temporary file in the same folder, then a rename
    (never through a symbolic link: :mod:`.safe_files`)."""
    return write_atomic(path, json.dumps(data, indent=2, sort_keys=False, default=_jsonable) + "\n")


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "item"):  # numpy / torch scalars
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def rank_file(output_dir: str | os.PathLike, rank: int) -> Path:
    return Path(JobFiles(str(output_dir)).rank_file(rank))


def result_file(output_dir: str | os.PathLike) -> Path:
    return Path(JobFiles(str(output_dir)).result)


# -- the typed files ----------------------------------------------------------------------------
class ResultSection:
    """JSON round trip of a frozen dataclass whose keys are the contract. Keys in ``OPTIONAL``
    are left out of the file while they are None (a verify job's errors, a failed rank's
    error); every other key is always written."""

    OPTIONAL: ClassVar[FrozenSet[str]] = frozenset()

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is None and f.name in self.OPTIONAL:
                continue
            if isinstance(value, ResultSection):
                value = value.to_dict()
            elif isinstance(value, list):
                value = [v.to_dict() if isinstance(v, ResultSection) else v for v in value]
            out[f.name] = value
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=_jsonable) + "\n"

    @classmethod
    def from_dict(cls: Type[R], data: Any, where: str = "") -> R:
        where = where or cls.__name__
        if not isinstance(data, dict):
            raise ResultFileError(f"{where}: expected a JSON object, got {type(data).__name__}")
        fields = dataclasses.fields(cls)  # type: ignore[arg-type]
        unknown = sorted(set(data) - {f.name for f in fields})
        if unknown:
            raise ResultFileError(f"{where}: unknown key(s) {', '.join(map(str, unknown))} "
                                  f"(result files of schema_version {RESULT_SCHEMA_VERSION})")
        missing = [f.name for f in fields if f.name not in data and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]
        if missing:
            raise ResultFileError(f"{where}: missing key(s) {', '.join(missing)}")
        return cls(**cls._fields_from(dict(data), where))  # type: ignore[call-arg]

    @classmethod
    def _fields_from(cls, data: Dict[str, Any], where: str) -> Dict[str, Any]:
        return data

    @classmethod
    def from_json(cls: Type[R], text: str, where: str = "") -> R:
        where = where or cls.__name__
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ResultFileError(f"{where}: not valid JSON ({exc})") from None
        return cls.from_dict(data, where)

    @classmethod
    def load(cls: Type[R], path: str | os.PathLike) -> R:
        """Read ``path``; ResultFileError when it cannot be read or parsed (FileNotFoundError
        passes through: a missing file is not a broken one)."""
        return cls.from_json(read_bounded_text(path), str(path))

    def write(self, path: str | os.PathLike) -> Path:
        return write_json_atomic(path, self.to_dict())


def read_bounded_text(path: str | os.PathLike, limit: int = MAX_RESULT_BYTES) -> str:
    """The UTF-8 text of a regular file of at most ``limit`` bytes. Anything else (a FIFO, a
    device such as /dev/zero, a folder, a bigger file, bytes that are not UTF-8) is a
    ResultFileError; it never blocks (a FIFO is opened non-blocking and refused) and never reads
    more than ``limit`` + 1 bytes. FileNotFoundError passes through."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise ResultFileError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ResultFileError(f"{path}: not a regular file")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise ResultFileError(f"{path}: cannot read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if size > limit:
        raise ResultFileError(f"{path}: larger than {limit} bytes")
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError:
        raise ResultFileError(f"{path}: not UTF-8 text") from None


def _check_types(data: Dict[str, Any], where: str, mappings: tuple, texts: tuple) -> None:
    """Keys whose value must be an object (or null) and ones that must be text (or null)."""
    for key in mappings:
        if data.get(key) is not None and not isinstance(data[key], dict):
            raise ResultFileError(f"{where}: {key} must be an object, got {type(data[key]).__name__}")
    for key in texts:
        if data.get(key) is not None and not isinstance(data[key], str):
            raise ResultFileError(f"{where}: {key} must be text, got {type(data[key]).__name__}")


def _check_version(data: Dict[str, Any], where: str) -> None:
    version = data.get("schema_version", 1)
    if version not in READABLE_SCHEMA_VERSIONS:
        raise ResultFileError(f"{where}: schema_version {version!r} is not supported (this sporch reads "
                              f"{RESULT_SCHEMA_VERSION}); read it with the sporch that wrote it")


@dataclass(frozen=True)
class RankError(ResultSection):
    """A rank's failure: the rank, the exception in one line (``ValueError: ...``), and in the
    rank's own file the traceback. ``bad_input``: the message for the user when the rank
    failed on unusable input (a :class:`BadInputError`, such as a CheckpointError: the weights do not fit the model)."""

    OPTIONAL: ClassVar[FrozenSet[str]] = frozenset({"traceback", "bad_input"})

    rank: Optional[int]
    error: str
    traceback: Optional[str] = None
    bad_input: Optional[str] = None

    def without_traceback(self) -> "RankError":
        return dataclasses.replace(self, traceback=None)


def error_record(rank: int, exc: BaseException) -> RankError:
    """What a failure looks like in a result file: the rank, the exception in one line, and
    the traceback for whoever wants it."""
    line = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
    return RankError(rank=rank, error=line,
                     traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
                     bad_input=str(exc).splitlines()[0] if isinstance(exc, BadInputError) and str(exc) else None)


@dataclass(frozen=True)
class RankRecord(ResultSection):
    """``ranks/rank<N>.json``: one rank's place, timings, status and error."""

    OPTIONAL: ClassVar[FrozenSet[str]] = frozenset({"device", "threads", "backend", "error"})

    rank: int
    hostname: Optional[str] = None
    node_rank: Optional[int] = None
    local_rank: Optional[int] = None
    launcher: Optional[str] = None  # slurm | torchrun
    job_id: Optional[str] = None
    restart: int = 0  # SLURM_RESTART_COUNT
    started: Optional[float] = None
    device: Optional[str] = None  # set once the rank has a device
    threads: Optional[int] = None
    backend: Optional[str] = None  # torch.distributed's
    status: str = field(kw_only=True)  # STATUSES (keyword-only: keeps the file's key order)
    finished: Optional[float] = None
    metrics: Dict[str, Any] = field(default_factory=dict)
    error: Optional[RankError] = None
    schema_version: int = RESULT_SCHEMA_VERSION

    @classmethod
    def _fields_from(cls, data: Dict[str, Any], where: str) -> Dict[str, Any]:
        _check_version(data, where)
        if not isinstance(data.get("rank"), int) or isinstance(data.get("rank"), bool):
            raise ResultFileError(f"{where}: rank must be an integer, got {data.get('rank')!r}")
        _check_types(data, where, ("metrics",), ("status",))
        if data.get("metrics") is None:
            data["metrics"] = {}
        if data.get("error") is not None:
            data["error"] = RankError.from_dict(data["error"], f"{where}: error")
        return data


@dataclass(frozen=True)
class Fingerprint(ResultSection):
    """What decides a run's speed besides its plan (result.json's ``fingerprint``, schema 2):
    the software versions (sporch, Python, torch, diffusers, transformers, torchao, the attention
    kernel's package), the driver, the GPUs, the NCCL_* and CUDA_* variables and the socket
    interface in effect, the container image, whether the blocks were compiled and the attention
    kernel chosen. Two runs of one point that differ in speed are told apart by
    :meth:`differences` (``campaign compare``, ``campaign history``)."""

    sporch: Optional[str] = None
    torch: Optional[str] = None
    cuda: Optional[str] = None
    cudnn: Optional[str] = None
    nccl: Optional[str] = None
    diffusers: Optional[str] = None
    driver: Optional[str] = None
    python: Optional[str] = None  # the interpreter's version (CPython 3.11.7: "3.11.7")
    transformers: Optional[str] = None  # the text encoders' library
    torchao: Optional[str] = None  # model.quant's library
    attention_kernel_version: Optional[str] = None  # the attention kernel's own package ("flash_attn 2.7.4")
    gpu_model: Optional[str] = None
    gpu_count: Optional[int] = None
    env: Dict[str, str] = field(default_factory=dict)  # the NCCL_* and CUDA_* variables set
    socket_ifname: Optional[str] = None  # NCCL_SOCKET_IFNAME, else GLOO_SOCKET_IFNAME
    container_image: Optional[str] = None
    compiled: Optional[bool] = None
    attention_kernel: Optional[str] = None

    #: How a field is named when it changed ("NCCL 2.21.5 -> 2.23.4").
    LABELS: ClassVar[Dict[str, str]] = {
        "sporch": "sporch", "torch": "torch", "cuda": "CUDA", "cudnn": "cuDNN", "nccl": "NCCL",
        "diffusers": "diffusers", "driver": "driver", "python": "Python", "transformers": "transformers",
        "torchao": "torchao", "attention_kernel_version": "attention kernel package", "gpu_model": "GPU", "gpu_count": "GPUs",
        "socket_ifname": "socket interface", "container_image": "container image", "compiled": "compile",
        "attention_kernel": "attention kernel"}

    @classmethod
    def _fields_from(cls, data: Dict[str, Any], where: str) -> Dict[str, Any]:
        _check_types(data, where, ("env",), ("sporch", "torch", "cuda", "cudnn", "nccl", "diffusers", "driver",
                                             "python", "transformers", "torchao", "attention_kernel_version",
                                             "gpu_model", "socket_ifname", "container_image", "attention_kernel"))
        if data.get("env") is None:
            data["env"] = {}
        return data

    def flat(self) -> Dict[str, Any]:
        """Every field, ``env`` one entry per variable (``env NCCL_P2P_DISABLE``)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "env"}
        out.update({f"env {k}": v for k, v in sorted(self.env.items())})
        return out

    def differences(self, newer: "Fingerprint") -> List[str]:
        """What changed from this run to ``newer``, one phrase per field: ``NCCL 2.21.5 -> 2.23.4``,
        ``env NCCL_P2P_DISABLE unset -> 1``. A field that neither run recorded is no change."""
        a, b = self.flat(), newer.flat()
        out = []
        for key in [*a, *(k for k in b if k not in a)]:
            old, new = a.get(key), b.get(key)
            if old != new:
                label = self.LABELS.get(key, key)
                out.append(f"{label} {'unset' if old is None else old} -> {'unset' if new is None else new}")
        return out


@dataclass(frozen=True)
class JobResult(ResultSection):
    """``result.json``: the job's status, layout, hosts per rank, timings and errors (rank 0
    writes it; the local runner names a rank that died without a record)."""

    OPTIONAL: ClassVar[FrozenSet[str]] = frozenset({
        "max_abs_err", "max_rel_err", "tolerance", "verified", "step_ms_median_max", "outputs",
        "peak_memory_bytes_by_rank", "hang", "step_cache", "fingerprint"})

    status: str  # STATUSES
    job_name: Optional[str] = None
    layout: Optional[Dict[str, int]] = None
    world_size: Optional[int] = None
    nodes: Optional[int] = None
    gpus_per_node: Optional[int] = None
    cluster: Optional[str] = None
    workload: Optional[str] = None
    sequence: Optional[Dict[str, Any]] = None  # the plan's sequence section
    hosts: Dict[str, Optional[str]] = field(default_factory=dict)  # rank -> hostname
    distinct_hosts: List[str] = field(default_factory=list)
    metrics: Dict[str, Any] = field(default_factory=dict)  # rank 0's
    # verify: over all ranks
    max_abs_err: Optional[float] = None
    max_rel_err: Optional[float] = None
    tolerance: Optional[float] = None
    verified: Optional[bool] = None
    # benchmark / inference: the slowest rank's median step
    step_ms_median_max: Optional[float] = None
    # generate: the files every dp replica wrote, and each rank's peak memory
    outputs: Optional[List[Dict[str, Any]]] = None
    peak_memory_bytes_by_rank: Optional[Dict[str, Optional[int]]] = None
    restart: Optional[int] = None
    errors: List[RankError] = field(default_factory=list)
    failed_rank: Optional[int] = None  # the root cause's
    error: Optional[str] = None
    launcher_host: Optional[str] = None
    wall_s: Optional[float] = None
    provenance: Optional[Dict[str, Any]] = None
    # a collective that hung: hangs.HangDiagnosis.to_dict() (``error`` is its line)
    hang: Optional[Dict[str, Any]] = None
    # workload.cache: steps computed/skipped and each rank's skipped steps (contract.step_cache_summary)
    step_cache: Optional[Dict[str, Any]] = None
    # what decides speed besides the plan (schema 2; a version 1 file has none)
    fingerprint: Optional[Fingerprint] = None
    schema_version: int = RESULT_SCHEMA_VERSION

    @classmethod
    def _fields_from(cls, data: Dict[str, Any], where: str) -> Dict[str, Any]:
        _check_version(data, where)
        _check_types(data, where, ("metrics", "layout", "sequence", "hosts", "provenance", "hang", "step_cache",
                                   "fingerprint"),
                     ("status", "error", "job_name", "cluster", "workload"))
        if data.get("fingerprint") is not None:
            data["fingerprint"] = Fingerprint.from_dict(data["fingerprint"], f"{where}: fingerprint")
        for key in ("metrics", "hosts"):
            if data.get(key) is None:
                data[key] = {}
        errors = data.get("errors") or []
        if not isinstance(errors, list):
            raise ResultFileError(f"{where}: errors must be a list, got {type(errors).__name__}")
        data["errors"] = [RankError.from_dict(e, f"{where}: errors[{i}]") for i, e in enumerate(errors)]
        return data

    @property
    def completed(self) -> bool:
        return self.status == "completed"

    def cause(self) -> Optional[RankError]:
        """The error that ended the job (``failed_rank`` and ``error``) as its rank recorded
        it; None when nothing failed."""
        if self.error is None and self.failed_rank is None:
            return None
        return next((e for e in self.errors if e.rank == self.failed_rank and e.error == self.error),
                    RankError(self.failed_rank, self.error or ""))


def read_result(output_dir: str | os.PathLike) -> Optional[JobResult]:
    """``result.json`` of a run; None when there is none. ResultFileError when it is broken."""
    try:
        return JobResult.load(result_file(output_dir))
    except FileNotFoundError:
        return None


def read_rank_files(output_dir: str | os.PathLike) -> dict[int, RankRecord]:
    """Every rank's record that can be read (a broken or half-written file is left out)."""
    out: dict[int, RankRecord] = {}
    folder = Path(JobFiles(str(output_dir)).ranks)
    if not folder.is_dir():
        return out
    for f in sorted(folder.glob("rank*.json")):
        try:
            rec = RankRecord.load(f)
        except (OSError, ResultFileError):
            continue
        out[rec.rank] = rec
    return out


#: Errors that survivors of a failed peer raise (a broken collective): not the root cause.
SECONDARY_ERRORS = ("Connection closed by peer", "Connection reset", "NCCL communicator", "timed out",
                    "Timeout", "recvBytes", "Socket", "Broken pipe", "DistBackendError")


def is_secondary(error: Optional[str]) -> bool:
    """Whether an error line is a peer's broken collective (a consequence, not a cause)."""
    return any(s in str(error or "") for s in SECONDARY_ERRORS)


def root_cause(errors: List[RankError]) -> Optional[RankError]:
    """The error that most likely started a failure: the first (by rank) that is not a peer's
    broken collective; else the first."""
    if not errors:
        return None
    for e in errors:
        if not is_secondary(e.error):
            return e
    return errors[0]
