"""A prompt the generic generate already finished is not denoised again by a later run of the same
plan (runtime/pipelines/resume.py, FinishedPrompts): the requeued run skips it, lists its
recorded result row once, and resumes the prompt it was stopped in.

In this process, world 1, the tiny SD3.5 pipeline folder (runtime/pipelines/tiny.py),
2 prompts, float32. The real launcher path (USR2, exit 3, a second run) is
tests/runtime/launch/test_generic_requeue.py.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("diffusers")

from sporch.orchestrator.config.cluster import find_cluster  # noqa: E402
from sporch.orchestrator.config.job import job_from_dict  # noqa: E402
from sporch.orchestrator.plan.planner import make_plan  # noqa: E402
from tests.runtime.pipelines.test_generate_generic_resume import StopAfter as StopAt  # noqa: E402  ("stop" from the n-th read on)

FAMILY = "sd3"
STEPS = 4
#: USR2 arrives during the second prompt's step 2: the stop flag is read at every step boundary but
#: a prompt's last (prompt 1: after steps 1-3; prompt 2: after step 1, then step 2)
STOP_READ, STOPPED_AFTER = STEPS - 1 + 2, 2
PROMPTS = ("a red fox running in snow", "a lighthouse at dusk")
TOL = 1e-6


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from sporch.runtime.pipelines.tiny import save_tiny_pipeline

    root = tmp_path_factory.mktemp("generic-finished")
    prompts = root / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS) + "\n", encoding="utf-8")
    return save_tiny_pipeline(FAMILY, root / FAMILY, seed=3), prompts


def _plan(setup, **workload):
    folder, prompts = setup
    job = job_from_dict({"name": "g", "model": {"weights": str(folder)},
                         "workload": {"kind": "generate", "prompt_file": str(prompts), "negative_prompt": "blurry",
                                      "height": 64, "width": 48, "steps": STEPS, "guidance_scale": 4.0,
                                      "dtype": "float32", "seed": 7, **workload},
                         "parallel": {"cfg": 1, "ulysses": 1, "ring": 1, "dp": 1}})
    return make_plan(dataclasses.replace(find_cluster("local"), gpus_per_node=1), job)


def _generate(plan, out: Path, progress=None):
    """(metrics, {index: float frames}, transformer block calls) of one run into ``out``."""
    from sporch.runtime.pipelines.generate import run_generate

    frames, calls = {}, []

    def count(model):  # a ``compile_model`` stand-in: counts the computed transformer calls
        model.transformer_blocks[0].register_forward_pre_hook(lambda *a: calls.append(1))
    metrics = run_generate(plan, None, torch.device("cpu"), out, frames_sink=lambda i, f: frames.__setitem__(i, f),
                           progress=progress, compile_model=count)
    return metrics, frames, len(calls)


def _rows(metrics) -> list[dict]:
    """The result rows without their folder (two runs write into two folders)."""
    return [{k: v for k, v in row.items() if k != "path"} for row in metrics["outputs"]]


@pytest.fixture(scope="module")
def reference(setup, tmp_path_factory):
    out = tmp_path_factory.mktemp("reference")
    return (*_generate(_plan(setup), out), out)


def test_a_finished_prompt_is_not_denoised_again_after_a_requeue(setup, reference, tmp_path):
    """Stopped in prompt 2 after step 2: the resumed run computes only prompt 2's 2 steps left (the
    old code: prompt 1's 4 again), lists prompt 1's recorded row and prompt 2's once each, leaves
    prompt 1's PNG as written, and prompt 2's frames are the uninterrupted run's; a third run of the
    finished job denoises nothing and lists the same rows."""
    from sporch.runtime.progress import RequeueRequested

    ref_metrics, ref_frames, ref_calls, _ = reference
    assert ref_calls == 2 * STEPS
    plan, out = _plan(setup), tmp_path / "run"
    with pytest.raises(RequeueRequested, match=f"after step {STOPPED_AFTER}/{STEPS} of prompt 2/2"):
        _generate(plan, out, progress=StopAt(STOP_READ))
    first = out / ref_metrics["outputs"][0]["file"]
    written = first.read_bytes()
    metrics, frames, calls = _generate(plan, out)
    err = float(np.abs(frames[1] - ref_frames[1]).max())
    print(f"requeued in prompt 2 after step {STOPPED_AFTER}: transformer calls {calls} (uninterrupted {ref_calls}), "
          f"reused {metrics.get('reused_outputs')}, max |prompt 2 frames - uninterrupted| = {err:.3g}")
    assert calls == STEPS - STOPPED_AFTER, calls
    assert ref_metrics["reused_outputs"] == [] and metrics["reused_outputs"] == [0] and metrics["resumed"] == {"1": STOPPED_AFTER}
    assert metrics["denoised_prompts"] == 1 and len(metrics["step_ms"]) == STEPS - STOPPED_AFTER
    assert 0 not in frames and err <= TOL
    assert _rows(metrics) == _rows(ref_metrics) and [r["index"] for r in metrics["outputs"]] == [0, 1]
    assert metrics["outputs"][0]["path"] == str(first) and first.read_bytes() == written

    again, frames, calls = _generate(plan, out)  # the job run again, finished: nothing loaded or denoised
    assert calls == 0 and frames == {} and again["reused_outputs"] == [0, 1] and again["denoised_prompts"] == 0
    assert _rows(again) == _rows(ref_metrics)


def test_another_plan_or_a_changed_output_denoises_again(setup, reference, tmp_path):
    """A finished record counts only for the same plan and an unchanged file: the job with another
    guidance scale run into the folder of a finished run denoises both prompts (its frames its own);
    then a deleted and a rewritten output are denoised again, the untouched one skipped."""
    import shutil

    _, ref_frames, _, ref_out = reference
    out = tmp_path / "run"
    shutil.copytree(ref_out, out)
    changed = _plan(setup, guidance_scale=3.0)
    metrics, frames, calls = _generate(changed, out)
    print(f"another plan in a finished folder: reused {metrics.get('reused_outputs')}, transformer calls {calls}, "
          f"its frames moved {float(np.abs(frames[0] - ref_frames[0]).max()):.3g} from the first plan's")
    assert calls == 2 * STEPS and metrics["reused_outputs"] == []
    assert float(np.abs(frames[0] - ref_frames[0]).max()) > 1e3 * TOL

    rows = metrics["outputs"]
    Path(rows[0]["path"]).unlink()
    Path(rows[1]["path"]).write_bytes(Path(rows[1]["path"]).read_bytes() + b"\0")
    metrics, frames, calls = _generate(changed, out)
    assert calls == 2 * STEPS and sorted(frames) == [0, 1] and metrics["reused_outputs"] == []
    Path(rows[1]["path"]).unlink()
    metrics, frames, calls = _generate(changed, out)
    assert calls == STEPS and sorted(frames) == [1] and metrics["reused_outputs"] == [0]
