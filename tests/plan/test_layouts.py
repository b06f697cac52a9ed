from __future__ import annotations

import json

import pytest

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import load_job
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.plan.layouts import LayoutContext, LayoutError, resolve_layout
from sporch.orchestrator.contract.parallel import head_split, kv_mode
from sporch.orchestrator.plan.planner import make_plan, rank_feasible
from sporch.orchestrator.contract.plan import Plan
from sporch.orchestrator.contract.sections import HeadsSection
from tests.testutil import EXAMPLES

WAN14B = EXAMPLES / "wan14b-720p.yaml"
TINY = EXAMPLES / "tiny.yaml"


def plan(cluster, job=WAN14B, *overrides):
    return make_plan(find_cluster(cluster), load_job(job, list(overrides)))


def test_default_layout_a100x32():
    p = plan("a100x32")
    assert p.layout.sizes() == {"dp": 1, "cfg": 1, "ring": 4, "ulysses": 8}
    assert p.world_size == 32 == len(p.ranks)
    # Ulysses group: contiguous ranks on one node; ring group: same local index on every node.
    assert p.groups["ulysses"][0] == list(range(8))
    assert p.groups["ring"][3] == [3, 11, 19, 27]
    for g in p.groups["ulysses"]:
        assert len({p.ranks[r].node for r in g}) == 1
    for g in p.groups["ring"]:
        assert len({p.ranks[r].local_rank for r in g}) == 1
        assert len({p.ranks[r].node for r in g}) == 4
    assert p.sequence.to_dict() == {"seq_len": 75600, "padded_len": 75616, "pad": 16, "tokens_per_rank": 2363,
                          "grid": [21, 45, 80], "degree": 32, "split": "uneven", "text_len": 0}
    # cut unpadded: 75600 = 16 x 2363 + 16 x 2362; only the attention pads the shorter chunks
    assert p.sequence.chunks() == [2363] * 16 + [2362] * 16
    assert p.heads.q_heads_per_rank == [5] * 8 and p.heads.kv_mode == "follow"
    assert any("75600 tokens split unevenly over ring 4 x ulysses 8 = 32 ranks: 16 hold 2363, 16 hold 2362" in w
               for w in p.warnings)
    assert not any("padded to" in w for w in p.warnings)


def test_rank_order_formula():
    p = plan("h100x64", WAN14B, "parallel.cfg=2", "parallel.ring=4")
    lay = p.layout
    assert lay.sizes() == {"dp": 1, "cfg": 2, "ring": 4, "ulysses": 8}
    for r in p.ranks:
        assert r.rank == ((r.dp * lay.cfg + r.cfg) * lay.ring + r.ring) * lay.ulysses + r.ulysses
        assert r.node == r.rank // 8 and r.local_rank == r.rank % 8
        assert r.sequence_index == r.ring * lay.ulysses + r.ulysses
    assert p.groups["cfg"][0] == [0, 32]


def test_plan_json_round_trip_and_keys():
    p = plan("a100x32")
    d = json.loads(p.to_json())
    assert list(d)[:5] == ["schema_version", "layout", "world_size", "nodes", "gpus_per_node"]
    assert d["layout"] == {"dp": 1, "cfg": 1, "ring": 4, "ulysses": 8}
    assert {"ranks", "groups", "model", "workload", "sequence", "heads", "estimates", "cluster", "job"} <= set(d)
    assert Plan.from_json(p.to_json()) == p
    for key in ("preset", "attention", "depth", "single_depth", "hidden", "num_heads", "num_kv_heads", "head_dim",
                "ffn_dim", "mlp_ratio", "patch", "in_channels", "vae_stride", "text_len", "text_dim", "qk_norm"):
        assert key in d["model"]
    for key in ("kind", "batch", "frames", "height", "width", "seq_len", "steps", "guidance_scale", "dtype",
                "warmup", "repeat", "seed"):
        assert key in d["workload"]
    for key in ("seq_len", "padded_len", "pad", "tokens_per_rank", "grid"):
        assert key in d["sequence"]
    for key in ("num_heads", "num_kv_heads", "q_heads_per_rank", "kv_mode"):
        assert key in d["heads"]
    for key in ("name", "output_dir", "entrypoint"):
        assert key in d["job"]
    assert d["cluster"]["name"] == "a100x32" and d["cluster"]["env"]["NCCL_IB_DISABLE"] == "0"


