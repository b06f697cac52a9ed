"""Issue 24 item 1, job folders: the files sporch writes in a job folder never go through a
symbolic link placed at their name (logs appended to, dry-run files written)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from sporch.orchestrator.contract.files import JobFiles
from sporch.orchestrator.contract.safe_files import UnsafeFileError
from sporch.orchestrator.submit.local_backend import LocalBackend
from sporch.orchestrator.submit.request import write_dry_run

VICTIM_TEXT = "precious\n"


def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim.txt"
    path.write_text(VICTIM_TEXT)
    return path


def test_supervisor_log_link_is_refused_and_its_target_kept(tmp_path):
    target, job_dir = victim(tmp_path), tmp_path / "job"
    (job_dir / "logs").mkdir(parents=True)
    (job_dir / "logs" / "supervisor.log").symlink_to(target)
    request = SimpleNamespace(job=SimpleNamespace(files=JobFiles(str(job_dir))))
    with pytest.raises(UnsafeFileError, match="symbolic link"):
        LocalBackend().submit(request)
    assert target.read_text() == VICTIM_TEXT


def test_dry_run_files_replace_links(tmp_path):
    target, folder = victim(tmp_path), tmp_path / "dry"
    folder.mkdir()
    (folder / "plan.json").symlink_to(target)
    request = SimpleNamespace(files=lambda: {"plan.json": "{}\n", "job.sbatch": "#!/bin/sh\n"})
    write_dry_run(request, str(folder))
    assert target.read_text() == VICTIM_TEXT
    assert (folder / "plan.json").read_text() == "{}\n" and not (folder / "plan.json").is_symlink()
