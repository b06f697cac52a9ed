"""``sporch campaign run`` / ``status`` for real: a 2 node counts x 2 layouts campaign of the tiny
model (4 points: two resource groups of two array tasks each) as Slurm job arrays on the loopback
lab (the campaign over ssh: tests/remote/test_campaign_ssh.py). The CLI runs as a subprocess
with counting wrappers for ``sbatch`` and ``squeue`` first on its PATH (each logs its argv, then
execs the real tool), so the tests count the calls: one sbatch per resource group, one squeue per
status poll, and no finished point submitted twice after one array task is cancelled mid-way and
the campaign re-run.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
BASE = {"model": {"preset": "tiny"},
        "workload": {"kind": "benchmark", "frames": 5, "height": 32, "width": 32, "guidance_scale": 2.0,
                     "dtype": "float32", "warmup": 1, "repeat": 2},
        "resources": {"time": "00:05:00"}}
# (cfg rather than dp: dp ranks never meet during a step, see the lead's note on progress.json)
LAYOUTS = [{"ulysses": 2, "ring": "auto"}, {"ulysses": 1, "ring": "auto"}, {"cfg": 2, "ulysses": 1, "ring": "auto"}]
SHAPES = [{"frames": 5, "height": 32, "width": 32}, {"frames": 5, "height": 32, "width": 64}]
#: The lab campaign's matrix: 1 and 2 nodes (one array each) x 2 layouts x 1 shape = 4 points. A
#: second shape or the third layout adds points of the same kind, not behaviour (issue 52).
LAB_MATRIX = {"nodes": [1, 2], "layouts": [LAYOUTS[0], LAYOUTS[2]], "shapes": SHAPES[:1]}


def write_campaign(folder: Path, name: str, output_dir: str, base: dict = BASE, **matrix) -> Path:
    doc = {"name": name, "output_dir": output_dir, "base": base,
           "matrix": {"clusters": ["slurmlab"], "nodes": [1, 2], "layouts": LAYOUTS, "shapes": SHAPES, **matrix},
           "run": {"throttle": 2, "retries": 1, "pack": False}}  # one task per point (packs: test_campaign_packs_live.py)
    path = folder / f"{name}.yaml"
    path.write_text(json.dumps(doc, indent=1))  # JSON is YAML
    return path


def counting_wrappers(folder: Path, tools=("sbatch", "squeue")) -> Path:
    """``folder/bin/<tool>``: append argv to ``folder/<tool>.log``, then exec the real tool."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for tool in tools:
        real = shutil.which(tool)
        assert real, f"{tool} not on PATH"
        (bin_dir / tool).write_text(f'#!/bin/sh\necho "$*" >> {folder / (tool + ".log")}\nexec {real} "$@"\n')
        (bin_dir / tool).chmod(0o755)
    return bin_dir


def calls(folder: Path, tool: str) -> list[list[str]]:
    log = folder / f"{tool}.log"
    return [line.split() for line in log.read_text().splitlines()] if log.is_file() else []


def listed_points(sbatch_argv: list[str]) -> list[str]:
    """The point ids an array submission runs: its script's list file, one point dir a line."""
    script = Path(sbatch_argv[-1])
    return [Path(line).name for line in script.with_suffix(".list").read_text().splitlines()]


class Cli:
    def __init__(self, cwd: Path, env: dict) -> None:
        self.cwd, self.env = cwd, env

    def popen(self, *args) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "sporch.orchestrator.cli.main", *map(str, args)], cwd=self.cwd,
                                env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def __call__(self, *args, timeout: float = 600) -> subprocess.CompletedProcess:
        p = self.popen(*args)
        out, err = p.communicate(timeout=timeout)
        return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def lab(slurm_cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("campaign-run")
    bin_dir = counting_wrappers(root)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(REPO),
           "SPORCH_HOME": str(root / "home")}
    yield root, Cli(root, env)
    from sporch.orchestrator.slurm.commands import scancel

    for argv in calls(root, "sbatch"):  # nothing of this module stays in the queue
        script = Path(argv[-1])
        state = script.parents[1] / "state.json"
        if state.is_file():
            scancel([a["job_id"] for a in json.loads(state.read_text())["arrays"]])


