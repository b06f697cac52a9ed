"""bench/README.md lists every benchmark script, so a new one is found where the others are."""

from __future__ import annotations

from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def test_every_bench_script_is_listed():
    index = (BENCH / "README.md").read_text()
    scripts = sorted(p.name for p in BENCH.iterdir() if p.suffix in (".py", ".sh"))
    assert scripts, BENCH
    assert [s for s in scripts if f"`{s}`" not in index] == []