def test_world_size_error_lists_feasible():
    with pytest.raises(LayoutError) as ei:
        plan("a100x32", WAN14B, "parallel.ring=2")
    msg = str(ei.value)
    assert msg.startswith("ulysses 8 x ring 2 = 16 ranks, but a100x32 has 4 nodes x 8 GPUs = 32")
    assert "feasible (dp x cfg x ring x ulysses): " in msg and "1x1x4x8" in msg and "1x2x2x8" in msg
    assert "\n" not in msg
    assert all(lay.world_size == 32 for lay in ei.value.feasible)


def test_cfg_rules():
    with pytest.raises(LayoutError, match="cfg must be 1 or 2"):
        plan("a100x32", WAN14B, "parallel.cfg=4", "parallel.ring=1")
    with pytest.raises(LayoutError, match="needs classifier-free guidance"):
        plan("a100x32", WAN14B, "parallel.cfg=2", "parallel.ring=2", "workload.guidance_scale=1.0")
    p = plan("a100x32", WAN14B, "parallel.cfg=2", "parallel.ring=2")
    assert p.layout.cfg == 2 and p.estimates.compute.samples_per_rank == 1
    assert plan("a100x32").estimates.compute.samples_per_rank == 2  # CFG on, cfg=1: both branches per rank


FLUX = EXAMPLES / "flux-2048.yaml"


def test_guidance_distilled_flux_has_no_cfg_branch():
    """Flux.1 takes guidance_scale as an input of its one pass per step: no cfg dimension, ever."""
    with pytest.raises(LayoutError, match=r"cfg 2: flux.1-dev is guidance-distilled .*set parallel.cfg=1") as ei:
        plan("a100x32", FLUX, "workload.guidance_scale=3.5", "parallel.cfg=2", "parallel.ring=2")
    assert ei.value.feasible and all(lay.cfg == 1 for lay in ei.value.feasible)
    listed = str(ei.value).rsplit(": ", 1)[1].split(", ")
    assert "1x1x4x8" in listed and all(lay.startswith("1x1x") for lay in listed)  # dp 1 x cfg 1 only
    p = plan("a100x32", FLUX, "workload.guidance_scale=3.5", "parallel.cfg=auto", "parallel.ring=auto")
    assert p.layout.cfg == 1 and p.model.distilled and p.model.guidance_embed
    # one pass per step: guidance 3.5 is not CFG, so a rank runs one sample, not two branches
    assert not p.workload.cfg_enabled and p.estimates.compute.samples_per_rank == 1
    wan = plan("a100x32", WAN14B, "parallel.cfg=auto", "parallel.ring=auto")
    assert wan.workload.cfg_enabled and not wan.model.distilled
    # the flag is preset data: a resized Flux keeps it
    with pytest.raises(LayoutError, match="guidance-distilled"):
        plan("a100x32", FLUX, "workload.guidance_scale=3.5", "parallel.cfg=2", "parallel.ring=2", "model.depth=2")


def test_guidance_distilled_rank_lists_no_cfg_layouts():
    _, ranked = rank_feasible(find_cluster("a100x32"), load_job(FLUX, ["workload.guidance_scale=3.5"]))
    assert ranked and all(r.layout.cfg == 1 for r in ranked)
    _, ranked = rank_feasible(find_cluster("a100x32"), load_job(WAN14B))
    assert any(r.layout.cfg == 2 for r in ranked)  # a model with a CFG branch still gets cfg 2


def test_schnell_without_guidance_input_refuses_guidance_scale():
    with pytest.raises(SporchError, match=r"flux.1-schnell is guidance-distilled without a guidance input.*"
                                          r"set workload.guidance_scale <= 1 \(got 3.5\)"):
        plan("a100x32", FLUX, "model.preset=flux.1-schnell", "workload.guidance_scale=3.5")
    assert plan("a100x32", FLUX, "model.preset=flux.1-schnell").layout.cfg == 1
    with pytest.raises(SporchError, match="flux.1-dev is guidance-distilled .*workload.negative_prompt .*remove it"):
        plan("a100x32", FLUX, "workload.negative_prompt=blurry")


