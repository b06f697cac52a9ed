"""Campaign history on synthetic result files (no jobs): three runs of one campaign recorded and
shown, a planted 2x slower run flagged against the rolling baseline, the store rebuilt from the
result files alone equal to the live one, the report's history section, one-line errors."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from sporch.orchestrator.campaign.history_record import record_dir
from sporch.orchestrator.campaign.history_runs import read_runs
from sporch.orchestrator.campaign.history_store import STORE_FILE, Store, store_path
from sporch.orchestrator.campaign.history_trends import rolling_baseline

DAY = 86400.0
T0 = 1.75e9
#: (id, gpus, layout, step median ms, comm ms)
POINTS = [
    ("p2a", 2, "1x1x1x2", 100.0, 10.0),
    ("p4a", 4, "1x1x2x2", 60.0, 12.0),
    ("p4b", 4, "1x1x4x1", 80.0, 35.0),
]
REVS = ["1111111111aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "2222222222bbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
        "3333333333cccccccccccccccccccccccccccccc-dirty", "4444444444dddddddddddddddddddddddddddddd"]


def make_run(root: Path, n: int, scale: float = 1.0, slow: dict | None = None, name: str = "synth",
             provenance: bool = True) -> Path:
    """Run ``n`` of campaign ``name`` in ``root``: every point's result.json, ``n`` days after T0,
    at git revision REVS[n], step times times ``scale`` (``slow``: id -> another factor)."""
    (root / "points").mkdir(parents=True, exist_ok=True)
    manifest: dict = {"name": name, "points": {}}
    for pid, gpus, layout, step, comm in POINTS:
        f = (slow or {}).get(pid, scale)
        d = root / "points" / pid
        d.mkdir(parents=True, exist_ok=True)
        values = {"cluster": "local", "nodes": 1, "gpus": gpus, "layout": layout, "preset": "tiny",
                  "shape": "9x64x64", "dtype": "float32", "repeat": 0}
        point = {"id": pid, "params": {}, "values": values, "group": "g"}
        (d / "point.json").write_text(json.dumps(point))
        manifest["points"][pid] = point
        metrics = {"step_ms_median": step * f, "step_ms_p90": step * f * 1.1, "step_ms_min": step * f * 0.9,
                   "tokens_per_s": 48 / (step * f / 1e3), "comm_ms_per_step": comm,
                   "peak_memory_bytes": 3 * 2**30, "ideal_ms_per_step": 0.05}
        result = {"status": "completed", "cluster": "local", "metrics": metrics}
        if provenance:
            result["provenance"] = {"sporch_version": "0.1.0", "git_revision": REVS[n],
                                    "torch_version": f"2.{4 + n}.0", "slurm_array_job_id": str(100 + n),
                                    "slurm_array_task_id": str(POINTS.index((pid, gpus, layout, step, comm))),
                                    "finished_at": T0 + n * DAY}
        (d / "result.json").write_text(json.dumps(result))
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


def three_runs(tmp_path: Path, run_cli) -> list[Path]:
    """Three runs of campaign synth (in noise of each other), each seen by `campaign status`
    (which records its completed points, as `campaign run` and `report` do)."""
    dirs = [make_run(tmp_path / f"run{n}" / "synth", n, scale) for n, scale in enumerate((1.0, 1.02, 0.99))]
    for d in dirs:
        code, out, err = run_cli("campaign", "status", d)
        assert code == 0 and "3 done" in out and err == "", out + err
    return dirs


def test_three_runs_show_three_entries_per_point(tmp_path, run_cli, history_store, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    three_runs(tmp_path, run_cli)
    code, out, err = run_cli("campaign", "history", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["store"] == str(history_store)
    points = {p["id"]: p for p in doc["points"]}
    assert sorted(points) == ["p2a", "p4a", "p4b"]
    for pid, _, _, step, _ in POINTS:
        runs = points[pid]["runs"]
        assert [r["git_revision"] for r in runs] == REVS[:3]
        assert [r["torch_version"] for r in runs] == ["2.4.0", "2.5.0", "2.6.0"]
        assert [r["time"] for r in runs] == [T0, T0 + DAY, T0 + 2 * DAY]
        assert [r["value"] for r in runs] == pytest.approx([step, step * 1.02, step * 0.99])
        # the rolling baseline: nothing before the first run, then the median of the runs before
        assert [r["baseline"] for r in runs] == pytest.approx([None, step, step * 1.01])
        assert not any(r["regressed"] for r in runs) and runs[1]["job_id"].startswith("101_")
    # the table: three rows per point, each naming its revision (cut) and torch version
    code, out, err = run_cli("campaign", "history")
    assert code == 0, err
    for pid in ("p2a", "p4a", "p4b"):
        assert f"{pid} (synth): local" in out and "3 runs" in out
    assert out.count("1111111111 ") == 3 and out.count("3333333333-dirty") == 3 and "2.6.0" in out
    # one point; the points of a campaign directory; --last
    code, out, _ = run_cli("campaign", "history", "p4a", "--json", "--last", "2")
    (p4a,) = json.loads(out)["points"]
    assert p4a["total_runs"] == 3 and [r["git_revision"] for r in p4a["runs"]] == REVS[1:3]
    assert p4a["runs"][0]["baseline"] == 60.0  # counted from the runs not shown too
    code, out, _ = run_cli("campaign", "history", tmp_path / "run0" / "synth", "--json")
    assert code == 0 and len(json.loads(out)["points"]) == 3


def test_recording_again_adds_nothing(tmp_path, run_cli, history_store):
    dirs = three_runs(tmp_path, run_cli)
    with Store.open(history_store) as st:
        before = st.dump()
    assert len(before[0]) == 9
    for d in dirs:  # status again, report, a copy of a directory elsewhere: the same result files
        run_cli("campaign", "status", d)
    run_cli("campaign", "report", dirs[1])
    shutil.copytree(dirs[0], tmp_path / "copy" / "synth")
    assert record_dir(tmp_path / "copy" / "synth", history_store) == 0
    with Store.open(history_store) as st:
        assert st.dump() == before


def test_a_planted_2x_slower_run_is_flagged_against_the_baseline(tmp_path, run_cli, history_store,
                                                                  monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    three_runs(tmp_path, run_cli)
    # a fourth run within noise of the baseline passes
    ok = make_run(tmp_path / "ok" / "synth", 3, scale=1.03)
    code, out, err = run_cli("campaign", "compare", "--baseline", ok)
    assert code == 0, out + err
    assert "no regression over 5.0%" in out and "in 3 points" in out
    # the planted one: p4a twice as slow, the rest within noise
    slow = make_run(tmp_path / "slow" / "synth", 3, scale=1.0, slow={"p4a": 2.0})
    code, out, err = run_cli("campaign", "compare", "--baseline", slow)
    assert code == 1, out + err
    lines = [line for line in out.splitlines() if "│" in line]
    flagged = {line.split("│")[1].strip() for line in lines if "%" in line}
    assert flagged == {"p4a"}
    assert re.search(r"p4a .*step_ms_median +│ 60 +│ 120 +│ \+100\.0% ", out), out
    assert "tokens_per_s" in out and "1 points compared" not in out and "3 points compared" in out
    # --k 1: the baseline is the run before (0.99 x): still flagged, by more
    code, out, _ = run_cli("campaign", "compare", "--baseline", slow, "--k", "1", "--threshold", "50%")
    assert code == 1 and "+102.0%" in out
    # recorded (status), the slow run shows in the history as worse than its baseline
    run_cli("campaign", "status", slow)
    code, out, _ = run_cli("campaign", "history", "p4a", "--json")
    runs = json.loads(out)["points"][0]["runs"]
    assert [r["regressed"] for r in runs] == [False, False, False, True]
    assert runs[-1]["ratio"] == pytest.approx(120 / 60.0)
    code, out, _ = run_cli("campaign", "history", "p4a")
    assert "2.000 worse" in out
    # the planted run compared again once recorded: its own record is not its baseline
    code, out, _ = run_cli("campaign", "compare", "--baseline", slow)
    assert code == 1 and "+100.0%" in out


def test_a_run_before_any_other_has_no_baseline(tmp_path, run_cli):
    first = make_run(tmp_path / "run0" / "synth", 0)
    run_cli("campaign", "status", first)
    code, out, err = run_cli("campaign", "compare", "--baseline", first)
    assert code == 0, err
    assert "no point of" in out and "has an earlier run of campaign synth" in out
    # another campaign's runs of the same point ids are not its baseline
    other = make_run(tmp_path / "other" / "bench", 1, scale=3.0, name="bench")
    code, out, _ = run_cli("campaign", "compare", "--baseline", other)
    assert code == 0 and "nothing to compare" in out


def test_the_store_rebuilt_from_result_files_equals_the_live_one(tmp_path, run_cli, history_store):
    dirs = three_runs(tmp_path, run_cli)
    slow = make_run(tmp_path / "slow" / "synth", 3, slow={"p4a": 2.0})
    code, _, err = run_cli("campaign", "report", slow)
    assert code == 0, err
    dirs.append(slow)
    rebuilt = tmp_path / "rebuilt.sqlite"
    code, out, err = run_cli("campaign", "history", "--rebuild", *dirs, "--store", rebuilt)
    assert code == 0, err
    assert "rebuilt: 12 runs of 3 points" in out
    with Store.open(history_store) as live, Store.open(rebuilt) as again:
        assert live.dump() == again.dump()
        assert len(live.dump()[0]) == 12 and len(live.dump()[1]) > 12 * 5
        assert live.runs() == again.runs()
    # in place, in another order: the same rows (the old store is replaced whole)
    before = Store.open(history_store)
    want = before.dump()
    before.close()
    code, _, err = run_cli("campaign", "history", "--rebuild", *reversed(dirs))
    assert code == 0, err
    with Store.open(history_store) as st:
        assert st.dump() == want
    assert sorted(p.name for p in history_store.parent.iterdir()) == [history_store.name]


def test_time_comes_from_the_files_never_the_clock(tmp_path):
    """A result without provenance.finished_at: rank 0's finished time, else the file's."""
    root = make_run(tmp_path / "c", 0, provenance=False)
    ranks = root / "points" / "p2a" / "ranks"
    ranks.mkdir()
    (ranks / "rank0.json").write_text(json.dumps({"rank": 0, "status": "completed", "started": 100.0,
                                                  "finished": 123.5}))
    os.utime(root / "points" / "p4a" / "result.json", (4567.0, 4567.0))
    times = {r.point_id: r.time for r in read_runs(root)}
    assert times["p2a"] == 123.5 and times["p4a"] == 4567.0
    runs = read_runs(root)
    assert runs == read_runs(root) and all(r.git_revision is None and r.job_id is None for r in runs)


def test_only_completed_points_are_recorded(tmp_path, history_store):
    root = make_run(tmp_path / "c", 0)
    failed = root / "points" / "p4b" / "result.json"
    failed.write_text(json.dumps({"status": "failed", "error": "boom"}))
    (root / "points" / "p4a" / "result.json").write_text("{not json")
    pending = root / "points" / "zz"
    pending.mkdir()
    (pending / "point.json").write_text(json.dumps({"id": "zz", "values": {}}))
    assert record_dir(root, history_store) == 1
    with Store.open(history_store) as st:
        assert [r.point_id for r in st.runs()] == ["p2a"]


def test_the_report_shows_the_history_of_points_run_more_than_once(tmp_path, run_cli):
    first = make_run(tmp_path / "run0" / "synth", 0)
    code, out, _ = run_cli("campaign", "report", first)
    html = (first / "report" / "report.html").read_text()
    assert code == 0 and html.count("data:image/png;base64,") == 4 and "History" not in html
    assert not (first / "report" / "history.json").exists()
    dirs = [first, make_run(tmp_path / "run1" / "synth", 1, 1.02),
            make_run(tmp_path / "run2" / "synth", 2, slow={"p4a": 2.0})]
    for d in dirs[1:]:
        code, out, err = run_cli("campaign", "report", d)
        assert code == 0, err
    assert "history of 3 points" in out
    html = (dirs[2] / "report" / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 4 + 3
    assert all(f'id="history-{pid}"' in html for pid in ("p2a", "p4a", "p4b"))
    section = html[html.index('<section class="history" data-id="p4a"'):]
    section = section[:section.index("</section>")]
    assert section.count("<tr") == 1 + 3 and section.count('class="regressed"') == 1 and "1.980" in section
    assert html.index('data-id="p4a"') < html.index('<section class="history" data-id="p2a"')  # regressed first
    history = json.loads((dirs[2] / "report" / "history.json").read_text())
    assert {d["id"]: len(d["runs"]) for d in history} == {"p2a": 3, "p4a": 3, "p4b": 3}


def test_history_plot(tmp_path, run_cli):
    three_runs(tmp_path, run_cli)
    png = tmp_path / "trend.png"
    code, _, err = run_cli("campaign", "history", "p2a", "p4a", "--plot", png)
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_recording_off_and_default_location(tmp_path, run_cli, monkeypatch):
    monkeypatch.setenv("SPORCH_HISTORY", "off")
    root = make_run(tmp_path / "c", 0)
    code, _, err = run_cli("campaign", "report", root)
    assert code == 0 and err == ""
    code, _, err = run_cli("campaign", "history")
    assert code == 2 and "SPORCH_HISTORY is 'off'" in err and len(err.strip().splitlines()) == 1
    assert store_path(tmp_path / "x.sqlite") == tmp_path / "x.sqlite"
    monkeypatch.delenv("SPORCH_HISTORY")
    monkeypatch.setenv("SPORCH_HOME", str(tmp_path / "home"))
    assert store_path() == tmp_path / "home" / STORE_FILE
    code, _, err = run_cli("campaign", "report", root)
    assert code == 0 and (tmp_path / "home" / STORE_FILE).is_file()


def test_a_store_that_cannot_be_written_is_a_warning_for_the_report(tmp_path, run_cli, monkeypatch):
    (tmp_path / "blocked").write_text("a file, not a folder")
    monkeypatch.setenv("SPORCH_HISTORY", str(tmp_path / "blocked" / "history.sqlite"))
    code, out, err = run_cli("campaign", "report", make_run(tmp_path / "c", 0))
    assert code == 0 and "report:" in out
    assert err.startswith("warning: history not recorded") and len(err.strip().splitlines()) == 1


def test_one_line_errors(tmp_path, run_cli, history_store):
    def one_line(code, err, *words):
        assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        for w in words:
            assert w in err, err

    code, _, err = run_cli("campaign", "history")
    one_line(code, err, "no history store at", str(history_store), "--rebuild")
    root = make_run(tmp_path / "run0" / "synth", 0)
    code, _, err = run_cli("campaign", "compare", "--baseline", root)
    one_line(code, err, "no history store at")
    run_cli("campaign", "status", root)
    code, _, err = run_cli("campaign", "history", "nosuch")
    one_line(code, err, "no run of point nosuch")
    code, _, err = run_cli("campaign", "history", "p2a", "--campaign", "other")
    one_line(code, err, "no run of point p2a of campaign other")
    code, _, err = run_cli("campaign", "history", "--metric", "speed")
    one_line(code, err, "--metric 'speed' is not a campaign metric")
    code, _, err = run_cli("campaign", "history", "--rebuild")
    one_line(code, err, "--rebuild needs the campaign directories")
    code, _, err = run_cli("campaign", "history", "--rebuild", tmp_path / "nope")
    one_line(code, err, "not found")
    code, _, err = run_cli("campaign", "compare", "--baseline", root, root)
    one_line(code, err, "--baseline compares one campaign directory")
    code, _, err = run_cli("campaign", "compare", root)
    one_line(code, err, "two campaign directories")
    code, _, err = run_cli("campaign", "compare", root, root, "--k", "3")
    one_line(code, err, "go with --baseline")
    bogus = tmp_path / "bogus.sqlite"
    bogus.write_text("not a database at all, just text " * 100)
    code, _, err = run_cli("campaign", "history", "--store", bogus)
    one_line(code, err, str(bogus))
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    code, _, err = run_cli("campaign", "history", "--store", other)
    one_line(code, err, "is not a sporch history store")


@pytest.mark.parametrize("values, k, want", [
    ([1.0, 2.0, None, 3.0, 100.0], 2, [None, 1.0, 1.5, 1.5, 2.5]),
    ([5.0, 1.0, 9.0, 2.0], 5, [None, 5.0, 3.0, 5.0]),
    ([None, None], 3, [None, None]),
])
def test_rolling_baseline(values, k, want):
    assert rolling_baseline(values, k) == want


def test_runs_are_grouped_by_fingerprint_and_the_slower_run_names_what_changed(tmp_path, run_cli, history_store,
                                                                              monkeypatch):
    """Issue 35: three runs, the third on NCCL 2.23.4 and 2x slower; the history groups the runs
    by fingerprint and names the change on the slower run; a version 1 store gains the column."""
    monkeypatch.setenv("COLUMNS", "200")
    fp = {"sporch": "0.1.0", "torch": "2.5.1", "cuda": "12.4", "nccl": "2.21.5", "gpu_model": "H100",
          "gpu_count": 4, "env": {}, "compiled": True, "attention_kernel": "cudnn"}
    dirs = [make_run(tmp_path / f"run{n}" / "synth", n, scale) for n, scale in enumerate((1.0, 1.01, 2.0))]
    for n, d in enumerate(dirs):
        for pid, *_ in POINTS:
            path = d / "points" / pid / "result.json"
            result = json.loads(path.read_text())
            path.write_text(json.dumps({**result, "schema_version": 2,
                                        "fingerprint": {**fp, "nccl": "2.23.4" if n == 2 else "2.21.5"}}))
        code, _, err = run_cli("campaign", "status", d)
        assert code == 0, err
    code, out, err = run_cli("campaign", "history", "--json")
    assert code == 0, err
    runs = {p["id"]: p["runs"] for p in json.loads(out)["points"]}["p2a"]
    assert [r["fingerprint_group"] for r in runs] == [1, 1, 2]
    assert [r["changed"] for r in runs] == [[], [], ["NCCL 2.21.5 -> 2.23.4"]] and runs[2]["regressed"]
    code, out, _ = run_cli("campaign", "history")
    assert "NCCL 2.21.5 -> 2.23.4 (worse)" in out and "#2" in out
    # compare --baseline: the slower run against its history names the change too
    code, out, _ = run_cli("campaign", "compare", "--baseline", dirs[2])
    assert code == 1 and "changed: p2a (1x1x1x2): NCCL 2.21.5 -> 2.23.4" in out
    # a version 1 store (no fingerprint column) still reads, and gains the column when written
    old = tmp_path / "v1.sqlite"
    with sqlite3.connect(old) as conn:
        conn.executescript("CREATE TABLE runs (point_id TEXT NOT NULL, digest TEXT NOT NULL, campaign TEXT NOT NULL, "
                           "campaign_dir TEXT NOT NULL, cluster TEXT, git_revision TEXT, torch_version TEXT, "
                           "sporch_version TEXT, time REAL NOT NULL, job_id TEXT, point_values TEXT NOT NULL, "
                           "PRIMARY KEY (point_id, digest)); CREATE TABLE metrics (point_id TEXT NOT NULL, "
                           "digest TEXT NOT NULL, metric TEXT NOT NULL, value REAL NOT NULL, "
                           "PRIMARY KEY (point_id, digest, metric)); PRAGMA user_version = 1;")
        conn.execute("INSERT INTO runs VALUES ('p0', 'd', 'synth', '/x', 'local', NULL, NULL, NULL, 1.0, NULL, '{}')")
    with Store.open(old) as st:
        assert [r.fingerprint for r in st.runs()] == [None]
    assert record_dir(dirs[2], old) == 3
    with Store.open(old) as st:
        assert {r.point_id: r.fingerprint for r in st.runs()}["p2a"].nccl == "2.23.4"
