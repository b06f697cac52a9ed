"""``sporch preflight --weights DIR`` checks that every node can read DIR, whatever model it holds
(issue 32 item 16): the preflight job's model is a stand-in that is never built, so a checkpoint
with a config.json of another model (or a foreign one) is carried to the ranks, not refused as a
disagreement with the stand-in. (Its --timeout giving up on a live job: tests/submit/
test_preflight_live.py.)"""

from __future__ import annotations

import json

import pytest

from sporch.orchestrator.cli.preflight_cmd import preflight_job
from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.plan.planner import make_plan
from tests.plan.test_hardening_model_files import FLUX, WAN, checkpoint


@pytest.mark.parametrize("config", [WAN, FLUX, {"_class_name": "SomethingElse", "x": 1},
                                    {**WAN, "num_layers": 0}])
def test_preflight_plans_with_any_checkpoint(tmp_path, config):
    folder = checkpoint(tmp_path / "ckpt", config)
    cluster = find_cluster("local")
    plan = make_plan(cluster, preflight_job(cluster, None, str(folder), str(tmp_path / "runs")))
    assert plan.model.weights == str(folder) and plan.model.preset == "tiny"
    assert plan.workload.kind == "preflight"


def test_a_job_still_refuses_a_checkpoint_of_another_model(tmp_path):
    """Only preflight's stand-in skips the checkpoint's config: a real job with that preset and
    those weights is refused as before."""
    from sporch.orchestrator.config.job import job_from_dict

    folder = checkpoint(tmp_path / "ckpt", WAN)
    job = job_from_dict({"name": "j", "model": {"preset": "tiny", "weights": str(folder)},
                         "workload": {"kind": "verify", "frames": 9, "height": 64, "width": 64}})
    with pytest.raises(SporchError, match="disagrees with the job's model"):
        make_plan(find_cluster("local"), job)