def test_dp_must_divide_batch():
    with pytest.raises(LayoutError, match="dp 2 does not divide the global batch 1"):
        plan("a100x32", WAN14B, "parallel.dp=2", "parallel.ring=2")
    p = plan("a100x32", WAN14B, "parallel.dp=2", "parallel.ring=2", "workload.batch=4")
    assert p.layout.dp == 2


def test_uneven_heads_warn():
    p = plan("a100x8", EXAMPLES / "wan1.3b-480p.yaml", "parallel.cfg=1", "parallel.ring=1", "parallel.ulysses=8")
    assert p.heads.q_heads_per_rank == [2, 2, 2, 2, 1, 1, 1, 1]
    assert any("splits 12 heads unevenly" in w and "2.00x" in w for w in p.warnings)


def test_too_many_ulysses_ranks():
    with pytest.raises(LayoutError, match="ulysses 8 > num_heads 4"):
        plan("a100x8", TINY, "parallel.ulysses=8")  # given; the default adapts (tests/plan/test_default_layout.py)


@pytest.mark.parametrize(
    "heads,kv,u,mode",
    [(8, 8, 4, "follow"), (8, 4, 4, "split"), (8, 4, 2, "split"), (8, 2, 4, "replicate"), (8, 1, 8, "replicate"),
     (12, 4, 3, None), (6, 6, 4, "follow")],
)
def test_kv_modes(heads, kv, u, mode):
    assert kv_mode(heads, kv, u) == mode


def test_grouped_kv_heads_are_refused_on_a_family_without_them():
    """Every family's diffusers class has one key/value head per query head: a job asking tiny (a
    WanTransformer3DModel) for grouped kv heads is refused in one line naming the field."""
    with pytest.raises(SporchError) as ei:
        plan("local", TINY, "model.num_kv_heads=2")
    msg = str(ei.value)
    assert msg.startswith("model.num_kv_heads=2 (WanTransformer3DModel gives 4): preset tiny runs") and "\n" not in msg


def _gqa(heads: int, kv: int, world: int = 8) -> LayoutContext:
    return LayoutContext(cluster="a100x8", nodes=1, gpus_per_node=world, num_heads=heads, num_kv_heads=kv, batch=1,
                         guidance=False, seq_len=4096, split="uneven")


def test_kv_refused_and_replicated():
    """The layout rules for grouped kv heads (no family has them today; the rules stay for one that
    does): kv heads split, replicated, or the layout refused with the feasible list."""
    with pytest.raises(LayoutError, match="num_kv_heads 6 and ulysses 4") as ei:
        resolve_layout(_gqa(12, 6), {"ulysses": 4, "ring": 2})
    assert ei.value.feasible and all(kv_mode(12, 6, lay.ulysses) for lay in ei.value.feasible)
    with pytest.raises(LayoutError, match="every completion is refused: num_kv_heads 6 and ulysses 4"):
        resolve_layout(_gqa(12, 6), {"ulysses": 4, "ring": "auto"})
    lay, _ = resolve_layout(_gqa(4, 2, world=4), {"ulysses": 4, "ring": 1})
    assert HeadsSection.build(4, 2, lay.ulysses).kv_mode == "replicate"
    lay, _ = resolve_layout(_gqa(4, 2, world=4), {"ulysses": 2, "ring": 2})
    assert HeadsSection.build(4, 2, lay.ulysses).kv_mode == "split"


def test_head_split():
    assert head_split(12, 8) == [2, 2, 2, 2, 1, 1, 1, 1]
    assert head_split(40, 8) == [5] * 8
    assert sum(head_split(7, 3)) == 7


def test_sequence_too_short():
    with pytest.raises(LayoutError, match="sequence of 2 tokens < ring 1 x ulysses 4"):
        plan("local", TINY, "workload.frames=1", "workload.height=16", "workload.width=32")


def test_cross_node_ulysses_and_intra_node_ring_warn():
    p = plan("a100x32", WAN14B, "parallel.ulysses=16", "parallel.ring=2")
    assert any("Ulysses group of 16 ranks spans 2 nodes" in w for w in p.warnings)
    p = plan("a100x32", WAN14B, "parallel.ulysses=4", "parallel.ring=8")
    assert any("ring group of 8 ranks stays inside one node" in w for w in p.warnings) is False
    p = plan("l40x16", WAN14B, "parallel.ulysses=4", "parallel.ring=4")
    assert not any("stays inside one node" in w for w in p.warnings)  # ring 0,4 | 8,12 spans both nodes
    p = plan("l40x16", WAN14B, "parallel.cfg=2", "parallel.ulysses=4", "parallel.ring=2")
    assert p.groups["ring"][0] == [0, 4]
    assert any("ring group of 2 ranks stays inside one node" in w for w in p.warnings)


