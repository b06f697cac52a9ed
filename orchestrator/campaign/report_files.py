"""The files of a report folder: their names, and how each is written (whole or not at all)."""

from __future__ import annotations

from pathlib import Path

from sporch.orchestrator.safe_files import write_atomic

CSV_FILE = "table.csv"
PLOT_DATA_FILE = "plots.json"
HTML_FILE = "report.html"
HISTORY_FILE = "history.json"


def write_text(path: Path, text: str) -> Path:
    """A temporary file beside ``path``, then a rename (safe_files): a failure half-way
    (a full disk) leaves the old file or none, never a half-written one or a followed link."""
    return write_atomic(path, text, fsync=False)
