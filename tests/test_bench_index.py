"""bench/README.md lists every benchmark script, so a new one is found where the others are."""

from __future__ import annotations

import re
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def test_every_bench_script_is_listed():
    index = (BENCH / "README.md").read_text()
    scripts = sorted(p.name for p in BENCH.iterdir() if p.suffix in (".py", ".sh"))
    assert scripts, BENCH
    assert [s for s in scripts if f"`{s}`" not in index] == []


def test_every_listed_script_exists():
    """The index's table names no script that is gone (retired benches are named in prose only)."""
    index = (BENCH / "README.md").read_text()
    listed = re.findall(r"^\| `([\w.]+\.(?:py|sh))` \|", index, flags=re.M)
    assert listed, index
    assert [s for s in listed if not (BENCH / s).is_file()] == []
