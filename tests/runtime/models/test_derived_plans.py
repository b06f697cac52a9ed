"""Split plans derived from a tiny instance (runtime/models/derive.py) and checked against the
unsharded diffusers class on 2 and 4 gloo ranks with an uneven token count (runtime/derive_check.py):
float32, relative error (max |sharded - unsharded| / max |unsharded|) <= 1e-5.

Three spawned worlds in all: one checks every class's candidates (CogView4, Lumina 2, Chroma:
families whose plan is derived; SkyReels-V2 with diffusion forcing: per-token modulation), one
compares derived plans with the shipped tables and the classes' own ``_cp_plan`` (the block inputs
every rank gets under each), and one ``sporch run --local --verify`` point (on the rank pool, as the
launcher runs it) on a folder of a derived family with no verdict cached (its ranks derive and check
first). The first world is conftest.py's ``derived_verdicts``, shared with the other model tests. SANA and Mochi are refused by the dry run
alone (no world).
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("diffusers")

from sporch.orchestrator.models.families import get_family  # noqa: E402
from sporch.orchestrator.models.families.derived_plans import (TOLERANCE, PlanVerdict, diffusers_version,  # noqa: E402
                                                               write_verdict)
from sporch.orchestrator.models.families.plan_format import SplitInput, splits_text  # noqa: E402

FAMILIES = {"CogView4Transformer2DModel": "cogview4", "Lumina2Transformer2DModel": "lumina2",
            "ChromaTransformer2DModel": "chroma"}
EXACT = tuple(FAMILIES) + ("SkyReelsV2Transformer3DModel",)
REFUSED = ("SanaTransformer2DModel", "MochiTransformer3DModel")


@pytest.fixture(scope="module")
def verdicts(derived_verdicts):
    """Every class checked in one world (conftest.py's ``derived_verdicts``, shared with the other model
    tests); the families' verdicts cached where a run reads them (the session's temporary
    $SPORCH_HOME/split-plans), as `sporch run` would leave them."""
    families, others = derived_verdicts
    return {**{c: families[c] for c in FAMILIES}, **others}


@pytest.mark.parametrize("cls", EXACT)
def test_the_derived_plan_is_exact_on_2_and_4_ranks(verdicts, cls):
    v = verdicts[cls]
    assert v.exact, v.refusal()
    assert set(v.errors) == {2, 4} and max(v.errors.values()) <= TOLERANCE, v.errors
    assert v.tokens == (15, 6)  # 15 image tokens: 8 + 7 on 2 ranks, 4 + 4 + 4 + 3 on 4
    assert v.attention_effect > 1e-2  # zeroing attention moves the output: the comparison is not vacuous


def test_what_each_derived_plan_cuts(verdicts):
    cog, lumina, chroma, sky = (verdicts[c].plan for c in EXACT)
    # CogView4: joint streams cut at the first block, the RoPE tables where the rope module returns them
    assert set(cog["transformer_blocks.0"]) == {"hidden_states", "encoder_hidden_states"}
    assert all(s.split_output for s in cog["rope"].values()) and "proj_out" in cog
    # Lumina 2: the joint [text, image] sequence cut at the main blocks; both refiners run whole
    assert verdicts["Lumina2Transformer2DModel"].stack == ("layers",)
    assert lumina["layers.0"]["hidden_states"].text and set(lumina["layers.*"]) == {"attention_mask", "image_rotary_emb"}
    assert not any(m.startswith(("noise_refiner", "context_refiner")) for m in lumina) and "norm_out" in lumina
    # Chroma: its one RoPE table over [text, image] cut as the two streams' segments, in that order
    for blocks in ("transformer_blocks.*", "single_transformer_blocks.*"):
        assert {s.segments for s in chroma[blocks]["image_rotary_emb"]} == {("encoder_hidden_states", "hidden_states")}
    # SkyReels-V2 diffusion forcing: per-token modulation cut at every block, gathered before the per-token head
    assert sky["blocks.*"]["temb"] == SplitInput(split_dim=2, expected_dims=4) and "norm_out" in sky
    for cls, fam in FAMILIES.items():
        assert get_family(fam).text_split == splits_text(verdicts[cls].plan)  # what the planner records


@pytest.mark.parametrize("cls, why", [("SanaTransformer2DModel", "unflatten"),
                                      ("MochiTransformer3DModel", "no attention module sporch routes")])
def test_a_class_no_plan_fits_is_refused_in_one_line(verdicts, cls, why):
    """SANA's feed-forward convolves the token grid (no token cut keeps its shape); Mochi's attention
    is a module of its own that sporch's routing does not see."""
    v = verdicts[cls]
    assert not v.exact and v.plan is None
    line = v.refusal()
    assert "\n" not in line and line.startswith(cls) and why in line and "cannot run sequence-parallel" in line


