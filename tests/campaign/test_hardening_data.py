"""Corrupt campaign files (issue 24, items 11 and 14): state.json, the lock, result.json,
point.json, calibration files, a full disk while preparing or writing a report, the campaign's
own copy as the input, and `campaign compare` on broken runs.

Every case is driven through the CLI entry point in-process (or as a subprocess where a file
size limit stands in for a full disk): bad input is one line and exit 2, a broken point is
reported as unreadable while the report goes on, and nothing is left half-written.
"""

from __future__ import annotations

import csv
import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sporch.orchestrator.campaign.collect import UNREADABLE, collect
from sporch.orchestrator.campaign.expand import expand
from sporch.orchestrator.campaign.folder import CampaignDir, prepare
from sporch.orchestrator.campaign.lock import CampaignLock
from sporch.orchestrator.safe_files import UnsafeFileError
from sporch.orchestrator.campaign.spec import load_campaign
from sporch.orchestrator.config.calibration_file import load_constants
from sporch.orchestrator.errors import SporchError

REPO = Path(__file__).resolve().parents[2]

VALUES = {"nodes": 1, "preset": "tiny", "shape": "9x64x64", "dtype": "float32", "repeat": 0}


@pytest.fixture
def cli(capsys, monkeypatch, tmp_path):
    """``sporch ARGS`` in-process: (exit code, stdout, stderr)."""
    from sporch.orchestrator.cli.main import main

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SPORCH_CLUSTERS", raising=False)

    def run(*args):
        code = main([str(a) for a in args])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def one_line_error(code: int, err: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("sporch: error: "), err
    assert "Traceback" not in err and "internal error" not in err, err
    return lines[0]


def synthetic(root: Path, points: dict[str, dict]) -> Path:
    """A campaign directory of ``id -> {cluster, gpus, layout, metrics}`` (result.json completed)."""
    (root / "points").mkdir(parents=True, exist_ok=True)
    (root / "campaign.yaml").write_text("name: synth\nbase: {}\nmatrix: {clusters: [local]}\n")
    for pid, p in points.items():
        d = root / "points" / pid
        d.mkdir(parents=True, exist_ok=True)
        values = {**VALUES, "cluster": p.get("cluster", "local"), "gpus": p.get("gpus", 2),
                  "layout": p.get("layout", "1x1x1x2")}
        (d / "point.json").write_text(json.dumps({"id": pid, "params": {}, "values": values, "group": "g"}))
        metrics = p.get("metrics", {"step_ms_median": 100.0, "comm_ms_per_step": 10.0})
        (d / "result.json").write_text(json.dumps({"status": "completed", "metrics": metrics}))
    return root


def two_points(root: Path) -> Path:
    return synthetic(root, {"a": {"gpus": 2, "layout": "1x1x1x2"}, "b": {"gpus": 4, "layout": "1x1x2x2"}})


@pytest.fixture
def prepared(tmp_path) -> CampaignDir:
    """A real prepared campaign of one local point (plan.json and all), nothing run."""
    doc = {"name": "c", "output_dir": str(tmp_path / "out"),
           "base": {"model": {"preset": "tiny"},
                    "workload": {"kind": "benchmark", "frames": 5, "height": 32, "width": 32, "dtype": "float32"}},
           "matrix": {"clusters": ["local"], "nodes": [1], "layouts": [{"ulysses": 1, "ring": "auto"}]}}
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps(doc))
    c = load_campaign(str(path))
    return prepare(expand(c), c.directory())


def the_point(cdir: CampaignDir) -> str:
    return next(cdir.point_dirs()).name


# -- state.json ---------------------------------------------------------------------------------
@pytest.mark.parametrize("content", [b"", b"{", b"[]", b"\xff\xfe\x00", b'{"arrays": 3}', b'{"points": []}',
                                     b'{"points": {"p": 3}}', b'{"arrays": [{"job_id": 1}]}',
                                     b'{"points": {"p": {"submissions": "two"}}}'],
                         ids=["empty", "truncated", "list", "not-utf8", "arrays-int", "points-list",
                              "point-int", "array-no-keys", "submissions-text"])
def test_a_corrupt_state_json_is_one_line_naming_it(prepared, cli, content):
    prepared.state.write_bytes(content)
    line = one_line_error(*cli("campaign", "status", prepared.root)[::2])
    assert str(prepared.state) in line and "move it away" in line


# -- the lock -----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_lock_that_is_not_a_file_is_one_line(prepared, cli, kind):
    if kind == "folder":
        prepared.lock.mkdir()
    else:
        os.mkfifo(prepared.lock)
    with pytest.raises((SporchError, UnsafeFileError), match="not a (regular|plain) file") as info:  # one line
        CampaignLock(prepared.lock, ["sporch", "campaign", "run"]).acquire()
    assert str(prepared.lock) in str(info.value) and "\n" not in str(info.value)
    code, _, err = cli("campaign", "status", prepared.root)  # status never takes the runner's lock
    assert code == 0, err


