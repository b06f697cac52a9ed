"""Issue 19 item 1 on the loopback Slurm lab: the tiny verify job with every rank in a podman
container, through both backends (sbatch on 2 nodes, submitit on 1).

The image is the smallest that runs the job: a root file system folder (``--rootfs``) holding
nothing but mount points, into which the container binds the host's /usr and /etc, this test's
Python environment (its prefix, its base prefix) and the repository, all read-only; the job folder
is mounted by sporch itself. ``container.python`` is this interpreter, so the ranks inside run the
code under test. Each rank's container carries a label unique to the test; ``podman events``
then shows one container started per rank.

Probe first: a container that imports ``sporch.runtime.launch`` must start on this machine,
with podman's defaults or else with a ``containers.conf`` (``CONTAINERS_CONF``, exported by the
descriptor's ``env``) that sets the open-files and processes limits to what the host allows
(podman's defaults are above them: raising them needs CAP_SYS_RESOURCE, which a sandbox may
lack) and, where crun refuses the host's cgroup layout ("cgroups in hybrid mode"), runc as the
OCI runtime. Skipped with every configuration's error when none starts; failed instead when
SPORCH_REQUIRE_PODMAN=1 (scripts/test.sh installs podman and runc as root).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest
import yaml

import sporch.orchestrator

from .test_submit_live import ROOT, Sporch, _result

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

#: Namespaces shared with the host, as sporch renders them (the probe starts the same container).
SHARED = ["--network", "host", "--ipc", "host", "--pid", "host", "--uts", "host"]


def _unavailable(reason: str):
    if os.environ.get("SPORCH_REQUIRE_PODMAN") == "1":
        pytest.fail(f"SPORCH_REQUIRE_PODMAN=1 but podman cannot run the job's container here: {reason}",
                    pytrace=False)
    pytest.skip(f"podman cannot run the job's container here: {reason}")


def make_rootfs(folder: Path) -> Path:
    """An empty root file system: mount points, and Debian's merged-/usr links."""
    for d in ("usr", "etc", "proc", "sys", "dev", "run", "root", "tmp", "var/tmp"):
        (folder / d).mkdir(parents=True, exist_ok=True)
    for d in ("tmp", "var/tmp"):
        (folder / d).chmod(0o1777)
    for link in ("bin", "sbin", "lib", "lib64"):
        if (Path("/") / link).is_symlink():
            (folder / link).symlink_to(os.readlink(Path("/") / link))
    return folder


def python_mounts() -> List[str]:
    """This interpreter's prefix and base prefix, the checkout sporch is imported from, and the
    repository (examples on PYTHONPATH), read-only at their own paths; /usr and /etc first."""
    roots: List[str] = []
    for p in sorted({sys.base_prefix, sys.prefix, str(Path(sporch.orchestrator.__file__).resolve().parents[1]),
                     str(ROOT)}):
        if not any(p == r or p.startswith(r.rstrip("/") + "/") for r in roots + ["/usr", "/etc"]):
            roots.append(p)
    return ["/usr:/usr:ro", "/etc:/etc:ro"] + [f"{p}:{p}:ro" for p in roots]


def _conf(folder: Path, runc: bool) -> Path:
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nofile = 1 << 20 if nofile == resource.RLIM_INFINITY else nofile
    text = (f'[containers]\ndefault_ulimits = ["nofile={nofile}:{nofile}", "nproc=32768:32768"]\n'
            + ('[engine]\nruntime = "runc"\n' if runc else ""))
    path = folder / ("containers-runc.conf" if runc else "containers.conf")
    path.write_text(text)
    return path