def test_campaign_on_the_lab_resumes_after_a_kill_and_reports(lab):
    from sporch.orchestrator.slurm.commands import scancel
    from sporch.orchestrator.slurm.query import squeue_states

    root, cli = lab
    path = write_campaign(root, "lab4", str(root / "campaigns"), **LAB_MATRIX)
    cdir = root / "campaigns" / "lab4"

    # submit and return: one sbatch per resource group (1 node, 2 nodes)
    p = cli("campaign", "run", path, "--detach")
    assert p.returncode == 0, p.stderr
    subs = calls(root, "sbatch")
    assert len(subs) == 2
    manifest = json.loads((cdir / "manifest.json").read_text())
    assert len(manifest["points"]) == 4 and not manifest["skipped"]
    assert sorted(listed_points(s) for s in subs) == sorted(g["points"] for g in manifest["groups"].values())
    arrays = [a["job_id"] for a in json.loads((cdir / "state.json").read_text())["arrays"]]
    assert all("--parsable" in s for s in subs)

    # a status poll: ONE squeue call for both arrays
    before = len(calls(root, "squeue"))
    p = cli("campaign", "status", cdir, "--json")
    assert p.returncode == 0, p.stderr
    polls = calls(root, "squeue")[before:]
    assert len(polls) == 1 and f"--jobs={','.join(sorted(arrays))}" in polls[0] and "--array" in polls[0]
    assert sum(json.loads(p.stdout)["counts"].values()) == 4

    # kill one point mid-way: the first array task seen running
    def running():
        rows = squeue_states(arrays, array=True)
        return next((t for t, st in rows.items() if st.name == "RUNNING"), None)

    task = wait_for(running, 240, "an array task to run")
    scancel([task])
    wait_for(lambda: squeue_states(arrays, array=True)[task].terminal, 60, f"{task} to end")
    job, _, index = task.partition("_")
    sub = next(s for s, a in zip(subs, json.loads((cdir / "state.json").read_text())["arrays"])
               if a["job_id"] == job)
    killed = listed_points(sub)[int(index)]
    result = cdir / "points" / killed / "result.json"
    assert not result.exists() or json.loads(result.read_text())["status"] != "completed"

    # the re-run (waiting) holds the lock: a second runner is refused, naming it
    runner = cli.popen("campaign", "run", path, "--interval", "1")
    wait_for(lambda: str(runner.pid) in (cdir / ".lock").read_text(), 60, "the runner to take the lock")
    p = cli("campaign", "run", path, timeout=60)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert f"pid {runner.pid}" in p.stderr and "campaign run" in p.stderr and "in use" in p.stderr
    out, err = runner.communicate(timeout=600)
    assert runner.returncode == 0, out + err
    assert "4 done" in err

    # the killed point was submitted again, alone; no finished point twice
    subs = calls(root, "sbatch")
    assert len(subs) == 3 and listed_points(subs[2]) == [killed]
    submitted = [pid for s in subs for pid in listed_points(s)]
    assert sorted(submitted) == sorted(list(manifest["points"]) + [killed])
    state = json.loads((cdir / "state.json").read_text())["points"]
    assert {pid: rec["submissions"] for pid, rec in state.items()} == {
        pid: 2 if pid == killed else 1 for pid in manifest["points"]}

    # nothing left: a third run submits nothing
    p = cli("campaign", "run", path, "--interval", "1")
    assert p.returncode == 0 and len(calls(root, "sbatch")) == 3, p.stderr
    assert "0 to submit" in p.stderr and "all points done" in p.stderr

    # the report's numbers are the result files'
    p = cli("campaign", "report", cdir, "--out", root / "report")
    assert p.returncode == 0, p.stderr
    with open(root / "report" / "table.csv") as fh:
        table = {r["id"]: r for r in csv.DictReader(fh)}
    assert sorted(table) == sorted(manifest["points"])
    for pid, row in table.items():
        res = json.loads((cdir / "points" / pid / "result.json").read_text())
        assert res["status"] == "completed" and row["status"] == "completed"
        for key in ("step_ms_median", "step_ms_p90", "step_ms_min", "tokens_per_s", "tflops_per_gpu"):
            assert float(row[key]) == res["metrics"][key], (pid, key)
        prov = res["provenance"]
        assert prov["slurm_array_job_id"] in [a["job_id"] for a in json.loads((cdir / "state.json").read_text())
                                              ["arrays"]]
    assert table[killed]["gpus"] in ("2", "4")


def test_status_names_the_failing_point_and_its_error(lab):
    """A point whose run fails counts as failed, with its error line; the re-run retries it up to
    run.retries (1 here), then stops submitting it."""
    root, cli = lab
    broken = {**BASE, "entrypoint": "sporch_no_such_module:main"}  # every rank fails to import it
    path = write_campaign(root, "labfail", str(root / "campaigns"), base=broken, nodes=[1], layouts=LAYOUTS[:1],
                          shapes=SHAPES[:1])
    cdir = root / "campaigns" / "labfail"
    before = len(calls(root, "sbatch"))
    for attempt in (1, 2):
        p = cli("campaign", "run", path, "--interval", "1")
        assert p.returncode == 1 and "1 failed" in p.stderr, p.stderr
        assert "sporch_no_such_module" in p.stderr
    assert ("retries left" in p.stderr) is False
    (pid,) = json.loads((cdir / "manifest.json").read_text())["points"]
    p = cli("campaign", "run", path, "--interval", "1")  # retries exhausted: nothing submitted
    assert p.returncode == 1 and len(calls(root, "sbatch")) == before + 2, p.stderr
    p = cli("campaign", "status", cdir, "--json")
    st = json.loads(p.stdout)
    assert st["counts"] == {"pending": 0, "running": 0, "done": 0, "failed": 1} and st["points"][pid] == "failed"
    assert "sporch_no_such_module" in st["failed"][pid]
    p = cli("campaign", "status", cdir)
    assert pid in p.stdout and "sporch_no_such_module" in p.stdout