def _shipped_pairs():
    """(spec, derived plan, the shipped table or the class's _cp_plan, its local attention) for every
    class with one, and Chroma's derived plan against itself with its segments swapped (a wrong plan)."""
    import dataclasses

    import diffusers

    from sporch.orchestrator.models.families import family_of_class
    from sporch.runtime.derive_check import family_spec
    from sporch.runtime.models.derive import VIDEO_GRIDS, DeriveSpec, derive
    from sporch.runtime.models.families import family_module
    from sporch.runtime.models.split_plans import split_plan
    from tests.runtime.models.derive_specs import qwen_image_masked_inputs

    pairs, literal = [], {}
    for cls in ("WanTransformer3DModel", "FluxTransformer2DModel", "QwenImageTransformer2DModel",
                "LTXVideoTransformer3DModel", "SD3Transformer2DModel", "PixArtTransformer2DModel",
                "CogVideoXTransformer3DModel", "HunyuanVideoTransformer3DModel"):
        fam = family_of_class(cls)
        mod = family_module(fam.name)
        video = cls in ("WanTransformer3DModel", "LTXVideoTransformer3DModel", "CogVideoXTransformer3DModel",
                        "HunyuanVideoTransformer3DModel")
        inputs = qwen_image_masked_inputs if fam.name == "qwen-image" else mod.inputs
        spec = DeriveSpec(cls, mod.TINY, inputs, **({"grids": VIDEO_GRIDS} if video else {}))
        derived = derive(spec).candidates[0].plan
        reference = split_plan(getattr(diffusers, cls))
        literal[cls] = derived == reference
        pairs.append((spec, derived, reference, fam.local_attention))
    spec = family_spec("ChromaTransformer2DModel")
    good = derive(spec).candidates[0].plan
    swap = {m: ({k: tuple(dataclasses.replace(s, segments=s.segments[::-1]) for s in v) if isinstance(v, tuple) else v
                 for k, v in e.items()} if isinstance(e, dict) else e) for m, e in good.items()}
    pairs.append((spec, good, swap, ()))
    return pairs, literal


@pytest.fixture(scope="module")
def compared():
    from sporch.runtime.derive_check import compare

    pairs, literal = _shipped_pairs()
    return {r["class_name"] + ("-wrong" if i == len(pairs) - 1 else ""): r
            for i, r in enumerate(compare(pairs))}, literal


def test_derived_plans_cut_as_the_shipped_tables_and_cp_plans(compared):
    """Every block of every class gets, on every rank, what the shipped table or the class's own
    ``_cp_plan`` gives it (bitwise, or within float32 rounding where those split before a per-token
    embedder: Flux, SD3), but LTX-Video, whose cross-attention text the derived plan keeps whole where
    its _cp_plan cuts it; CogVideoX's derived plan is its shipped table, record for record."""
    results, literal = compared
    assert literal["CogVideoXTransformer3DModel"]
    for cls, r in results.items():
        if cls.endswith("-wrong"):
            continue
        assert max(r["errors"]) <= TOLERANCE, (cls, r)  # both plans exact
        if cls == "LTXVideoTransformer3DModel":
            assert "encoder_hidden_states" in r["mismatch"], r
        else:
            assert r["block_inputs"] <= 2e-6 and r["output"] <= 2e-6, (cls, r)


def test_the_check_catches_a_wrong_plan(compared):
    """Chroma's RoPE segments in the wrong order (image first): sharded output far from the unsharded."""
    r = compared[0]["ChromaTransformer2DModel-wrong"]
    assert r["errors"][0] <= TOLERANCE and r["errors"][1] > 1e-3, r


def test_a_refused_verdict_refuses_the_class_at_runtime(tmp_path):
    from sporch.runtime.models.derived import derived_plan

    write_verdict(PlanVerdict("ChromaTransformer2DModel", "0.42.1", exact=False, plan={}, errors={2: 1e-7, 4: 0.25},
                              reason="a test verdict"), tmp_path)
    with pytest.raises(ValueError) as err:
        derived_plan("ChromaTransformer2DModel", folder=tmp_path)
    line = str(err.value)
    assert "\n" not in line and "ChromaTransformer2DModel" in line and "0.25 relative on 4 sequence ranks" in line


