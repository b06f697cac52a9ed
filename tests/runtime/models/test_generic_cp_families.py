"""The families whose diffusers class carries a ``_cp_plan`` (issue 48 item 1): FLUX.2, LTX-2, ChronoEdit,
Helios, MiniMax-H3, each a tiny config of the real class sharded over 4 gloo ranks (U4, R4, U2R2, cfg 2 x U2
where the family has CFG, and an uneven case: 3 heads that no Ulysses degree of the test divides, token and
text counts 4 does not divide; LTX-2.3's blocks; LTX-2 with text masks that drop keys) == the same diffusers
model unsharded, float32, max abs error <= 1e-5 on every output (LTX-2's and MiniMax-H3's audio prediction
too). All cases run in ONE spawned world.

LoRA (U2R2, every family): a PEFT-format adapter on every linear of the first block, merged by
``models/lora.py`` with the family's diffusers loader, sharded == the unsharded model with the same low-rank
update added by hand (W += scale x alpha / r x B A).

Besides: the class's own ``_cp_plan`` where sporch ships another plan fails there (LTX-2: its RoPE entries
leave the published 4-D tables and the audio-to-video table whole; Helios: its gathers name 40 blocks), and a
config the shipped plan does not split exactly is refused (Helios' ``is_amplify_history``, measured off)."""

from __future__ import annotations

import pytest

pytest.importorskip("diffusers")

from sporch.runtime.testing import run_distributed  # noqa: E402

TOL = 1e-5
CLASSES = {"flux2": "Flux2Transformer2DModel", "ltx2": "LTX2VideoTransformer3DModel",
           "chronoedit": "ChronoEditTransformer3DModel", "helios": "HeliosTransformer3DModel",
           "minimax-h3": "MiniMaxH3Transformer3DModel"}
#: the uneven-heads overrides (3 heads; LTX-2's audio heads follow the video's, the audio-to-video attention
#: being split with them)
THREE = {"flux2": dict(num_attention_heads=3), "ltx2": dict(num_attention_heads=3, audio_num_attention_heads=3,
                                                            cross_attention_dim=24, audio_cross_attention_dim=12),
         "chronoedit": dict(num_attention_heads=3, added_kv_proj_dim=24), "helios": dict(num_attention_heads=3),
         "minimax-h3": dict(num_attention_heads=3)}
#: families with a CFG branch (the other two are guidance-distilled)
CFG = ("ltx2", "chronoedit", "helios")
# family, config overrides ("three": 3 heads, "23": LTX-2.3's blocks, "mask": text masks that drop keys), layout,
# token grid [f, h, w], text tokens, batch
CASES = [c for fam in CLASSES for c in (
    (fam, {}, dict(ulysses=4), (2, 2, 4) if fam != "flux2" else (1, 4, 4), 8, 1),
    (fam, {}, dict(ring=4), (3, 3, 1) if fam != "flux2" else (1, 3, 3), 5, 2),
    (fam, {}, dict(ulysses=2, ring=2), (1, 3, 5), 7, 1),
    (fam, "three", dict(dp=2, ulysses=2), (1, 3, 3), 5, 1),
    *(((fam, {}, dict(cfg=2, ulysses=2), (1, 3, 3), 5, 2),) if fam in CFG else ()),
)] + [("ltx2", "23", dict(ulysses=2, ring=2), (2, 3, 1), 7, 2),  # LTX-2.3: gates, prompt modulation, perturbed
      ("ltx2", "23", dict(cfg=2, ulysses=2), (1, 3, 3), 5, 2),
      # the text masks drop the last 3 of 7 text keys (a short prompt's padding): the video's cut with its text
      ("ltx2", "mask", dict(ulysses=2, ring=2), (1, 3, 5), 7, 1)]


