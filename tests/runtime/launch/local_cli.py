"""``sporch`` as a subprocess for the local-run tests (tests/runtime/launch, tests/runtime/models):
the real CLI with the environment a user has, plus this folder on the ranks' PYTHONPATH for the
``launch_hooks:NAME`` entrypoints."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.testutil import ROOT as REPO

TINY = REPO / "examples" / "tiny.yaml"
#: This folder: the ranks import ``launch_hooks`` from it by name.
HOOKS = Path(__file__).resolve().parent


def sporch(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", *args], cwd=REPO, text=True,
                          capture_output=True, timeout=timeout, env={**os.environ, **(env or {})})


def hooks_env() -> dict:
    return {"PYTHONPATH": os.pathsep.join([str(HOOKS), str(REPO), os.environ.get("PYTHONPATH", "")])}


def local2(folder: Path) -> Path:
    """clusters/local.yaml with 2 ranks (1 node x 2 CPU ranks, cluster ``local2``, node
    ``local2-node0``), written into ``folder``: the fewest ranks that show a launch's behaviour
    (each rank process imports torch: seconds of CPU). ``--cluster`` takes its path."""
    return cluster_twin(folder, "local", gpus_per_node=2, name="local2")


def cluster_twin(folder: Path, cluster: str, *, gpus_per_node: int, name: str | None = None) -> Path:
    """clusters/CLUSTER.yaml with ``gpus_per_node`` ranks per node (and ``name``, default the
    same), written to ``folder/NAME.yaml``."""
    name = name or cluster
    text = (REPO / "clusters" / f"{cluster}.yaml").read_text(encoding="utf-8")
    new = re.sub(r"^gpus_per_node: \d+$", f"gpus_per_node: {gpus_per_node}", text, count=1, flags=re.M)
    new = re.sub(r"^name: \S+$", f"name: {name}", new, count=1, flags=re.M)
    assert f"gpus_per_node: {gpus_per_node}\n" in new and f"name: {name}\n" in new, f"clusters/{cluster}.yaml changed"
    path = Path(folder) / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new)
    return path


def rank_pids(parent: int) -> list[int]:
    """Pids of the rank processes (``sporch.runtime.launch``) whose parent is ``parent``."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent and "sporch.runtime.launch" in cmd:
            out.append(int(d.name))
    return out


def alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
