"""The generate workload's job fields, their validation and the plan keys (no torch)."""

from __future__ import annotations

import pytest

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.plan.planner import make_plan

BASE = {"model": {"preset": "wan2.1-t2v-1.3b"},
        "workload": {"kind": "generate", "prompt": "a fox", "frames": 81, "height": 480, "width": 832}}


def _job(**workload):
    return job_from_dict({**BASE, "workload": {**BASE["workload"], **workload}}, source="/jobs/g.yaml")


@pytest.mark.parametrize("workload, message", [
    ({"prompt": None}, "exactly one of workload.prompt or workload.prompt_file"),
    ({"prompt_file": "p.txt"}, "exactly one of workload.prompt or workload.prompt_file"),
    ({"output_format": "gif"}, "must be one of mp4, png"),
    ({"output_format": "png"}, "png holds one image but frames is 81"),
    ({"scheduler": "ddim"}, "must be one of unipc, euler"),
    ({"shift": 0.0}, "must be > 0"),
    ({"fps": 0}, "must be 1..240"),
])
def test_bad_generate_fields_are_refused(workload, message):
    with pytest.raises(SporchError, match=message):
        _job(**workload)


def test_plan_carries_generate_fields_and_resolves_prompt_file():
    job = job_from_dict({**BASE, "workload": {**BASE["workload"], "prompt": None, "prompt_file": "prompts.txt",
                                              "shift": 5.0, "scheduler": "euler", "negative_prompt": "blur"}},
                        source="/jobs/g.yaml")
    job.source = "/jobs/g.yaml"
    plan = make_plan(find_cluster("a100x8"), job)
    w = plan.workload
    assert (w.prompt_file, w.shift, w.scheduler, w.negative_prompt, w.fps, w.tiny_weights) == (
        "/jobs/prompts.txt", 5.0, "euler", "blur", 16, False)
    pipe = plan.estimates.pipeline
    assert pipe.text_encoder.ranks == pipe.vae.ranks == (0,)
    assert plan.estimates.memory.memory_bytes_per_gpu >= pipe.text_encoder.bytes


def test_other_kinds_have_no_generate_settings():
    job = job_from_dict({**BASE, "workload": {**BASE["workload"], "kind": "benchmark", "prompt": None}})
    plan = make_plan(find_cluster("a100x8"), job)
    w = plan.workload
    assert (w.prompt, w.prompt_file, w.negative_prompt, w.scheduler, w.output_format) == (None,) * 5
    assert plan.estimates.pipeline is None
