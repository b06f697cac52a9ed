"""The tables shipped under ``plan/data/`` are parsed with libyaml (``data_tables.read_data_table``: the
dry run's start-up); what it returns must be what ``yaml.safe_load`` returns, value and type."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sporch.orchestrator.plan import data_tables

DATA = Path(data_tables.__file__).resolve().parent / "data"
TABLES = sorted(DATA.glob("*.yaml"))


def typed(doc):
    """``doc`` with every scalar paired with its type (1 == 1.0 == True would hide a change)."""
    if isinstance(doc, dict):
        return {typed(k): typed(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [typed(v) for v in doc]
    return (type(doc).__name__, doc)


def test_there_are_tables():
    assert {p.name for p in TABLES} >= {"gpus.yaml", "fitted.yaml", "published.yaml"}


@pytest.mark.parametrize("path", TABLES, ids=lambda p: p.name)
def test_data_table_reads_as_safe_load_does(path):
    with open(path, encoding="utf-8") as fh:
        expected = yaml.safe_load(fh)
    assert typed(data_tables.read_data_table(path)) == typed(expected)


def test_data_tables_use_libyaml_where_pyyaml_has_it(monkeypatch):
    if not getattr(yaml, "__with_libyaml__", False):
        pytest.skip("PyYAML built without libyaml: the pure-Python parser is the fallback")
    used = []
    real = yaml.load
    monkeypatch.setattr(yaml, "load", lambda stream, Loader: used.append(Loader) or real(stream, Loader=Loader))
    data_tables.read_data_table(DATA / "fitted.yaml")
    assert used == [yaml.CSafeLoader]
