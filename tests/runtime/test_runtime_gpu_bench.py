"""bench/gpu_attention.py, gpu_model.py, gpu_families.py, gpu_levers.py, gpu_reference.py and gpu_smoke.py:
the --cpu-smoke code path, the one-line refusal without a GPU, and the weights the GPU benches draw
on the device (bench/gpu_common.py). (The GPU numbers themselves come from a GPU machine:
docs/performance.md.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(script, *args):
    """The script as its own process (``python bench/SCRIPT ARGS``)."""
    env = {**os.environ, "PYTHONPATH": ROOT}
    return subprocess.run([sys.executable, os.path.join(ROOT, "bench", script), *args], capture_output=True,
                          text=True, env=env, timeout=300)


def _as_main(script: str, args: list[str]) -> dict:
    """On a pool rank: the script run as ``__main__`` (runpy) with ``args`` as its command line,
    stdout and stderr captured, its exit status from ``SystemExit`` (0 when it returns)."""
    import contextlib
    import io
    import runpy

    out, err, code = io.StringIO(), io.StringIO(), 0
    argv = sys.argv
    sys.argv = [os.path.join(ROOT, "bench", script), *args]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = argv
    return {"returncode": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


def _run_on_a_rank(script, *args):
    """The script as ``python bench/SCRIPT ARGS`` runs it, on one of the session's pool ranks (torch
    already imported there: no process start and torch import per script; the pool cleans the rank's
    process group, Dynamo and threads after). ``_run`` keeps one script a real process."""
    from types import SimpleNamespace

    from sporch.runtime.testing import run_distributed

    (res,) = run_distributed(_as_main, 1, script, list(args), timeout=300)
    return SimpleNamespace(**res)


def _import_common():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        import gpu_common
    finally:
        sys.path.pop(0)
    return gpu_common


def test_attention_cpu_smoke_prints_the_tables():
    res = _run_on_a_rank("gpu_attention.py", "--cpu-smoke")
    assert res.returncode == 0, res.stderr
    assert "smoke run, not a measurement" in res.stdout
    for row in ["cpu_flash*", "math", "eager   4"]:
        assert row in res.stdout, res.stdout


def test_model_cpu_smoke_runs_diffusers_and_sporch_alike():
    """gpu_model.py's four rows for the tiny Wan and tiny Flux presets: diffusers' class as shipped
    and the same weights run with sporch's hooks (a world of one rank), eager and compiled (Dynamo's
    eager backend); in float32 sporch's output equals diffusers' eager one (diff column 0 on the
    CPU kernel)."""
    res = _run_on_a_rank("gpu_model.py", "--cpu-smoke", "--repeat", "1")
    assert res.returncode == 0, res.stderr
    assert "smoke run, not a measurement" in res.stdout
    rows = {}
    for line in res.stdout.splitlines():
        for label in ("tiny 2x2x2", "tiny-flux 1x2x2"):
            if line.startswith(label + " "):
                mode = line[len(label):].split()[1:3]
                [diff] = re.findall(r" (\d\.\de[+-]\d+) ", line)  # the one number in e-notation
                rows[(label, " ".join(mode))] = float(diff)
    expected = {(label, mode) for label in ("tiny 2x2x2", "tiny-flux 1x2x2")
                for mode in ("diffusers eager", "sporch eager", "diffusers compiled", "sporch compiled")}
    assert set(rows) == expected, res.stdout
    assert all(diff == 0.0 for diff in rows.values()), res.stdout
    assert "sporch compiled (2 blocks)" in res.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
@pytest.mark.parametrize("script", ["gpu_attention.py", "gpu_model.py", "gpu_families.py", "gpu_levers.py",
                                    "gpu_reference.py", "gpu_smoke.py"])
def test_without_cuda_one_line_and_exit_2(script):
    # one script as its own process (the scripts' start as `python bench/...`), the others on a pool rank
    res = _run(script) if script == "gpu_attention.py" else _run_on_a_rank(script)
    assert res.returncode == 2
    assert res.stdout == "" and len(res.stderr.strip().splitlines()) == 1
    assert "no CUDA device here" in res.stderr and "--cpu-smoke" in res.stderr


def test_families_cpu_smoke_runs_sporch_and_diffusers_alike():
    """Two of the smallest families at their published widths, one block, eager: each row prints and
    sporch's hooked forward (a world of one rank) equals diffusers' own (diff 0 on the CPU kernel)."""
    res = _run_on_a_rank("gpu_families.py", "--cpu-smoke", "--families", "pixart", "ltx-video", "--no-compile")
    assert res.returncode == 0, res.stderr
    rows = [line.split() for line in res.stdout.splitlines() if line.startswith(("pixart", "ltx-video"))]
    assert [r[0] for r in rows] == ["pixart", "ltx-video"], res.stdout
    for r in rows:
        assert "failed:" not in r and float(r[r.index("|") + 3]) == 0.0, res.stdout


def test_device_model_places_dtypes_as_diffusers_loads_them(tmp_path):
    """bench/gpu_common.device_model (gpu_model.py, gpu_families.py and gpu_levers.py draw their
    weights with it): a bf16 Wan drawn on the device has, parameter by parameter, the dtype
    diffusers' ``from_pretrained(torch_dtype=bfloat16)`` gives (Wan keeps its norms, time embedder
    and modulation tables in float32), and runs a finite forward; ``twin`` holds the same weights,
    shared where the dtype is the same and cast where sporch's rule differs."""
    import diffusers

    from sporch.runtime.models.families import family_module

    common = _import_common()
    config = dict(family_module("wan").TINY)
    model = common.device_model("WanTransformer3DModel", config, torch.device("cpu"), torch.bfloat16)
    model.save_pretrained(tmp_path)
    loaded = diffusers.WanTransformer3DModel.from_pretrained(tmp_path, torch_dtype=torch.bfloat16)
    ours = {n: p.dtype for n, p in model.named_parameters()}
    assert ours == {n: p.dtype for n, p in loaded.named_parameters()}
    assert set(ours.values()) == {torch.bfloat16, torch.float32}
    inputs = family_module("wan").inputs(config, batch=1, grid=(2, 2, 2), text_len=8,
                                         generator=torch.Generator().manual_seed(0), dtype=torch.bfloat16)
    with torch.no_grad():
        out = model(**inputs)[0]
        assert torch.isfinite(out).all()
        assert torch.equal(out, loaded(**inputs)[0])

    cast = common.twin(model, "WanTransformer3DModel", config, torch.bfloat16, keep_float32=False)
    params = dict(model.named_parameters())
    for name, p in cast.named_parameters():
        assert p.dtype == torch.bfloat16
        if params[name].dtype == torch.bfloat16:
            assert p is params[name]  # shared, not copied
        else:
            assert torch.equal(p, params[name].to(torch.bfloat16))