# -- result.json / point.json: the point is unreadable, the report goes on ----------------------
@pytest.mark.parametrize("bad", ["list", "metrics-list", "fifo", "dev-zero", "not-utf8", "status-number"])
def test_an_unreadable_result_is_reported_and_the_report_goes_on(tmp_path, cli, bad):
    root = two_points(tmp_path / "c")
    result = root / "points" / "b" / "result.json"
    result.unlink()
    if bad == "fifo":
        os.mkfifo(result)  # reading it would block for ever
    elif bad == "dev-zero":
        result.symlink_to("/dev/zero")  # reading it would never end
    else:
        result.write_bytes({"list": b"[1, 2]", "metrics-list": b'{"status": "completed", "metrics": [1]}',
                            "not-utf8": b'{"status": "\xff"}', "status-number": b'{"status": 3}'}[bad])
    code, out, err = cli("campaign", "report", root)
    assert code == 0 and err == "", err
    assert "unreadable: b:" in out and str(result) in out
    rows = {r["id"]: r for r in csv.DictReader(open(root / "report" / "table.csv"))}
    assert rows["a"]["status"] == "completed" and rows["a"]["step_ms_median"] == "100.0"
    assert rows["b"]["status"] == UNREADABLE
    # and status does not hang or fail on it either: the point is not done
    code, out, _ = cli("campaign", "status", root)


def test_numbers_as_text_are_no_metric(tmp_path, cli):
    root = synthetic(tmp_path / "c", {"a": {"metrics": {"step_ms_median": "12", "peak_memory_bytes": "3"}}})
    (row,) = collect(root)
    assert row.ok and row.metrics["step_ms_median"] is None and row.metrics["peak_memory_gib"] is None
    assert cli("campaign", "report", root)[0] == 0


@pytest.mark.parametrize("point", ['{"id": "b"}', '[]', '{"id": 3, "values": {}}', "{"])
def test_an_unreadable_point_json_is_reported_and_the_report_goes_on(tmp_path, cli, point):
    root = two_points(tmp_path / "c")
    (root / "points" / "b" / "point.json").write_text(point)
    code, out, err = cli("campaign", "report", root)
    assert code == 0 and err == "", err
    assert "unreadable: b:" in out
    rows = {r["id"]: r for r in csv.DictReader(open(root / "report" / "table.csv"))}
    assert rows["a"]["status"] == "completed" and rows["b"]["status"] == UNREADABLE


def test_labels_with_dollar_signs_are_text_not_math(tmp_path, cli):
    root = synthetic(tmp_path / "c", {"a": {"cluster": "$\\foo$"}, "b": {"cluster": "x$\\frac{$"},
                                      "c": {"cluster": "plain", "gpus": 4, "layout": "1x1x2x2"}})
    code, out, err = cli("campaign", "report", root)
    assert code == 0, err
    assert (root / "report" / "latency_vs_gpus.png").stat().st_size > 0
    series = json.loads((root / "report" / "plots.json").read_text())["latency_vs_gpus"]["series"]
    assert any("$\\foo$" in label for label in series)


# -- calibration --------------------------------------------------------------------------------
@pytest.mark.parametrize("content", [b"\xff\xfe constants: {}", None], ids=["not-utf8", "fifo"])
def test_a_bad_calibration_file_is_one_line(tmp_path, content):
    path = tmp_path / "cal.yaml"
    if content is None:
        os.mkfifo(path)
    else:
        path.write_bytes(content)
    with pytest.raises(SporchError, match="calibration file") as exc:
        load_constants(path)
    assert len(str(exc.value).splitlines()) == 1


@pytest.mark.parametrize("step", [1e-300, 1e300])
def test_calibrate_refuses_an_absurd_step_time(prepared, cli, step):
    pid = the_point(prepared)
    prepared.result_file(pid).write_text(json.dumps({"status": "completed", "metrics": {"step_ms_median": step}}))
    line = one_line_error(*cli("calibrate", prepared.root)[::2])
    assert pid in line and "--exclude" in line
    assert not (prepared.root / "calibration.yaml").exists()


# -- the campaign's own copy as the input -------------------------------------------------------
def test_running_the_campaigns_own_copy(prepared, cli):
    pid = the_point(prepared)
    prepared.result_file(pid).write_text(json.dumps({"status": "completed", "metrics": {"step_ms_median": 1.0}}))
    code, out, err = cli("campaign", "run", prepared.root / "campaign.yaml", "--local")
    assert code == 0, err
    assert "SameFileError" not in err and "1 done" in err + out