def label(case) -> str:
    fam, over, layout, grid, text, batch = case
    lay = "".join(f"{k[0].upper()}{v}" for k, v in layout.items())
    tag = {"three": "-3heads", "23": "-2.3", "mask": "-masked"}.get(over, "") if isinstance(over, str) else ""
    return f"{fam}-{lay}{tag}-{'x'.join(map(str, grid))}+{text}"


def _config(fam: str, over) -> dict:
    from sporch.runtime.models.families import family_module

    mod = family_module(fam)
    extra = THREE[fam] if over == "three" else mod.TINY_23 if over == "23" else {} if over == "mask" else over
    return {**mod.TINY, **extra}


def _world(cases, lora_files):
    import torch

    from sporch.runtime.models.build import random_diffusers

    from sporch.runtime.models.runner import verify_model
    from sporch.runtime.models.families import family_module
    from sporch.runtime.models.runner import _outputs
    from sporch.runtime.parallel import ParallelContext
    from tests.runtime.models.test_generic import zero_attention

    out = {}
    for case in cases:
        fam, over, layout, grid, text, batch = case
        ctx = ParallelContext.from_layout(**layout)
        mod = family_module(fam)
        config = _config(fam, over)
        model = random_diffusers(CLASSES[fam], config, seed=3)
        inputs = mod.inputs(config, batch=batch, grid=grid, text_len=text, generator=torch.Generator().manual_seed(5))
        if over == "mask":
            for key in ("encoder_attention_mask", "audio_encoder_attention_mask"):
                inputs[key][:, -3:] = 0
        res = verify_model(model, ctx, inputs, batched=mod.BATCHED)
        with torch.no_grad():  # how much attention moves each output (else the comparison proves nothing)
            refs = _outputs(model(**inputs))
            with zero_attention():
                zeroed = _outputs(model(**inputs))
            res["attention_effect"] = min(float((z - r).abs().max()) for z, r in zip(zeroed, refs))
            if over == "mask":  # how much the dropped keys move the output (else the mask proves nothing)
                kept = {**inputs, **{k: torch.ones_like(inputs[k]) for k in ("encoder_attention_mask",
                                                                              "audio_encoder_attention_mask")}}
                res["mask_effect"] = min(float((u - r).abs().max()) for u, r in zip(_outputs(model(**kept)), refs))
        res["outputs"] = len(refs)
        out[label(case)] = res
        ctx.close()
    out["own plans"] = _own_plans()
    out["lora"] = _lora(lora_files)
    out["cfg hooks"] = _cfg_hooks()
    return out


