"""A generic-path generate job stopped by USR2 in its second prompt, through the real launcher:
USR2 -> the replica agrees to stop at a step boundary -> RequeueRequested -> every rank exits 3
(result.json "requeued") -> the job runs again into the same folder -> the finished first prompt is
not denoised again (its recorded row listed), the second resumes from its step, and both images
equal an uninterrupted run's.

Real rank processes (``sporch run --local``'s engine: LocalRun), 2 gloo ranks on U2, the tiny SD3.5
pipeline folder (runtime/pipelines/tiny.py: FlowMatchEulerDiscreteScheduler), 2 prompts.
The Wan2.1 counterpart (UniPC, cfg 2 x U2): test_generate_requeue.py.
"""

from __future__ import annotations

import importlib.util
import json
import re
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from sporch.orchestrator.contract.exit_codes import EXIT_OK
from sporch.orchestrator.contract.results import JobResult
from sporch.orchestrator.submit.local_run import LocalRun
from tests.runtime.launch.local_cli import local2, sporch
from tests.runtime.launch.on_ranks import run_point_on_ranks

# found, not imported: collecting the tests stays free of diffusers' imports
pytestmark = pytest.mark.skipif(not all(importlib.util.find_spec(m) for m in ("diffusers", "imageio_ffmpeg")),
                                reason="needs diffusers and imageio_ffmpeg (the pipelines extra)")

STEPS = 24  # steps are fast: room for USR2 to arrive before the last one on a loaded machine
PROMPTS = ("a red fox running in snow", "a lighthouse at dusk")


def _plan_file(tmp_path: Path) -> Path:
    from sporch.runtime.pipelines.tiny import save_tiny_pipeline

    weights = save_tiny_pipeline("sd3", tmp_path / "sd3", seed=5)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS) + "\n", encoding="utf-8")
    job = tmp_path / "job.yaml"
    job.write_text(json.dumps({  # YAML is a superset of JSON
        "name": "generic-requeue", "model": {"weights": str(weights)},
        "workload": {"kind": "generate", "prompt_file": str(prompts), "negative_prompt": "blurry", "height": 64,
                     "width": 48, "steps": STEPS, "guidance_scale": 4.0, "dtype": "float32", "seed": 7},
        "parallel": {"ulysses": 2, "ring": 1, "cfg": 1}, "resources": {"time": "00:10:00"}}))
    proc = sporch("plan", "--cluster", str(local2(tmp_path)), str(job), "--json")  # clusters/local.yaml with 2 ranks
    assert proc.returncode == 0, proc.stderr
    path = tmp_path / "plan.json"
    path.write_text(proc.stdout)
    assert json.loads(proc.stdout)["world_size"] == 2
    return path


def _newest_step(run_dir: Path, prompt: int) -> int:
    """The newest step file rank 0 keeps of its ``prompt``-th prompt (0-based)."""
    steps = [int(m.group(1)) for p in (run_dir / "checkpoint").glob(f"generate_rank0.b{prompt}.s*.pt")
             if (m := re.search(r"\.s(\d+)\.pt$", p.name))]
    return max(steps, default=0)


def _metrics(run_dir: Path, rank: int) -> dict:
    return json.loads((run_dir / "ranks" / f"rank{rank}.json").read_text())["metrics"]


def _pixels(run_dir: Path, result) -> list[np.ndarray]:
    from sporch.runtime.pipelines.media import read

    return [read(run_dir / row["file"]).astype(np.int16) for row in result.outputs]


def test_usr2_in_the_second_prompt_then_requeued_skips_the_first_and_resumes_the_second(tmp_path):
    plan_path = _plan_file(tmp_path)
    reference, run_dir = tmp_path / "reference", tmp_path / "interrupted"
    # the uninterrupted run: the same plan on the session's rank pool (run_point, as a launch runs
    # it; it was a LocalRun launch beside the interrupted one)
    assert run_point_on_ranks(plan_path, reference) == [EXIT_OK] * 2
    done = JobResult.load(reference / "result.json")
    run = LocalRun(plan_path, run_dir).start()
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and _newest_step(run_dir, 1) < 2:
            time.sleep(0.02)
        run.send_signal(signal.SIGUSR2)
        first = run.wait(timeout_s=300)
    finally:
        run.kill()
    assert set(first.returncodes.values()) == {3}, (first.returncodes, first.logs)
    assert first.result.status == "requeued"
    stopped_at = _newest_step(run_dir, 1)
    assert 2 <= stopped_at < STEPS
    written = sorted(p.name for p in run_dir.glob("*.png"))
    assert written == [done.outputs[0]["file"]]  # the first prompt finished, the second did not
    first_png = (run_dir / written[0]).read_bytes()

    second = LocalRun(plan_path, run_dir).start().wait(timeout_s=300)
    assert second.ok, second.logs
    for rank in range(2):
        rec = _metrics(run_dir, rank)
        print(f"rank {rank}: stopped after step {stopped_at}/{STEPS} of prompt 2; requeued run: "
              f"{len(rec['step_ms'])} steps computed, resumed {rec['resumed']}, reused {rec.get('reused_outputs')}")
        assert len(rec["step_ms"]) == STEPS - stopped_at  # prompt 1 not again, prompt 2 only its steps left
        assert rec["resumed"] == {"1": stopped_at} and rec["reused_outputs"] == [0]
    # the step lines of both runs (one log per rank, appended): prompt 1's steps were run once
    log = Path(second.logs[0]).read_text()
    assert len(re.findall(r"prompt 1/2 step \d+/", log)) == STEPS
    assert len(re.findall(r"prompt 2/2 step \d+/", log)) == STEPS

    assert [row["index"] for row in second.result.outputs] == [0, 1]  # each prompt listed once
    assert [row["file"] for row in second.result.outputs] == [row["file"] for row in done.outputs]
    assert (run_dir / written[0]).read_bytes() == first_png  # not written again
    err = max(int(np.abs(a - b).max()) for a, b in zip(_pixels(run_dir, second.result),
                                                       _pixels(reference, done)))
    print(f"requeued run vs uninterrupted: max |pixel difference| = {err} (8-bit levels)")
    assert err == 0
    assert not list((run_dir / "checkpoint").glob("generate_rank*.pt"))  # dropped once denoised