# -- a full disk (a file size limit stands in for it) -------------------------------------------
def _limited(limit: int):
    def setup():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return setup


def _on_a_full_disk(args: list, limit: int, **env: str) -> subprocess.CompletedProcess:
    """``sporch ARGS`` as a process that can write ``limit`` bytes per file. Not measured by
    coverage.py (scripts/coverage.sh): its data file would not fit either, and its failure to save
    it would be a traceback on the stderr the test reads."""
    env = {k: v for k, v in os.environ.items() if k not in ("COVERAGE_PROCESS_START", "COVERAGE_PROCESS_CONFIG")} | env
    return subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", *map(str, args)],
                          capture_output=True, text=True, preexec_fn=_limited(limit), env=env)


def test_a_full_disk_during_report_leaves_no_half_written_table(tmp_path):
    root = synthetic(tmp_path / "c", {f"p{i}": {"gpus": 2 ** (i % 3 + 1), "layout": "1x1x1x2"} for i in range(40)})
    out = tmp_path / "r"
    proc = _on_a_full_disk(["campaign", "report", root, "--out", out], 1000)
    assert not (out / "table.csv").exists()
    assert [p.name for p in out.iterdir()] == []  # no temporary files left either
    assert proc.returncode == 2, proc.stderr
    # one error line; the history store on the same full disk may add its own warning line first
    *before, last = proc.stderr.splitlines()
    assert last.startswith("sporch: error: cannot write the report") and "Traceback" not in proc.stderr
    assert all(line.startswith("warning: history not recorded") for line in before), before


def test_a_full_disk_during_prepare_is_one_line_and_leaves_no_half_written_plan(tmp_path):
    doc = {"name": "c", "output_dir": str(tmp_path / "out"),
           "base": {"model": {"preset": "tiny"},
                    "workload": {"kind": "benchmark", "frames": 5, "height": 32, "width": 32, "dtype": "float32"}},
           "matrix": {"clusters": ["local"], "nodes": [1], "layouts": [{"ulysses": 1, "ring": "auto"}]}}
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps(doc))
    proc = _on_a_full_disk(["campaign", "run", path, "--local"], 1500)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"sporch: error: cannot prepare the campaign directory {tmp_path / 'out' / 'c'} "
                                  "(File too large); free some space")
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    plans = list((tmp_path / "out").rglob("plan.json"))
    assert all(json.loads(p.read_text()) for p in plans)  # every plan.json there is whole
    assert not list((tmp_path / "out").rglob("*.tmp"))


def test_a_full_disk_elsewhere_is_one_line_naming_the_file(tmp_path):
    """Any command: no room for a write is one line naming the file, not an internal error.

    A fresh temp dir makes jinja2 write its compiled-template cache first (as on a fresh
    machine): a cache that cannot be written is skipped, never the error."""
    fresh_tmp = tmp_path / "tmp"
    fresh_tmp.mkdir()
    proc = _on_a_full_disk(["render", "--cluster", "a100x32", REPO / "examples" / "wan14b-720p.yaml",
                            "--out", tmp_path / "job"], 200, TMPDIR=str(fresh_tmp))
    assert proc.returncode != 0 and "internal error" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(f"sporch: error: cannot write {tmp_path / 'job'}/") and "File too large" in proc.stderr
    assert proc.stderr.count("\n") == 1


# -- campaign compare: broken runs are failures -------------------------------------------------
@pytest.mark.parametrize("metric", [float("nan"), float("inf"), None], ids=["nan", "inf", "missing"])
def test_compare_fails_on_a_metric_B_lost(tmp_path, cli, metric):
    a = synthetic(tmp_path / "a", {"p": {"metrics": {"step_ms_median": 100.0, "tokens_per_s": 5.0}}})
    b_metrics = {"tokens_per_s": 5.0}
    if metric is not None:
        b_metrics["step_ms_median"] = metric
    b = synthetic(tmp_path / "b", {"p": {"metrics": b_metrics}})
    code, out, err = cli("campaign", "compare", a, b)
    assert code == 1, out + err
    assert "no regression" not in out
    assert "step_ms_median" in out and "broken" in out


def test_compare_ignores_a_metric_A_never_had(tmp_path, cli):
    a = synthetic(tmp_path / "a", {"p": {"metrics": {"step_ms_median": 100.0}}})
    b = synthetic(tmp_path / "b", {"p": {"metrics": {"step_ms_median": 100.0, "tokens_per_s": float("nan")}}})
    code, out, err = cli("campaign", "compare", a, b)
    assert code == 0 and "no regression" in out
