"""A generic-path preset runs diffusers' class with the preset's published config
(plan.model.diffusers_config): a shape field set besides it would plan one model and run
another, so it is refused in one line (exit 2); the preset as published plans."""

from __future__ import annotations

import pytest

from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.plan.resolve import resolve_model
from tests.cli.test_bad_input_hardening import one_line_error

JOB = {"name": "q", "model": {"preset": "qwen-image"},
       "workload": {"kind": "benchmark", "height": 512, "width": 512, "steps": 2}}


def _model(**fields):
    return resolve_model(job_from_dict({**JOB, "model": {"preset": "qwen-image", **fields}}).model)


def test_the_published_preset_keeps_its_config():
    m = _model()
    assert (m.depth, m.diffusers_config["num_layers"]) == (60, 60)


@pytest.mark.parametrize("fields, named", [({"depth": 10}, "model.depth=10 (the preset's: 60)"),
                                           ({"num_heads": 12, "head_dim": 256}, "model.num_heads=12 (the preset's: 24)")])
def test_a_changed_shape_is_refused_naming_the_field(fields, named):
    with pytest.raises(SporchError) as err:
        _model(**fields)
    assert named in str(err.value) and "\n" not in str(err.value)


def test_the_cli_refuses_it_in_one_line(run_cli, tmp_path):
    job = tmp_path / "q.yaml"
    job.write_text("name: q\nmodel: {preset: qwen-image}\nworkload: {kind: benchmark, height: 512, width: 512}\n")
    code, out, err = run_cli("plan", "--cluster", "a100x32", job, "model.depth=10")
    one_line_error(code, out, err, "model.depth=10 (the preset's: 60)", "preset qwen-image")
