"""Issue 18 item 5: a generate job stopped by USR2 in the middle of denoising resumes from the
step it stopped after, and ends with the uninterrupted run's latents, bit for bit.

Real rank processes (``sporch run --local`` engine: LocalRun, 2 gloo ranks on clusters/local.yaml's
2-rank twin local_cli.local2), the tiny Wan2.1 pipeline with its UniPC scheduler (a multistep
solver: its history of model outputs must be carried over exactly, or the latents differ), cfg 2
(each rank its own branch's history; it was cfg 2 x ulysses 2 on 4 ranks, 40 steps: the ulysses
side of a resumed generate job is test_generic_requeue.py's U2).
"""

from __future__ import annotations

import importlib.util
import json
import re
import signal
import time
from pathlib import Path

import pytest

from sporch.orchestrator.contract.exit_codes import EXIT_OK
from sporch.orchestrator.submit.local_run import LocalRun
from tests.runtime.launch.local_cli import REPO, local2, sporch
from tests.runtime.launch.on_ranks import run_point_on_ranks

# found, not imported: collecting the tests stays free of diffusers' imports
pytestmark = pytest.mark.skipif(importlib.util.find_spec("diffusers") is None,
                                reason="needs diffusers (the pipelines extra)")

GENERATE = REPO / "examples" / "tiny-generate.yaml"
STEPS = 24  # steps are fast: room for USR2 to arrive before the last one on a loaded machine


def _plan_file(tmp_path: Path, weights: Path) -> Path:
    proc = sporch("plan", "--cluster", str(local2(tmp_path)), str(GENERATE), f"workload.steps={STEPS}",
                  f"model.weights={weights}", "parallel.cfg=2", "parallel.ulysses=1", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["world_size"] == 2
    path = tmp_path / "plan.json"
    path.write_text(proc.stdout)
    return path


def _latents(run_dir: Path):
    from safetensors.torch import load_file

    return load_file(str(run_dir / "latents" / "00000.safetensors"))["latents"]


def _newest_step(run_dir: Path) -> int:
    steps = [int(m.group(1)) for p in (run_dir / "checkpoint").glob("generate_rank0.b0.s*.pt")
             if (m := re.search(r"\.s(\d+)\.pt$", p.name))]
    return max(steps, default=0)


def test_usr2_mid_denoise_then_rerun_gives_the_same_latents(tmp_path):
    plan_path = _plan_file(tmp_path, tmp_path / "pipeline")

    # the uninterrupted run: the same plan on the session's rank pool (run_point, as a launch runs
    # it; it was a LocalRun launch); it also makes the tiny pipeline folder the launches read
    reference = tmp_path / "reference"
    assert run_point_on_ranks(plan_path, reference) == [EXIT_OK] * 2

    interrupted = tmp_path / "interrupted"
    run = LocalRun(plan_path, interrupted).start()
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and _newest_step(interrupted) < 2:
            time.sleep(0.05)
        run.send_signal(signal.SIGUSR2)
        first = run.wait(timeout_s=400)
    finally:
        run.kill()
    assert set(first.returncodes.values()) == {3}, (first.returncodes, first.logs)
    assert first.result.status == "requeued"
    stopped_at = _newest_step(interrupted)
    assert 2 <= stopped_at < STEPS
    assert not (interrupted / "latents").exists()  # the batch was not finished

    second = LocalRun(plan_path, interrupted).start().wait(timeout_s=600)
    assert second.ok, second.logs
    # the leader's step progress in its log (from tests/runtime/pipelines/test_generate.py's test_example_writes_a_video)
    leader_log = second.logs[0].read_text()
    assert f"step {STEPS}/{STEPS}" in leader_log and "s/step" in leader_log, leader_log[-2000:]
    for rank in range(2):
        rec = json.loads((interrupted / "ranks" / f"rank{rank}.json").read_text())["metrics"]
        assert rec["resumed"] == {"0": stopped_at}, rec["resumed"]
        assert len(rec["step_ms"]) == STEPS - stopped_at  # only the steps left were run
    assert _latents(interrupted).equal(_latents(reference))
    assert not list((interrupted / "checkpoint").glob("generate_rank*.pt"))  # dropped once kept
