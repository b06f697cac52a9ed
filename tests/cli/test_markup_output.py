"""Untrusted text (error lines from result files, names, paths) is printed as it is, never parsed
as rich markup (issue 9, item 6): a gloo-style ``[/__w/...]`` error once crashed the summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.cli.markup_hooks import GLOO_ERROR

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "examples" / "tiny.yaml"
HOOKS = Path(__file__).resolve().parent


def sporch(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", *args], cwd=REPO, text=True,
                          capture_output=True, timeout=300, env={**os.environ, **env})


def _flat(text: str) -> str:
    """Table output with the box drawing and line wrapping removed."""
    keep = "".join(ch for ch in text if ch not in "│┃┏┓┗┛┡┩└┘┌┐━─╇╋┳┻┼├┤═║╔╗╚╝")
    return "".join(keep.split())


def test_run_summary_and_status_print_a_gloo_error_line_as_it_is(tmp_path):
    home = tmp_path / "home"
    env = {"PYTHONPATH": os.pathsep.join([str(HOOKS), str(REPO), os.environ.get("PYTHONPATH", "")]),
           "SPORCH_HOME": str(home), "SPORCH_DIST_TIMEOUT_S": "60"}
    run_dir = tmp_path / "run[red]x[/red]"  # a path with markup in it, too
    proc = sporch("run", "--local", "--cluster", "local", str(TINY), "entrypoint=markup_hooks:raise_gloo_error",
                  "--run-dir", str(run_dir), "--timeout", "120", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for bad in ("MarkupError", "internal error", "Traceback"):
        assert bad not in proc.stdout + proc.stderr
    result = json.loads((run_dir / "result.json").read_text())
    assert GLOO_ERROR in result["error"]
    assert _flat(GLOO_ERROR) in _flat(proc.stdout)  # the summary table shows the line, tags and all
    assert _flat(str(run_dir)) in _flat(proc.stdout + proc.stderr)

    proc = sporch("status", "--all", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "MarkupError" not in proc.stderr and "internal error" not in proc.stderr
    assert _flat("[/__w/pytorch/pytorch/third_party/gloo") in _flat(proc.stdout)
    assert _flat("[bold]x[/bold] [/]") in _flat(proc.stdout)


def test_campaign_report_prints_untrusted_cells_as_they_are(tmp_path):
    root = tmp_path / "c"
    (root / "points").mkdir(parents=True)
    (root / "campaign.yaml").write_text("name: synth\nbase: {model: {preset: tiny}, workload: {seq_len: 64}}\n"
                                        "matrix: {clusters: [local]}\n")
    for pid, status, preset in (("ok", "completed", "tiny"), ("bad", "[/__w/x] failed", "[bold]p[/]")):
        d = root / "points" / pid
        d.mkdir()
        values = {"cluster": "local", "nodes": 1, "gpus": 4, "layout": "1x1x1x4", "preset": preset,
                  "shape": "64", "dtype": "float32", "repeat": 0}
        point_id = "b[/__w]" if pid == "bad" else pid
        (d / "point.json").write_text(json.dumps({"id": point_id, "params": {}, "values": values, "group": "g"}))
        (d / "result.json").write_text(json.dumps({"status": status, "error": GLOO_ERROR,
                                                   "metrics": {"step_ms_median": 10.0}}))
    proc = sporch("campaign", "report", str(root), env={})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "MarkupError" not in proc.stderr and "internal error" not in proc.stderr
    assert "1 point not completed: b[/__w] [/__w/x] failed" in proc.stdout
    rows = [line for line in proc.stdout.splitlines() if line.startswith("│ b[/")]
    assert rows and "│ [bold" in rows[0] and "│ [/__w" in rows[0]  # id, preset, status cells (cut to width)
