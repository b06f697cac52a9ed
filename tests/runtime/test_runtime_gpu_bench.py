"""bench/gpu_attention.py, gpu_model.py, gpu_families.py and gpu_levers.py: the --cpu-smoke code
path, and the one-line refusal without a GPU. (The GPU numbers themselves come from a GPU machine: docs/performance.md.)"""

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
@pytest.mark.parametrize("script", ["gpu_attention.py", "gpu_model.py", "gpu_families.py", "gpu_levers.py"])
def test_without_cuda_one_line_and_exit_2(script):
    res = _run(script)
    assert res.returncode == 2
    assert res.stdout == "" and len(res.stderr.strip().splitlines()) == 1
    assert "no CUDA device here" in res.stderr and "--cpu-smoke" in res.stderr


def test_families_cpu_smoke_runs_sporch_and_diffusers_alike():
    """Two of the smallest families at their published widths, one block, eager: each row prints and
    sporch's hooked forward (a world of one rank) equals diffusers' own (diff 0 on the CPU kernel)."""
    res = _run("gpu_families.py", "--cpu-smoke", "--families", "pixart", "ltx-video", "--no-compile")
    assert res.returncode == 0, res.stderr
    rows = [line.split() for line in res.stdout.splitlines() if line.startswith(("pixart", "ltx-video"))]
    assert [r[0] for r in rows] == ["pixart", "ltx-video"], res.stdout
    for r in rows:
        assert "failed:" not in r and float(r[r.index("|") + 3]) == 0.0, res.stdout


def test_device_model_keeps_the_float32_norms_in_a_bf16_build():
    """bench/gpu_common.device_model (gpu_model.py and gpu_levers.py draw their weights with it): a
    bf16 Wan built on meta as build_model places it runs a forward; casting the built model to bf16,
    as the benches did, made Wan's float32 norms bf16 and crashed its first forward on an H100."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        from gpu_common import device_model, one_gpu_plan
    finally:
        sys.path.pop(0)
    from sporch.runtime.model import ShardedDiT, make_inputs

    plan = one_gpu_plan("local", {"name": "w", "model": {"preset": "tiny"},
                                  "workload": {"kind": "benchmark", "frames": 5, "height": 32, "width": 32,
                                               "dtype": "bfloat16"}})
    torch.manual_seed(0)
    model = device_model(plan.model, torch.device("cpu"), torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16, torch.float32}
    inputs = make_inputs(model, plan.sequence.grid, 1, 0, None)
    runner = ShardedDiT(model, None, grid=plan.sequence.grid)
    out = runner.velocity(runner.shard_latents(inputs.noise), 500.0, inputs.cond)
    assert torch.isfinite(out).all()
