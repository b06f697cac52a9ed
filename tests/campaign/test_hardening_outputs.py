"""Issue 32 items 2, 3 and 5: nothing is written outside what the user named.

One CLI test puts, at every output name of a few commands that write user-named files (render
-o, campaign history --plot, campaign report --out, campaign history --rebuild --store, the
recording store), a link to a file elsewhere, then an existing file; it checks the one rule
(refused without --force; with it the link is replaced, its target untouched) and, at the end,
that nothing outside the work folder changed. The history store: a file that is not sporch's
(text, another application's SQLite database, a link) is never touched; a rebuild from a folder
that is no campaign, or holding no completed run, is refused. ``render`` claims a new job dir
as ``submit`` does."""

from __future__ import annotations

import datetime as _dt
import hashlib
import sqlite3
from pathlib import Path

import pytest

from tests.campaign.test_history import make_run
from tests.testutil import EXAMPLES

TINY = str(EXAMPLES / "tiny.yaml")
VICTIM = b"the user's own file, outside the work folder: must not change\n"


def snapshot(root: Path) -> dict:
    """path -> (kind, sha256 of the bytes or the link's target) of everything under ``root``."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_symlink():
            out[str(p)] = ("link", str(p.readlink()))
        elif p.is_file():
            out[str(p)] = ("file", hashlib.sha256(p.read_bytes()).hexdigest())
        else:
            out[str(p)] = ("dir", "")
    return out


def other_app_db(path: Path) -> Path:
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("CREATE TABLE contacts (name TEXT)")
        conn.execute("INSERT INTO contacts VALUES ('ada')")
    conn.close()
    return path


def one_line(code, err, *words):
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, err


@pytest.fixture
def places(tmp_path, monkeypatch):
    """(work folder, outside folder holding victims): commands run in ``work``."""
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    (outside / "victim.txt").write_bytes(VICTIM)
    (outside / "descriptor.yaml").write_bytes(VICTIM)
    other_app_db(outside / "app.sqlite")
    monkeypatch.chdir(work)
    return work, outside


def test_every_output_name_refuses_links_and_existing_files(places, run_cli, monkeypatch):
    work, outside = places
    before = snapshot(outside)
    campaign = make_run(work / "synth", 0)
    store = work / "h.sqlite"
    code, out, err = run_cli("campaign", "history", "--rebuild", campaign, "--store", store)
    assert code == 0 and "rebuilt: 3 runs" in out, err
    commands = {  # output name -> the command writing it (its --force appended for the second try)
        "script.sbatch": ["render", "--cluster", "local", TINY, "--job-dir", work / "jd", "-o"],
        "trend.png": ["campaign", "history", "--store", store, "--plot"],
    }
    for n, (name, args) in enumerate(commands.items()):
        out_path = work / name
        target = outside / ("victim.txt" if n % 2 else "descriptor.yaml")
        # a link to a file elsewhere: refused, then replaced (never written through) with --force
        out_path.symlink_to(target)
        code, _, err = run_cli(*args, out_path)
        one_line(code, err, "exists", "--force")
        assert out_path.is_symlink()
        if name == "script.sbatch":
            assert not (work / "jd").exists()  # refused before anything was written
        code, _, err = run_cli(*args, out_path, "--force")
        assert code == 0, err
        assert out_path.is_file() and not out_path.is_symlink() and out_path.read_bytes() != VICTIM
        if name == "script.sbatch":
            import shutil

            shutil.rmtree(work / "jd")
        # an existing file: refused, left as it is
        out_path.unlink()
        out_path.write_bytes(VICTIM)
        code, _, err = run_cli(*args, out_path)
        one_line(code, err, "exists", "--force")
        assert out_path.read_bytes() == VICTIM
        # a dangling link (a file that would be created elsewhere): refused, nothing created
        out_path.unlink()
        out_path.symlink_to(outside / f"new-{n}")
        code, _, err = run_cli(*args, out_path)
        one_line(code, err, "exists")
        assert not (outside / f"new-{n}").exists()
    # campaign report --out: a folder holding other files is refused; an earlier report is rewritten
    mine = work / "mine"
    mine.mkdir()
    (mine / "history.json").write_bytes(VICTIM)
    code, _, err = run_cli("campaign", "report", campaign, "--store", store, "--out", mine)
    one_line(code, err, "not an earlier report", "--force")
    assert sorted(p.name for p in mine.iterdir()) == ["history.json"]
    code, _, err = run_cli("campaign", "report", campaign, "--store", store, "--out", work / "rep")
    assert code == 0, err
    (work / "rep" / "table.csv").unlink()
    (work / "rep" / "table.csv").symlink_to(outside / "victim.txt")
    code, _, err = run_cli("campaign", "report", campaign, "--store", store, "--out", work / "rep")
    assert code == 0 and not (work / "rep" / "table.csv").is_symlink(), err
    # the history store: never a link, never a file that is not sporch's
    for name, make in (("link.sqlite", lambda p: p.symlink_to(outside / "app.sqlite")),
                       ("text.sqlite", lambda p: p.write_bytes(VICTIM * 20)),
                       ("empty.sqlite", lambda p: p.write_bytes(b"")),
                       ("app.sqlite", other_app_db)):
        bad = work / name
        make(bad)
        kept = snapshot(work)[str(bad)]
        for args in (["campaign", "history", "--rebuild", campaign, "--store", bad],
                     ["campaign", "history", "--store", bad]):
            code, _, err = run_cli(*args)
            one_line(code, err, str(bad))
        monkeypatch.setenv("SPORCH_HISTORY", str(bad))  # recording (status, report): a warning, nothing written
        code, out, err = run_cli("campaign", "status", campaign)
        assert code == 0 and err.startswith("warning: history not recorded"), err
        assert snapshot(work)[str(bad)] == kept
        monkeypatch.delenv("SPORCH_HISTORY")
    conn = sqlite3.connect(work / "app.sqlite")
    assert conn.execute("SELECT name FROM contacts").fetchall() == [("ada",)]
    conn.close()
    assert snapshot(outside) == before


def test_a_rebuild_needs_campaigns_with_runs_and_replaces_the_store_whole(tmp_path, run_cli):
    campaign = make_run(tmp_path / "c" / "synth", 0)
    store = tmp_path / "h.sqlite"
    code, out, err = run_cli("campaign", "history", "--rebuild", campaign, "--store", store)
    assert code == 0 and "rebuilt: 3 runs" in out, err
    kept = store.read_bytes()
    empty = tmp_path / "empty"
    (empty / "points").mkdir(parents=True)
    (empty / "manifest.json").write_text('{"name": "e", "points": {}}')
    for source, words in ((tmp_path / "c", ("is not a campaign directory",)),  # the campaign's parent
                          (Path("/etc"), ("is not a campaign directory",)),
                          (empty, ("no completed run", "left as it is"))):
        code, _, err = run_cli("campaign", "history", "--rebuild", source, "--store", store)
        one_line(code, err, *words)
        assert store.read_bytes() == kept
    # a store of before the application id (user_version 1, runs and metrics) is still sporch's
    legacy = tmp_path / "legacy.sqlite"
    conn = sqlite3.connect(legacy)
    conn.executescript(store_schema(store))
    conn.execute("PRAGMA user_version = 1")
    conn.close()
    code, out, err = run_cli("campaign", "history", "--rebuild", campaign, "--store", legacy)
    assert code == 0 and "rebuilt: 3 runs" in out, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c", "empty", "h.sqlite", "legacy.sqlite"]


def store_schema(store: Path) -> str:
    conn = sqlite3.connect(store)
    sql = ";\n".join(r[0] for r in conn.execute("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL"))
    conn.close()
    return sql + ";"


def test_render_claims_a_new_job_dir_as_submit_does(tmp_path, run_cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # a job dir of this second and the next few already taken (a render a moment ago)
    now = _dt.datetime.now()
    taken = [tmp_path / "runs" / "tiny" / (now + _dt.timedelta(seconds=s)).strftime("%Y%m%d-%H%M%S")
             for s in range(-1, 4)]
    for d in taken:
        d.mkdir(parents=True)
        (d / "plan.json").write_bytes(VICTIM)
    dirs = []
    for _ in range(2):
        code, out, err = run_cli("render", "--cluster", "local", TINY)
        assert code == 0, err
        dirs.append(Path(err.split("wrote ")[1].split(",")[0]).parent)
    assert dirs[0] != dirs[1] and all(d not in taken for d in dirs)
    assert all((d / "plan.json").read_bytes() == VICTIM for d in taken)
    assert all((d / "plan.json").is_file() and (d / "job.sbatch").is_file() for d in dirs)
    # a named --job-dir that is not empty is refused, as submit refuses it
    code, _, err = run_cli("render", "--cluster", "local", TINY, "--job-dir", taken[0])
    one_line(code, err, "not empty")
    assert (taken[0] / "plan.json").read_bytes() == VICTIM
