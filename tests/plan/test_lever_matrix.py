"""``sporch models --wide``'s family x lever matrix (orchestrator/plan/lever_matrix.py) is the
planner's own answer: every cell is filled or holds the one-line refusal the planner gives the
same job; Wan and Flux (on the one path now) take every lever but Flux's CFG split (guidance-
distilled); a family with no diffusers LoRA loader is refused by the planner's LoRA rule."""

from __future__ import annotations

import re

import pytest

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.models.families import FAMILIES, get_family
from sporch.orchestrator.plan.lever_matrix import LEVERS, _job, lever_matrix_of
from sporch.orchestrator.plan.planner import make_plan

CLUSTER = find_cluster("a100x8")


@pytest.fixture(scope="module")
def matrix():
    return {row.family: row for row in lever_matrix_of(CLUSTER)}  # the one `sporch models --wide` prints


def test_every_family_has_every_lever_filled_or_refused_in_one_line(matrix):
    assert list(matrix) == [f.name for f in FAMILIES]
    for row in matrix.values():
        assert [c.lever for c in row.cells] == [lever.name for lever in LEVERS]
        for c in row.cells:
            assert c.ok == (c.refusal == ""), (row.family, c)
            assert "\n" not in c.refusal and not c.refusal.startswith("<"), (row.family, c)


def test_a_refused_cell_is_what_the_planner_says_for_that_job(matrix):
    by_name = {lever.name: lever for lever in LEVERS}
    checked = 0
    for row in matrix.values():
        family = get_family(row.family)
        for c in row.cells:
            if c.ok or c.lever == "LoRA":
                continue
            with pytest.raises(SporchError) as info:
                make_plan(CLUSTER, job_from_dict(_job(family, row.preset, by_name[c.lever])))
            assert " ".join(str(info.value).split()).endswith(c.refusal), (row.family, c.lever)
            checked += 1
    assert checked >= 20


def test_wan_and_flux_take_every_lever_but_the_cfg_split_of_a_distilled_model(matrix):
    assert all(c.ok for c in matrix["wan"].cells), [c for c in matrix["wan"].cells if not c.ok]
    refused = {c.lever: c.refusal for c in matrix["flux"].cells if not c.ok}
    assert list(refused) == ["cfg 2"] and "guidance-distilled" in refused["cfg 2"], refused


def test_lora_follows_the_planners_family_rule(matrix):
    for family in FAMILIES:
        cell = next(c for c in matrix[family.name].cells if c.lever == "LoRA")
        assert cell.ok == bool(family.lora_loader), (family.name, cell)
        if not cell.ok:
            assert re.match(r"model\.lora is not supported for \w+ \(family ", cell.refusal), cell.refusal


def test_models_wide_prints_the_matrix_and_counts_its_filled_cells(run_cli, matrix):
    code, out, _ = run_cli("models", "--wide")
    assert code == 0
    filled = sum(c.ok for row in matrix.values() for c in row.cells)
    assert f"filled: {filled} of {len(FAMILIES) * len(LEVERS)} cells" in " ".join(out.split())