def test_auto_fill():
    p = plan("a100x32", WAN14B, "parallel.ring=auto")
    assert p.layout.sizes() == {"dp": 1, "cfg": 1, "ring": 4, "ulysses": 8}
    p = plan("a100x32", WAN14B, "parallel.ulysses=auto", "parallel.ring=2")
    assert (p.layout.ring, p.layout.ulysses) == (2, 16)
    p = plan("a100x32", WAN14B, "parallel.cfg=auto", "parallel.ring=2")
    assert p.layout.cfg == 2
    # auto = the fastest predicted layout (issue 14): on CPU ranks the all-to-all's per-peer
    # messages cost more than one overlapped ring step, so ring 2 x ulysses 2 beats ulysses 4
    p = plan("local", TINY, "parallel.ulysses=auto", "parallel.ring=auto")
    assert (p.layout.ring, p.layout.ulysses) == (2, 2)
    assert p.estimates.layout_choice.startswith("auto chose 1x1x2x2")
    # 12 heads: auto prefers an even head split inside the node
    p = plan("a100x8", EXAMPLES / "wan1.3b-480p.yaml")
    assert p.layout.cfg == 2 and p.layout.ulysses == 4 and p.layout.ring == 1
    with pytest.raises(LayoutError, match="cannot fill parallel.ulysses=auto with dp 1, cfg 1, ring 3"):
        plan("a100x32", WAN14B, "parallel.ring=3", "parallel.ulysses=auto")


def test_resources_nodes_override():
    p = plan("a100x32", WAN14B, "resources.nodes=2")
    assert p.nodes == 2 and p.layout.ring == 2 and p.world_size == 16
    from sporch.orchestrator.errors import SporchError

    with pytest.raises(SporchError, match="resources.nodes 8 exceeds the 4 nodes"):
        plan("a100x32", WAN14B, "resources.nodes=8")


def test_estimates_present_and_memory_check():
    p = plan("a100x32")
    e = p.estimates
    assert 13e9 < e.compute.parameters < 15.5e9
    assert e.compute.tokens_per_rank == 2363
    assert e.communication.all_to_all_bytes_per_rank > 0 and e.communication.ring_bytes_per_rank > 0
    assert e.memory.fits and 0 < e.memory.memory_fraction < 1
    single = plan("a100x8", WAN14B, "parallel.ulysses=1", "parallel.ring=1", "parallel.dp=8", "workload.batch=8")
    assert single.estimates.communication.all_to_all_bytes_per_rank == 0 and single.estimates.communication.ring_bytes_per_rank == 0
    big = plan("l40x16", WAN14B, "parallel.ulysses=1", "parallel.ring=1", "parallel.dp=16", "workload.batch=16",
               "parallel.shard_weights=none")
    assert not big.estimates.memory.fits and any("exceeds 90%" in w for w in big.warnings)
    # auto (the default) spreads the parameters over the 16 ranks instead
    auto = plan("l40x16", WAN14B, "parallel.ulysses=1", "parallel.ring=1", "parallel.dp=16", "workload.batch=16")
    assert auto.estimates.memory.fits and auto.placement.shard_weights == "world"


def test_planner_is_pure():
    import copy

    c, j = find_cluster("a100x32"), load_job(WAN14B)
    c0, j0 = copy.deepcopy(c), copy.deepcopy(j)
    first = make_plan(c, j)
    assert c == c0 and j == j0  # inputs untouched
    assert make_plan(c, j) == first  # same inputs, same plan


def test_pcie_ethernet_cluster_is_flagged_communication_bound():
    p = plan("l40x16")
    assert p.estimates.communication.all_to_all_gb_per_s == 25 and p.estimates.communication.ring_gb_per_s == 12.5 / 8
    assert any(w.startswith("communication-bound") for w in p.warnings)
    assert not any(w.startswith("communication-bound") for w in plan("a100x32").warnings)
