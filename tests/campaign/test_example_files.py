"""The campaigns folder holds campaigns (issue 51, D): the descriptor its tiny campaigns run on
is a built-in cluster (clusters/local-1gpu.yaml), named by name, so they plan from any working
directory."""

from __future__ import annotations

import pytest

from sporch.orchestrator.campaign.spec import load_campaign
from sporch.orchestrator.config.cluster import find_cluster
from tests.testutil import EXAMPLES


@pytest.mark.parametrize("path", sorted((EXAMPLES / "campaigns").glob("*.yaml")), ids=lambda p: p.name)
def test_every_file_of_the_campaigns_folder_is_a_campaign(path):
    assert load_campaign(path).name


@pytest.mark.parametrize("name", ["tiny-cache.yaml", "tiny-levers.yaml", "tiny-same-output.yaml"])
def test_the_tiny_campaigns_name_the_built_in_descriptor(name):
    assert load_campaign(EXAMPLES / "campaigns" / name).spec.matrix.clusters == ["local-1gpu"]
    assert find_cluster("local-1gpu").source.endswith("clusters/local-1gpu.yaml")


def test_a_tiny_campaign_plans_from_any_folder(run_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("campaign", "plan", EXAMPLES / "campaigns" / "tiny-same-output.yaml")
    assert code == 0, err
    assert "local-1gpu" in out
