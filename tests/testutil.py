"""Helpers shared by the test folders: ``from tests.testutil import ROOT, EXAMPLES, write``.

Every folder under tests/ is a package (it has an ``__init__.py``), so pytest imports a test
file as ``tests.<folder>.<file>`` with the repository root on ``sys.path``; helpers are imported
by that name, whichever folder or file runs on its own.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
#: Fixed job dir used in golden files (stable across machines and runs).
GOLDEN_JOB_DIR = "/sporch/jobs/JOB"


def golden_dir(test_file: str) -> Path:
    """The ``golden/`` folder beside a test file (its expected outputs)."""
    return Path(test_file).resolve().parent / "golden"


def write(folder: Path, name: str, text: str) -> Path:
    p = Path(folder) / name
    p.write_text(text)
    return p


def update_golden() -> bool:
    return os.environ.get("SPORCH_UPDATE_GOLDEN", "") not in ("", "0")
