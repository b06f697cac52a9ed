"""The default layout (Ulysses = GPUs per node, ring across nodes) when the model cannot take it
(issue 51, D): the planner plans the nearest layout that holds -- the largest Ulysses degree
the heads allow inside a node, ring over the rest -- and says so in the plan's notes; a layout
the job gives is still refused in one line that lists those that work."""

from __future__ import annotations

import pytest

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import load_job
from sporch.orchestrator.plan.layouts import LayoutContext, LayoutError, resolve_layout
from sporch.orchestrator.plan.planner import make_plan
from tests.cli.test_bad_input_hardening import one_line_error
from tests.testutil import EXAMPLES

TINY = EXAMPLES / "tiny.yaml"  # 4 heads


def plan(cluster, *overrides):
    return make_plan(find_cluster(cluster), load_job(TINY, list(overrides)))


@pytest.mark.parametrize("cluster, ring", [("a100x8", 2), ("a100x32", 8)])
def test_fewer_heads_than_gpus_per_node_plans_the_nearest_layout(cluster, ring):
    p = plan(cluster)
    assert p.layout.sizes() == {"dp": 1, "cfg": 1, "ring": ring, "ulysses": 4}
    (note,) = [w for w in p.warnings if "the default" in w]
    assert "parallel.ulysses (not set) is 4, not the default 8" in note
    assert "ulysses 8 > num_heads 4" in note  # why the default cannot hold
    for g in p.groups["ulysses"]:  # Ulysses stays inside a node
        assert len({p.ranks[r].node for r in g}) == 1


def test_grouped_kv_heads_take_the_largest_ulysses_they_allow():
    # at the layout level: none of the one-path families' presets groups its keys and values
    ctx = LayoutContext(cluster="a100x8", nodes=1, gpus_per_node=8, num_heads=6, num_kv_heads=3, batch=1,
                        guidance=False, seq_len=4096)
    lay, notes = resolve_layout(ctx, {})
    assert lay.sizes() == {"dp": 1, "cfg": 1, "ring": 8, "ulysses": 1}  # 8, 4, 2 split 3 kv heads nowhere
    assert "parallel.ulysses (not set) is 1, not the default 8" in notes[0]


def test_a_layout_the_job_gives_is_still_refused():
    with pytest.raises(LayoutError, match="ulysses 8 > num_heads 4.*feasible .*1x1x8x4"):
        plan("a100x32", "parallel.ulysses=8", "parallel.ring=4")
    with pytest.raises(LayoutError, match="ulysses 8 > num_heads 4"):
        plan("a100x8", "parallel.ulysses=8")


def test_plan_command_says_what_it_chose(run_cli):
    code, out, err = run_cli("plan", "--cluster", "a100x32", TINY)
    assert code == 0, err
    assert "ring 8" in out and "ulysses 4" in out
    assert "not the default 8" in " ".join(out.split())
    code, out, err = run_cli("plan", "--cluster", "a100x32", TINY, "parallel.ulysses=8", "parallel.ring=4")
    one_line_error(code, out, err, "ulysses 8 > num_heads 4", "1x1x8x4")
