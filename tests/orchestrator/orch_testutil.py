"""Helpers shared by the orchestrator tests (imported as a top-level module by pytest)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
GOLDEN = Path(__file__).resolve().parent / "golden"
#: Fixed job dir used in golden files (stable across machines and runs).
GOLDEN_JOB_DIR = "/sporch/jobs/JOB"


def write(folder: Path, name: str, text: str) -> Path:
    p = Path(folder) / name
    p.write_text(text)
    return p


def update_golden() -> bool:
    return os.environ.get("SPORCH_UPDATE_GOLDEN", "") not in ("", "0")
