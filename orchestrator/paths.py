"""Where the shipped data (clusters/, templates/) lives.

Installed from a wheel they sit in ``orchestrator/_data/``; in a source checkout (or an
editable install) they are the top-level folders of the repository.
"""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """Path of a shipped data folder: "clusters" or "templates"."""
    for candidate in (_PKG / "_data" / name, _PKG.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"sporch data folder {name!r} not found next to {_PKG}; reinstall sporch")


def clusters_dir() -> Path:
    return data_dir("clusters")


def templates_dir() -> Path:
    return data_dir("templates")
