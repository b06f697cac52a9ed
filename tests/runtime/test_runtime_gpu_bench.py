"""bench/gpu_attention.py and bench/gpu_model.py: the --cpu-smoke code path, and the one-line
refusal without a GPU. (The GPU numbers themselves come from a GPU machine: docs/performance.md.)"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(script, *args):
    env = {**os.environ, "PYTHONPATH": ROOT}
    return subprocess.run([sys.executable, os.path.join(ROOT, "bench", script), *args], capture_output=True,
                          text=True, env=env, timeout=300)


@pytest.mark.parametrize("script,rows", [("gpu_attention.py", ["cpu_flash*", "math", "eager   4"]),
                                         ("gpu_model.py", ["tiny 2x4x4", "eager", "compiled (2 blocks)"])])
def test_cpu_smoke_prints_the_tables(script, rows):
    res = _run(script, "--cpu-smoke")
    assert res.returncode == 0, res.stderr
    assert "smoke run, not a measurement" in res.stdout
    for row in rows:
        assert row in res.stdout, res.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
@pytest.mark.parametrize("script", ["gpu_attention.py", "gpu_model.py"])
def test_without_cuda_one_line_and_exit_2(script):
    res = _run(script)
    assert res.returncode == 2
    assert res.stdout == "" and len(res.stderr.strip().splitlines()) == 1
    assert "no CUDA device here" in res.stderr and "--cpu-smoke" in res.stderr