def test_inspect_shows_the_derived_plan_and_its_verdict(verdicts, run_cli, tmp_path):
    from sporch.runtime.models.build import random_diffusers
    from sporch.runtime.models.families import family_module

    random_diffusers("Lumina2Transformer2DModel", family_module("lumina2").TINY, seed=1).save_pretrained(
        str(tmp_path / "m" / "transformer"))
    code, out, err = run_cli("inspect", str(tmp_path / "m"), "--json")
    assert code == 0, err
    d = json.loads(out)["generic"]["derived"]
    assert d["checked"] and d["exact"]
    assert {int(k): v for k, v in d["errors"].items()} == verdicts["Lumina2Transformer2DModel"].errors
    assert d["entries"][0] == "split layers.0: hidden_states (dim 1 of 3)"
    code, out, err = run_cli("inspect", str(tmp_path / "m"), "--gpus", "4")
    assert code == 0, err
    assert "split plan (derived)" in out and "exact: max relative error" in out


def test_sporch_run_local_verify_derives_and_checks_first(tmp_path, derived_verdicts):
    """`sporch run --local --verify model.weights=DIR` on a tiny Chroma folder with no verdict cached:
    a rank derives and checks the plan first (its own process and gloo world, with the other derived
    classes not checked yet; the other ranks wait on the cache's lock), caches the verdicts, and the 4
    ranks (Ulysses 4, 15 image + 7 text tokens) equal the unsharded model. The point on the pool's ranks,
    as the launcher runs it (tests/runtime/models/tiny_folder.py; test_generic.py keeps the real launches).
    The cache holds the session's verdicts of the derived classes but Chroma and one other: the check's
    world derives those two (less to check in it), leaves the cached ones as they were."""
    from sporch.orchestrator.models.families import FAMILIES as REGISTRY
    from sporch.runtime.models.families import family_module
    from tests.runtime.models.tiny_folder import verify_on_ranks

    derived = [c for f in REGISTRY for c in f.derived]  # every family's derived class (SkyReels-V2's too)
    unchecked = ["ChromaTransformer2DModel", next(c for c in derived if c != "ChromaTransformer2DModel")]
    cache = tmp_path / "cache"
    for c in derived:
        if c not in unchecked:
            write_verdict(derived_verdicts[0][c], cache)
    seeded = {p.name: p.read_bytes() for p in cache.glob("*.json")}
    assert len(seeded) == len(derived) - 2, seeded
    metrics = verify_on_ranks(tmp_path, "ChromaTransformer2DModel", family_module("chroma").TINY,
                              ["parallel.ulysses=4", "workload.height=48", "workload.width=80"],
                              env={"SPORCH_SPLIT_PLANS": str(cache)}, timeout=900)["metrics"]
    assert metrics["family"] == "chroma" and metrics["ok"] and metrics["max_rel_err"] <= TOLERANCE
    assert metrics["forward"]["ref_max_abs"] > 1e-3
    # the rank that checked took every derived class not checked yet (one world for all), only those
    assert {p.name: p.read_bytes() for p in cache.glob("*.json") if p.name in seeded} == seeded
    assert sorted(p.name for p in cache.glob("*.json")) == sorted(f"{c}@diffusers-{diffusers_version()}.json"
                                                                  for c in derived)


def test_a_cache_folder_that_cannot_be_written_is_one_line(run_cli, tmp_path, monkeypatch):
    """The ranks refuse in one line; `sporch inspect` says the plan is not checked yet and why, and
    goes on (no process started for a check that could not keep its verdict)."""
    from sporch.runtime.models.build import random_diffusers
    from sporch.runtime.models.derived import derived_plan
    from sporch.runtime.models.families import family_module

    blocked = tmp_path / "a-file"
    blocked.write_text("")
    with pytest.raises(ValueError, match=r"cache folder .*a-file/plans cannot be written .* set SPORCH_SPLIT_PLANS"):
        derived_plan("CogView4Transformer2DModel", folder=blocked / "plans")
    random_diffusers("CogView4Transformer2DModel", family_module("cogview4").TINY, seed=1).save_pretrained(
        str(tmp_path / "m" / "transformer"))
    monkeypatch.setenv("SPORCH_SPLIT_PLANS", str(blocked / "plans"))
    code, out, err = run_cli("inspect", str(tmp_path / "m"), "--gpus", "2")
    assert code == 0, err
    shown = " ".join(out.split())
    assert "not checked yet: the split-plan cache folder" in shown and "cannot be written" in shown
