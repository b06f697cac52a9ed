"""Issue 24 item 1, job folders: the files sporch writes in a job folder never go through a
symbolic link placed at their name (logs appended to, dry-run files written)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from sporch.orchestrator.contract.job_files import JobFiles
from sporch.orchestrator.safe_files import UnsafeFileError
from sporch.orchestrator.submit.local_backend import LocalBackend

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
