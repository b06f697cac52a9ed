"""The YAML tables shipped with sporch under ``plan/data/`` (the GPU rows, the published tables'
fit, the published and the measured steps) and their one reader."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def read_data_table(path: Path) -> Any:
    """A YAML table shipped with sporch (``plan/data/``), parsed by libyaml where PyYAML has it:
    the same safe loading (the same constructors and implicit types) as ``yaml.safe_load``, about
    8 x faster, which the dry run's start-up feels (``gpus.yaml``: ~9 ms in Python, ~1 ms in C;
    tests/plan/test_data_tables.py holds the two equal). User files keep the pure-Python parser
    (their error messages)."""
    import yaml

    with open(path, encoding="utf-8") as fh:
        return yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
