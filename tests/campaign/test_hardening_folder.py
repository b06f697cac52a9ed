"""Issue 24, campaign folders: no write through a symbolic link (item 1), campaign names that
stay inside their folder (item 4), and ``campaign status`` never keeping a runner out (item 8)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from sporch.orchestrator.campaign.folder import CampaignDir
from sporch.orchestrator.campaign.lock import CampaignBusy, CampaignLock
from sporch.orchestrator.campaign.report_csv import write_csv
from sporch.orchestrator.campaign.spec import campaign_from_dict
from sporch.orchestrator.contract.results import write_json_atomic
from sporch.orchestrator.safe_files import UnsafeFileError, write_atomic
from sporch.orchestrator.errors import SporchError

VICTIM_TEXT = "precious\n"


def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim.txt"
    path.write_text(VICTIM_TEXT)
    return path


def prepared(tmp_path: Path) -> CampaignDir:
    """A campaign directory as `campaign status` reads it: a manifest with points, no arrays."""
    cdir = CampaignDir(tmp_path / "camp")
    cdir.root.mkdir()
    points = {f"p{i}": {"id": f"p{i}", "params": {}, "values": {"gpus": 1}, "group": "g"} for i in range(3)}
    cdir.manifest.write_text(json.dumps({"name": "camp", "points": points, "groups": {}, "skipped": []}))
    return cdir


def sporch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", *args],
                          capture_output=True, text=True, timeout=120)


# -- item 1: never write through a symbolic link ---------------------------------------------------
def test_status_leaves_a_lock_link_target_alone(tmp_path):
    cdir, target = prepared(tmp_path), victim(tmp_path)
    cdir.lock.symlink_to(target)
    r = sporch("campaign", "status", str(cdir.root), "--json")
    assert r.returncode == 0, r.stderr
    assert target.read_text() == VICTIM_TEXT
    assert json.loads(cdir.state.read_text())["schema"]  # no runner: status saved the state


def test_status_refuses_a_state_lock_link_in_one_line(tmp_path):
    cdir, target = prepared(tmp_path), victim(tmp_path)
    (cdir.root / ".state.lock").symlink_to(target)
    r = sporch("campaign", "status", str(cdir.root))
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "symbolic link" in r.stderr, r.stderr
    assert target.read_text() == VICTIM_TEXT


def test_runner_lock_refuses_a_link_and_leaves_its_target_alone(tmp_path):
    cdir, target = prepared(tmp_path), victim(tmp_path)
    cdir.lock.symlink_to(target)
    with pytest.raises(UnsafeFileError, match="symbolic link"):
        CampaignLock(cdir.lock, ["sporch", "campaign", "run"]).acquire()
    assert target.read_text() == VICTIM_TEXT


def test_report_table_replaces_a_link_instead_of_writing_through_it(tmp_path):
    target = victim(tmp_path)
    table = tmp_path / "camp" / "report" / "table.csv"
    table.parent.mkdir(parents=True)
    table.symlink_to(target)
    write_csv([], table)
    assert target.read_text() == VICTIM_TEXT
    assert not table.is_symlink() and table.read_text().startswith("id")


def test_json_and_text_writes_replace_links(tmp_path):
    target = victim(tmp_path)
    for name, write in (("state.json", lambda p: write_json_atomic(p, {"a": 1})),
                        ("plan.json", lambda p: write_atomic(p, "{}\n"))):
        path = tmp_path / name
        path.symlink_to(target)
        write(path)
        assert target.read_text() == VICTIM_TEXT
        assert not path.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json", "state.json", "victim.txt"]  # no temp left


# -- item 4: the campaign's name is one folder inside output_dir -----------------------------------
def campaign_doc(tmp_path: Path, name: str) -> dict:
    base = tmp_path / "job.yaml"
    base.write_text("model: {preset: tiny}\nworkload: {kind: benchmark, frames: 5, height: 32, width: 32}\n")
    return {"name": name, "output_dir": str(tmp_path / "out"), "base": str(base),
            "matrix": {"clusters": ["local"], "nodes": [1]}}


@pytest.mark.parametrize("name", ["..", ".", "..."])
def test_dot_names_are_refused_with_a_file_base(tmp_path, name):
    with pytest.raises(SporchError, match="'name'.*not a folder name"):
        campaign_from_dict(campaign_doc(tmp_path, name), "c.yaml")


def test_a_long_name_is_refused_in_one_line(tmp_path):
    with pytest.raises(SporchError, match="'name' is 300 characters long"):
        campaign_from_dict(campaign_doc(tmp_path, "a" * 300), "c.yaml")


def test_cli_refuses_dotdot_name_and_writes_nothing(tmp_path):
    doc = campaign_doc(tmp_path, "..")
    doc["output_dir"] = str(tmp_path / "out" / "sub")
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps(doc))
    before = sorted(os.listdir(tmp_path))
    r = sporch("campaign", "run", str(path))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "'name'" in r.stderr
    assert sorted(os.listdir(tmp_path)) == before


# -- item 8: status never keeps a runner out -------------------------------------------------------
def test_runner_started_during_repeated_status_is_never_refused(tmp_path):
    """Status runs back to back in a subprocess while this process starts and stops "runs"
    (the runner's lock, as ``campaign run`` takes it) as fast as it can."""
    cdir = prepared(tmp_path)
    loop = ("import subprocess, sys\n"
            "for _ in range(12):\n"
            "    r = subprocess.run([sys.executable, '-m', 'sporch.orchestrator.cli.main', 'campaign', 'status',"
            f" {str(cdir.root)!r}], capture_output=True)\n"
            "    assert r.returncode == 0, r.stderr\n")
    statuses = subprocess.Popen([sys.executable, "-c", loop], stderr=subprocess.PIPE, text=True)
    refused, starts = [], 0
    while statuses.poll() is None:
        try:
            lock = CampaignLock(cdir.lock, ["sporch", "campaign", "run"]).acquire()
        except CampaignBusy as e:
            refused.append(str(e))
            continue
        starts += 1
        lock.release()
    assert statuses.returncode == 0, statuses.stderr.read()
    assert starts > 0 and refused == [], refused[:1]


def test_status_while_a_runner_holds_the_folder_reads_only(tmp_path):
    cdir = prepared(tmp_path)
    lock = CampaignLock(cdir.lock, ["sporch", "campaign", "run"]).acquire()
    try:
        r = sporch("campaign", "status", str(cdir.root), "--json")
    finally:
        lock.release()
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["counts"]
    assert not cdir.state.exists()  # the runner's state is the runner's to save


def test_runner_waits_for_a_saving_status_instead_of_being_refused(tmp_path):
    from sporch.orchestrator.campaign.lock import try_state_lock

    cdir = prepared(tmp_path)
    saving = try_state_lock(cdir.root)
    assert saving is not None
    outcome: list = []
    started = threading.Thread(target=lambda: outcome.append(CampaignLock(cdir.lock).acquire()))
    started.start()
    started.join(0.5)
    assert outcome == []  # waiting, not refused
    saving.release()
    started.join(30)
    assert len(outcome) == 1
    assert try_state_lock(cdir.root) is None  # the runner now holds the state lock (shared)
    outcome[0].release()