def probe(rootfs: Path, mounts: List[str], folder: Path) -> Tuple[Optional[Dict[str, str]], List[str]]:
    """The environment (``CONTAINERS_CONF`` or none) in which podman starts a container that
    imports the runtime; None and each configuration's error when none does."""
    configs: List[Tuple[str, Dict[str, str]]] = [("podman's defaults", {})]
    configs.append(("host limits (crun)", {"CONTAINERS_CONF": str(_conf(folder, runc=False))}))
    if shutil.which("runc"):
        configs.append(("host limits, runc", {"CONTAINERS_CONF": str(_conf(folder, runc=True))}))
    cmd = ["podman", "run", "--rm", *SHARED, *[w for m in mounts for w in ("-v", m)], "--rootfs", str(rootfs),
           sys.executable, "-c", "import sporch.runtime.launch; print('ok')"]
    errors = []
    for what, env in configs:
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env={**os.environ, **env})
        except subprocess.TimeoutExpired:
            errors.append(f"{what}: no answer in 180 s")
            continue
        if p.returncode == 0 and p.stdout.strip().endswith("ok"):
            return env, errors
        last = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
        errors.append(f"{what}: {last}")
    return None, errors


@pytest.fixture(scope="module")
def lab(slurm_cluster, tmp_path_factory, scancel_recorded):
    if shutil.which("podman") is None:
        _unavailable("podman is not installed (apt-get install podman runc)")
    root = tmp_path_factory.mktemp("container-live")
    rootfs, mounts = make_rootfs(root / "rootfs"), python_mounts()
    env, errors = probe(rootfs, mounts, root)
    if env is None:
        _unavailable("; ".join(errors))
    label = f"sporch.test={uuid.uuid4().hex[:12]}"
    data = yaml.safe_load((ROOT / "clusters" / "slurmlab.yaml").read_text())
    data["name"] = "ctrlab"
    data["env"] = {**data.get("env", {}), **env}
    data["container"] = {"runtime": "podman", "image": str(rootfs), "mounts": mounts, "python": sys.executable,
                         "gpus": False, "options": ["--label", label]}
    clusters = root / "clusters"
    clusters.mkdir()
    (clusters / "ctrlab.yaml").write_text(yaml.safe_dump(data))
    s = Sporch(root / "home", root / "runs")
    s.env["SPORCH_CLUSTERS"] = str(clusters)
    yield s, label
    scancel_recorded((s.home / "jobs").glob("*.json"))


def _started(label: str, since: str) -> List[str]:
    p = subprocess.run(["podman", "events", "--stream=false", "--since", since, "--filter", f"label={label}",
                        "--filter", "event=start", "--format", "{{.ID}}"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout.split()


def test_verify_job_completes_inside_podman_with_both_backends(lab):
    sporch, label = lab
    since = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    recs = []
    nodes = {"sbatch": 2, "submitit": 1}  # submitit's script wraps each rank the same on one node as on two
    for via, n in nodes.items():
        p = sporch("submit", "--json", "--cluster", "ctrlab", str(ROOT / "examples" / "tiny.yaml"),
                   f"output_dir={sporch.runs}", f"name=ctr-{via}", "workload.kind=verify", f"resources.nodes={n}",
                   "--via", via)
        assert p.returncode == 0, p.stderr
        recs.append(json.loads(p.stdout))
    for rec, n in zip(recs, nodes.values()):
        w = sporch("wait", rec["id"], "--interval", "1", "--timeout", "240", timeout=270)
        assert w.returncode == 0, w.stdout + w.stderr
        res = _result(rec)
        assert res["status"] == "completed" and res["verified"] is True and res["world_size"] == 2 * n
        assert res["max_rel_err"] <= 1e-5
        # --uts host: each rank reports its node's name, the job's nodes of the lab
        assert len(res["distinct_hosts"]) == n and set(res["distinct_hosts"]) <= {"node1", "node2", "node3", "node4"}
        plan = json.loads((Path(rec["job_dir"]) / "plan.json").read_text())
        assert plan["cluster"]["container"]["runtime"] == "podman"
    script = (Path(recs[0]["job_dir"]) / "job.sbatch").read_text()
    assert "    podman run --rm --timeout 600 --network host --ipc host --pid host --uts host \\" in script
    submitit_script = next((Path(recs[1]["job_dir"]) / "submitit").glob("*_submission.sh")).read_text()
    assert " podman run --rm " in submitit_script and "-m submitit.core._submit" in submitit_script
    # one container per rank: 4 ranks + 2 ranks
    assert len(_started(label, since)) == 6
