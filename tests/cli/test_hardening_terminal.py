"""Untrusted text reaches the terminal inert (issue 24, items 2 and 3): an error line holding
terminal escapes is shown with its control characters written out (``\\x1b``) by ``run --local``'s
summary, ``status`` and ``campaign status``; paths holding rich markup (``[/x]``, ``[red]``) are
printed literally and never crash a command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.cli.escape_hooks import EVIL_ERROR

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "examples" / "tiny.yaml"
HOOKS = Path(__file__).resolve().parent
SHOWN = "\\x1b]0;pwned\\x07then\\x1b[2Jand\\x1b[31mred\\x1b[0mend"  # EVIL_ERROR as shown, flattened


def sporch(*args: str, env: dict, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", *args], cwd=cwd, text=True,
                          capture_output=True, timeout=300, env={**os.environ, **env})


def _flat(text: str) -> str:
    """Table output with the box drawing and line wrapping removed."""
    keep = "".join(ch for ch in text if ch not in "│┃┏┓┗┛┡┩└┘┌┐━─╇╋┳┻┼├┤═║╔╗╚╝")
    return "".join(keep.split())


def _inert(proc: subprocess.CompletedProcess) -> None:
    out = proc.stdout + proc.stderr
    assert "\x1b" not in out and "\x07" not in out, out
    for bad in ("MarkupError", "internal error", "Traceback"):
        assert bad not in out, out


def test_run_summary_and_status_show_an_escape_laden_error_line_escaped(tmp_path):
    env = {"PYTHONPATH": os.pathsep.join([str(HOOKS), str(REPO), os.environ.get("PYTHONPATH", "")]),
           "SPORCH_HOME": str(tmp_path / "home"), "SPORCH_DIST_TIMEOUT_S": "60"}
    run_dir = tmp_path / "run"
    proc = sporch("run", "--local", "--cluster", "local", str(TINY), "entrypoint=escape_hooks:raise_escapes",
                  "--run-dir", str(run_dir), "--timeout", "120", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert EVIL_ERROR in json.loads((run_dir / "result.json").read_text())["error"]  # the file keeps it as it is
    _inert(proc)
    assert SHOWN in _flat(proc.stdout)

    proc = sporch("status", "--all", env=env)
    assert proc.returncode == 0, proc.stderr
    _inert(proc)
    assert SHOWN in _flat(proc.stdout)


def _campaign_dir(root: Path, error: str) -> Path:
    """A prepared campaign folder (manifest + state) whose one point failed with ``error``."""
    root.mkdir(parents=True)
    values = {"cluster": "local", "nodes": 1, "gpus": 4, "layout": "1x1x1x4", "preset": "tiny", "shape": "64",
              "dtype": "float32", "repeat": 0}
    (root / "manifest.json").write_text(json.dumps({"points": {"p0": {"params": {}, "values": values,
                                                                       "group": "g0"}}}))
    (root / "state.json").write_text(json.dumps({"schema": 1, "arrays": [], "points": {
        "p0": {"submissions": 1, "task": "local", "state": "FAILED", "final": True, "error": error}}}))
    return root


def test_campaign_status_shows_an_escape_laden_error_line_escaped(tmp_path):
    root = _campaign_dir(tmp_path / "c", EVIL_ERROR)
    proc = sporch("campaign", "status", str(root), env={})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _inert(proc)
    assert SHOWN in _flat(proc.stdout)


def test_campaign_status_prints_a_path_with_markup_literally(tmp_path):
    proc = sporch("campaign", "status", str(tmp_path / "[" / "x]"), env={})  # not a campaign: one line, exit 2
    assert proc.returncode == 2, proc.stdout + proc.stderr
    _inert(proc)
    assert proc.stderr.startswith("sporch: error:") and "[/x]" in proc.stderr

    for name in ("[red]RED[/red]", "o[", "[/x]"):
        root = _campaign_dir(tmp_path / name, "failed")
        proc = sporch("campaign", "status", str(root), env={})
        assert proc.returncode == 0, proc.stdout + proc.stderr
        _inert(proc)
        assert f"campaign {root}:" in proc.stdout


def test_an_error_message_with_escapes_is_printed_escaped(tmp_path):
    bad = tmp_path / "job\x1b[2J.yaml"
    proc = sporch("plan", "--cluster", "local", str(bad), env={})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    _inert(proc)
    assert "job\\x1b[2J.yaml" in proc.stderr


@pytest.mark.slurm
def test_campaign_run_detach_with_markup_in_output_dir(slurm_cluster, tmp_path):
    """``output_dir: .../o[/x]`` once crashed ``campaign run --detach`` after half the folder was written."""
    from sporch.orchestrator.slurm.commands import scancel

    base = {"model": {"preset": "tiny"}, "entrypoint": "examples.hooks:sleep",
            "workload": {"kind": "benchmark", "frames": 5, "height": 32, "width": 32, "dtype": "float32",
                         "warmup": 1, "repeat": 1},
            "resources": {"time": "00:02:00"}}
    out = tmp_path / "o[" / "x]"
    doc = {"name": "mk", "output_dir": str(out), "base": base,
           "matrix": {"clusters": ["slurmlab"], "nodes": [1], "layouts": [{"ulysses": 1, "ring": "auto"}]}}
    path = tmp_path / "mk.yaml"
    path.write_text(json.dumps(doc))
    env = {**slurm_cluster.env, "PYTHONPATH": str(REPO), "SPORCH_HOME": str(tmp_path / "home"),
           "SPORCH_SLEEP_S": "1"}
    proc = sporch("campaign", "run", str(path), "--detach", env=env, cwd=tmp_path)
    state = out / "mk" / "state.json"
    try:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        _inert(proc)
        assert _flat(f"sporch campaign status {out / 'mk'}") in _flat(proc.stderr)
        assert json.loads(state.read_text())["arrays"]
    finally:
        if state.is_file():
            scancel([a["job_id"] for a in json.loads(state.read_text())["arrays"]])
