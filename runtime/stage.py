"""Weights staged per node (``model.stage: node``): one verified copy of the checkpoint per node.

Without it every rank reads the checkpoint from the shared file system at once (32 ranks, 60 GB:
the file system is the bottleneck). With it, the first rank of each node (local rank 0) copies
the checkpoint once into the cluster's node-local folder (``node_local_dir``; ``{node}`` in it is
the node's name, for machines whose nodes share ``/tmp`` such as the loopback lab), the other
ranks of the node wait for its record, and every rank loads the local copy.

A copy is reused by later jobs on that node when it still checks out: the folder keeps a
manifest (``.sporch-stage.json``) of every file's size, the source's modification time and the
SHA-256 of what was copied. On reuse each local file is hashed again and compared; a file whose
size, source or hash differs (a corrupted or half-written copy, a changed checkpoint) is copied
again. Copies are written next to their final name and renamed once verified (the bytes read
from the source and the bytes read back from the copy hash the same), so a killed job never
leaves a file that looks staged. Files are copied by a few threads in parallel.

Each node's record (files copied and reused, bytes, seconds, the folder) goes to
``<job>/stage/<node>.json``; rank 0 puts them all in ``result.json`` (``metrics.staging``).
``stage_cleanup: end`` in the cluster descriptor removes the copy when the job ends; the default
``keep`` leaves it for the next job.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sporch.orchestrator.contract.plan import Plan
from sporch.orchestrator.safe_files import create_temp, write_atomic

MANIFEST = ".sporch-stage.json"
CHUNK = 8 * 1024 * 1024
THREADS = 4


def staged_folder(source: str, node_local_dir: str, node: str) -> Path:
    """Where ``source`` is staged on ``node``: the node-local folder, then a name that differs
    for every source path (two checkpoints with the same base name do not collide)."""
    src = os.path.abspath(os.path.expanduser(source))
    tag = hashlib.sha256(src.encode()).hexdigest()[:12]
    root = Path(os.path.expanduser(node_local_dir.replace("{node}", node)))
    return root / f"{Path(src).name}-{tag}"


def _files(source: Path) -> dict[str, os.stat_result]:
    """The checkpoint's files by path relative to it (a file alone: its name)."""
    if source.is_file():
        return {source.name: source.stat()}
    out = {}
    for path in sorted(source.rglob("*")):
        if path.is_file():
            out[path.relative_to(source).as_posix()] = path.stat()
    if not out:
        raise FileNotFoundError(f"the weights folder {source} holds no files")
    return out


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _copy_verified(src: Path, dest: Path) -> str:
    """Copy ``src`` to ``dest`` through a temporary name, hashing what is read; read the copy
    back and compare before the rename. Returns the SHA-256."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = create_temp(dest)  # a random name, created exclusively, never through a link
    h = hashlib.sha256()
    try:
        with open(src, "rb") as fin, os.fdopen(fd, "wb") as fout:
            for chunk in iter(lambda: fin.read(CHUNK), b""):
                h.update(chunk)
                fout.write(chunk)
        digest = h.hexdigest()
        if _sha256(tmp) != digest:
            raise OSError(f"the copy of {src} on this node does not read back as written (disk error?)")
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return digest


def _reusable(local: Path, entry: dict[str, Any] | None, st: os.stat_result) -> bool:
    return (entry is not None and entry.get("size") == st.st_size and entry.get("source_mtime_ns") == st.st_mtime_ns
            and local.is_file() and local.stat().st_size == st.st_size and _sha256(local) == entry.get("sha256"))


def stage(source: str, dest: Path) -> dict[str, Any]:
    """Make ``dest`` a verified copy of ``source`` (a file or a folder); the record of what was
    done: ``copied`` and ``reused`` file counts, ``bytes_copied``, ``bytes``, ``seconds``."""
    start = time.perf_counter()
    src = Path(os.path.expanduser(source))
    if not src.exists():
        raise FileNotFoundError(f"the weights path {src} does not exist on this node")
    files = _files(src)
    dest.mkdir(parents=True, exist_ok=True)
    try:
        old = json.loads((dest / MANIFEST).read_text()).get("files", {})
    except (OSError, ValueError, AttributeError):
        old = {}

    def one(rel: str) -> tuple[str, dict[str, Any], bool]:
        st = files[rel]
        local = dest / rel
        if _reusable(local, old.get(rel), st):
            return rel, old[rel], False
        from_path = src if src.is_file() else src / rel
        digest = _copy_verified(from_path, local)
        return rel, {"size": st.st_size, "source_mtime_ns": st.st_mtime_ns, "sha256": digest}, True

    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        done = list(pool.map(one, sorted(files)))
    manifest = {"source": str(src.resolve()), "files": {rel: entry for rel, entry, _ in done}}
    write_atomic(dest / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))
    copied = [rel for rel, _, new in done if new]
    return {"source": str(src), "folder": str(dest), "files": len(done), "copied": len(copied),
            "reused": len(done) - len(copied), "bytes": sum(st.st_size for st in files.values()),
            "bytes_copied": sum(files[rel].st_size for rel in copied),
            "seconds": round(time.perf_counter() - start, 3)}


def local_weights(dest: Path, source: str) -> str:
    """The path a rank loads: the staged folder, or the staged file when ``source`` is one file."""
    src = Path(os.path.expanduser(source))
    return str(dest / src.name) if src.is_file() else str(dest)


def stage_record_file(output_dir: Path, node: str) -> Path:
    return Path(output_dir) / "stage" / f"{node}.json"


def stage_for_node(plan: Plan, local_rank: int, node: str, output_dir: Path, *, attempt: str = "",
                   poll_s: float = 0.5) -> tuple[Plan, dict[str, Any] | None]:
    """With ``plan.model.stage == "node"``: the node's first rank stages the weights and writes
    the node's record; the node's other ranks wait for the record of this ``attempt`` (the job
    id and restart: a requeued job's old record does not count). Not a collective: a copy may
    take longer than any collective timeout (the job's time limit bounds it). Every rank gets the
    plan with ``model.weights`` pointing at the node's copy, and the record; an error staging is
    raised on every rank of the node with its message. Otherwise the plan as it is, and None."""
    model = plan.model
    if model.stage != "node" or not model.weights:
        return plan, None
    dest = staged_folder(model.weights, plan.cluster.node_local_dir, node)
    record_path = stage_record_file(output_dir, node)
    if local_rank == 0:
        try:
            record = {"node": node, "attempt": attempt, **stage(model.weights, dest)}
        except Exception as exc:  # noqa: BLE001 - recorded for the node's other ranks, then raised
            record = {"node": node, "attempt": attempt,
                      "error": f"staging {model.weights} to {dest} on {node} failed: {exc}"}
        write_atomic(record_path, json.dumps(record, indent=1))
    else:
        record = _wait_for_record(record_path, attempt, poll_s)
    if "error" in record:
        raise RuntimeError(record["error"])
    staged = dataclasses.replace(model, weights=local_weights(dest, model.weights))
    return dataclasses.replace(plan, model=staged), record


def _wait_for_record(path: Path, attempt: str, poll_s: float) -> dict[str, Any]:
    while True:
        try:
            record = json.loads(path.read_text())
            if record.get("attempt") == attempt:
                return record
        except (OSError, ValueError):
            pass  # not written yet (write_atomic: never half a file)
        time.sleep(poll_s)


def all_records(output_dir: Path) -> dict[str, Any]:
    """Every node's staging record of the job (``<job>/stage/*.json``), by node."""
    out = {}
    for path in sorted((Path(output_dir) / "stage").glob("*.json")):
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        out[rec.get("node", path.stem)] = rec
    return out


def clean_up(plan: Plan, local_rank: int, node: str) -> None:
    """``stage_cleanup: end``: the node's first rank removes the copy when the job is over."""
    if plan.model.stage == "node" and plan.model.weights and plan.cluster.stage_cleanup == "end" and local_rank == 0:
        shutil.rmtree(staged_folder(plan.model.weights, plan.cluster.node_local_dir, node), ignore_errors=True)