def _cfg_hooks() -> dict:
    """LTX-2 on cfg 2 x U2 through ``CfgParallel``'s forward hooks (what a pipeline that batches both CFG
    passes gets): both predictions of the call, video and audio, whole on every rank."""
    import torch

    from sporch.runtime.models.build import random_diffusers
    from sporch.runtime.models.cfg_parallel import CfgParallel
    from sporch.runtime.models.families import family_module
    from sporch.runtime.models.split_plans import split_plan
    from sporch.runtime.models.sequence_parallel import SequenceParallel
    from sporch.runtime.parallel import ParallelContext

    ctx = ParallelContext.from_layout(cfg=2, ulysses=2)
    mod = family_module("ltx2")
    model = random_diffusers(CLASSES["ltx2"], dict(mod.TINY), seed=3)
    inputs = mod.inputs(mod.TINY, batch=2, grid=(1, 3, 3), text_len=5, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        refs = model(**inputs)
        with SequenceParallel(model, ctx, split_plan(type(model))), CfgParallel(model, ctx, mod.BATCHED):
            got = model(**inputs)
    ctx.close()
    return {"shapes": [tuple(g.shape) == tuple(r.shape) for g, r in zip(got, refs)],
            "errors": [float((g - r).abs().max()) for g, r in zip(got, refs)]}


LORA_RANK, LORA_ALPHA, LORA_SCALE = 3, 2.0, 0.7


def _first_block_linears(model) -> dict:
    import torch

    first = next(name for name, child in model.named_children() if isinstance(child, torch.nn.ModuleList))
    return {n: m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n.startswith(f"{first}.0.")}


def lora_file(fam: str, path) -> str:
    """A PEFT-format adapter (``transformer.<module>.lora_A/B.weight``, alpha in the header metadata as
    diffusers' ``save_lora_weights`` writes it) on every linear of the family's tiny model's first block."""
    import json

    import torch
    from safetensors.torch import save_file

    from sporch.runtime.models.build import random_diffusers

    model = random_diffusers(CLASSES[fam], _config(fam, {}), seed=3)
    g = torch.Generator().manual_seed(11)
    sd = {}
    for name, lin in _first_block_linears(model).items():
        sd[f"transformer.{name}.lora_A.weight"] = torch.randn(LORA_RANK, lin.in_features, generator=g) * 0.4
        sd[f"transformer.{name}.lora_B.weight"] = torch.randn(lin.out_features, LORA_RANK, generator=g) * 0.4
    meta = {"lora_adapter_metadata": json.dumps({"transformer.r": LORA_RANK, "transformer.lora_alpha": LORA_ALPHA,
            "transformer.target_modules": sorted({k.split(".lora_")[0].split(".", 1)[1] for k in sd})})}
    save_file(sd, str(path), metadata=meta)
    return str(path)


def _lora(files: dict) -> dict:
    import torch
    from safetensors.torch import load_file

    from sporch.orchestrator.models.families import get_family
    from sporch.runtime.models.runner import ShardedTransformer
    from sporch.runtime.models.build import random_diffusers
    from sporch.runtime.models.families import family_module
    from sporch.runtime.models.lora import apply_lora
    from sporch.runtime.models.runner import _outputs
    from sporch.runtime.parallel import ParallelContext

    ctx = ParallelContext.from_layout(ulysses=2, ring=2)
    out = {}
    for fam, path in files.items():
        config = _config(fam, {})
        inputs = family_module(fam).inputs(config, batch=1, grid=(1, 3, 5), text_len=7,
                                           generator=torch.Generator().manual_seed(5))
        ref_model = random_diffusers(CLASSES[fam], config, seed=3)
        with torch.no_grad():
            plain = _outputs(ref_model(**inputs))
            sd = load_file(path)
            for name, lin in _first_block_linears(ref_model).items():  # the update, by hand
                a, b = sd[f"transformer.{name}.lora_A.weight"], sd[f"transformer.{name}.lora_B.weight"]
                lin.weight += LORA_SCALE * LORA_ALPHA / LORA_RANK * (b @ a)
            refs = _outputs(ref_model(**inputs))
        ours = random_diffusers(CLASSES[fam], config, seed=3)
        changed = apply_lora(ours, [{"path": path, "scale": LORA_SCALE}], get_family(fam).lora_loader)
        got = ShardedTransformer(ours, ctx, batched=family_module(fam).BATCHED).forward_all(**inputs)
        out[fam] = {"changed": changed, "linears": len(_first_block_linears(ours)),
                    "rel_err": max(float((g - r).abs().max()) / float(r.abs().max()) for g, r in zip(got, refs)),
                    "effect": min(float((r - p).abs().max()) / float(r.abs().max()) for r, p in zip(refs, plain))}
    ctx.close()
    return out


def _own_plans() -> dict:
    """The class's own ``_cp_plan`` where sporch ships another plan (on the world's 4 ranks, U4)."""
    import diffusers
    import torch

    from sporch.runtime.models.build import random_diffusers
    from sporch.runtime.models.families import family_module
    from sporch.runtime.models.split_plans import from_cp_plan
    from sporch.runtime.models.sequence_parallel import SequenceParallel
    from sporch.runtime.parallel import ParallelContext

    ctx = ParallelContext.from_layout(ulysses=4)
    out = {}
    for fam in ("ltx2", "helios"):
        config = family_module(fam).TINY
        model = random_diffusers(CLASSES[fam], dict(config), seed=3)
        inputs = family_module(fam).inputs(config, batch=1, grid=(2, 2, 2), text_len=8,
                                           generator=torch.Generator().manual_seed(5))
        try:
            with torch.no_grad(), SequenceParallel(model, ctx, from_cp_plan(getattr(diffusers, CLASSES[fam])._cp_plan)):
                model(**inputs)
            out[fam] = "ran"
        except (RuntimeError, AttributeError) as exc:  # a shape mismatch; a block the plan names and the model lacks
            out[fam] = f"{type(exc).__name__}: {exc}"
    ctx.close()
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    pytest.importorskip("peft")
    root = tmp_path_factory.mktemp("cp-lora")
    files = {fam: lora_file(fam, root / f"{fam}.safetensors") for fam in CLASSES}
    return run_distributed(_world, 4, CASES, files, timeout=600)


@pytest.mark.parametrize("case", CASES, ids=label)
def test_sharded_equals_unsharded(results, case):
    name = label(case)
    fam = case[0]
    errors = [max(res[name].get("output_errors", [res[name]["max_abs_err"]])[i] for res in results)
              for i in range(results[0][name]["outputs"])]
    streams = "video, audio" if len(errors) > 1 else "output"
    mask = f"; the mask by {results[0][name]['mask_effect']:.2g}" if "mask_effect" in results[0][name] else ""
    print(f"{name}: max abs error over ranks {', '.join(f'{e:.2g}' for e in errors)} ({streams}); attention moves "
          f"the output by {results[0][name]['attention_effect']:.2g}{mask}")
    for rank, res in enumerate(results):
        r = res[name]
        assert r["attention_effect"] > 1000 * TOL, f"{name}: attention barely moves the output; the test proves nothing"
        assert r.get("mask_effect", 1.0) > 1000 * TOL, f"{name}: the mask barely moves the output"
        assert r["max_abs_err"] <= TOL, f"{name} rank {rank}: max abs error {r['max_abs_err']:.3g} > {TOL}"
        # LTX-2 and MiniMax-H3 return the audio prediction too, compared as well
        assert r["outputs"] == (2 if fam in ("ltx2", "minimax-h3") else 1)
        assert len(r.get("output_errors", [r["max_abs_err"]])) == r["outputs"]


def test_the_class_own_cp_plan_fails_where_sporch_ships_another(results):
    """LTX-2's ``_cp_plan`` leaves the published configs' 4-D (``rope_type: split``) RoPE tables and the
    audio-to-video table whole: a shape mismatch in the first attention; Helios' names the gathers of 40
    blocks one by one: a 2-block model lacks ``blocks.2``."""
    own = results[0]["own plans"]
    assert own["ltx2"].startswith("RuntimeError") and "shape" in own["ltx2"], own
    assert own["helios"].startswith("AttributeError") and "`2`" in own["helios"], own


@pytest.mark.parametrize("fam, over, match", [
    ("helios", {"is_amplify_history": True}, "is_amplify_history"),
    ("ltx2", {"rope_type": "interleaved"}, "rope_type 'interleaved'"),
    ("ltx2", {"audio_num_attention_heads": 2}, "audio_num_attention_heads 2 != num_attention_heads 4"),
])
def test_a_config_the_plan_does_not_split_exactly_is_refused_in_one_line(tmp_path, fam, over, match):
    """At plan time (sporch plan: more than one sequence rank) and at run time (a hand-edited plan), naming
    the config option; with one sequence rank it plans."""
    import dataclasses
    import json

    from sporch.orchestrator.config.cluster import find_cluster
    from sporch.orchestrator.config.job import job_from_dict
    from sporch.orchestrator.errors import SporchError
    from sporch.orchestrator.models.families import get_family
    from sporch.orchestrator.plan.planner import make_plan
    from sporch.runtime.models.runner import ShardedTransformer
    from sporch.runtime.models.build import random_diffusers
    from sporch.runtime.models.families import family_module

    config = {**family_module(fam).TINY, **over}
    assert get_family(fam).split_refusal(config) is not None and get_family(fam).split_refusal(
        family_module(fam).TINY) is None
    where = tmp_path / "transformer"
    where.mkdir()
    (where / "config.json").write_text(json.dumps({"_class_name": CLASSES[fam], **config}))
    job = {"name": "r", "model": {"weights": str(tmp_path), "text_len": 5},
           "workload": {"kind": "verify", "frames": 9, "height": 64, "width": 64, "steps": 1, "dtype": "float32"}}
    with pytest.raises(SporchError, match=match) as exc:
        make_plan(dataclasses.replace(find_cluster("local"), gpus_per_node=2),
                  job_from_dict({**job, "parallel": {"ulysses": 2, "ring": 1}}))
    assert "\n" not in str(exc.value) and CLASSES[fam] in str(exc.value)
    plan = make_plan(dataclasses.replace(find_cluster("local"), gpus_per_node=1),
                     job_from_dict({**job, "parallel": {"ulysses": 1, "ring": 1}}))
    assert plan.layout.sequence_degree == 1

    class TwoRanks:  # the runtime's check reads only the sequence size
        sequence_size = 2

    with pytest.raises(ValueError, match=match):
        ShardedTransformer(random_diffusers(CLASSES[fam], config, seed=1), TwoRanks())


@pytest.mark.parametrize("fam", list(CLASSES))
def test_lora_merged_sharded_equals_the_update_by_hand(results, fam):
    """Every linear of the first block adapted (the family's loader read the PEFT file), the adapter
    moves the output (else the comparison proves nothing), sharded U2R2 == unsharded W + scale alpha/r BA."""
    r = results[0]["lora"][fam]
    worst = max(x["lora"][fam]["rel_err"] for x in results)
    print(f"{fam} LoRA U2R2: {r['changed']} linears merged, rel error {worst:.2g}, effect {r['effect']:.2g}")
    for rank in results:
        r = rank["lora"][fam]
        assert r["changed"] == r["linears"] > 0, r
        assert r["effect"] > 1000 * TOL, r
        assert r["rel_err"] <= TOL, r


@pytest.mark.parametrize("fam, over", [
    ("ltx2", ["parallel.ulysses=4", "workload.height=96", "workload.width=160"]),
    ("minimax-h3", ["parallel.ulysses=2", "parallel.ring=2", "workload.height=96", "workload.width=160"]),
])
def test_sporch_run_local_verify_on_a_tiny_folder(tmp_path, fam, over):
    """`sporch run --local --verify model.weights=DIR`, no preset: a tiny diffusers folder of the family
    planned from its config.json, 4 gloo ranks against the unsharded model (15 video tokens: uneven), every
    output compared (the audio prediction too). The point on the pool's ranks (tests/runtime/models/
    tiny_folder.py; test_generic.py keeps the real launches of this path)."""
    from tests.runtime.models.tiny_folder import verify_on_ranks

    metrics = verify_on_ranks(tmp_path, CLASSES[fam], _config(fam, {}), over)["metrics"]
    print(f"{fam} sporch run --verify {' '.join(over)}: max abs {metrics['max_abs_err']:.3g}, outputs "
          f"{metrics['forward'].get('output_errors')}")
    assert metrics["family"] == fam and metrics["path"] == "diffusers"
    assert metrics["ok"] and metrics["max_abs_err"] <= TOL and metrics["forward"]["ref_max_abs"] > 1e-3
    assert len(metrics["forward"]["output_errors"]) == 2  # video and audio


def test_cfg_parallel_hooks_gather_every_prediction(results):
    """``CfgParallel`` (the generate pipelines' hooks) gathers each tensor of the call's output over the cfg
    group: LTX-2's audio prediction as well as its video's, whole batch on every rank."""
    for rank in results:
        r = rank["cfg hooks"]
        assert r["shapes"] == [True, True] and max(r["errors"]) <= TOL, r
