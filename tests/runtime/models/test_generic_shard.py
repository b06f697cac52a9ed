"""Sharded parameters (``parallel.shard_weights``) and low-bit weights (``model.quant``) on the generic
path (runtime/models/placed.py), 4 gloo ranks, float32, from planned tiny diffusers folders.

* shard_weights: Qwen-Image (U2R2, 15 tokens: uneven) and HunyuanVideo (U4) planned with
  ``parallel.shard_weights: world``; the model the plan builds (FSDP2 units, each rank reading its
  rows from the folder's memory-mapped safetensors) run sequence-parallel == the unsharded diffusers
  model loaded from the folder, max abs error <= 1e-5; its resident parameter bytes per rank
  (measured: the local shards FSDP2 holds) about a quarter of the unsharded model's. ``run_model``
  runs verify on the world-sharded plan and benchmark on a ``sequence``-sharded one (dp 2 x U2).
* the head split: the generic attention takes ``plan.heads.q_heads_per_rank`` (an edited record is
  followed, a wrong one refused in one line).
* LoRA with sharded parameters: Qwen-Image (U2R2, two PEFT-format adapters, one with alpha in its
  header metadata, one with mixed ranks) and HunyuanVideo (U4, mixed ranks and a ``lora_B`` bias)
  planned with ``model.lora`` and ``shard_weights: world``; the adapters merged row by row into each
  rank's shards (``generic/lora.merge_lora_rows``) == the unsharded path's merge by diffusers'
  loader + PEFT (``apply_lora``, itself checked against diffusers in test_generic_levers.py), max
  abs error <= 1e-5, the adapters moving the output by far more.
* model.quant int8_weight on Qwen-Image: the quantised model run on U2R2, on U4 and unsharded gives
  the same output (<= 1e-5), which differs from the float model's (nonzero) but is close (relative
  error and PSNR recorded).

* bfloat16 Wan keeps the class's float32 modules (``_keep_in_fp32_modules``) in float32; FSDP2 leaves
  them whole (it shards one dtype per unit) and the sharded forward equals the unsharded one.

Everything runs in ONE spawned world of 4 gloo ranks.
"""

from __future__ import annotations

import math

import pytest

pytest.importorskip("diffusers")

from sporch.runtime.testing import run_distributed  # noqa: E402

TOL = 1e-5
QWEN, HUNYUAN = "QwenImageTransformer2DModel", "HunyuanVideoTransformer3DModel"
VERIFY = dict(kind="verify", steps=1, dtype="float32", guidance_scale=1.0)
#: name -> (class, parallel, workload extras, model extras)
PLANS = {
    "qwen-world-U2R2": (QWEN, dict(ulysses=2, ring=2, shard_weights="world"), dict(frames=1, height=48, width=80), {}),
    "hunyuan-world-U4": (HUNYUAN, dict(ulysses=4, shard_weights="world"), dict(frames=5, height=32, width=48), {}),
    "qwen-sequence-dp2U2-benchmark": (QWEN, dict(dp=2, ulysses=2, shard_weights="sequence"),
                                      dict(frames=1, height=48, width=80, kind="benchmark", batch=2, warmup=0,
                                           repeat=1), {}),
    "qwen-lora-world-U2R2": (QWEN, dict(ulysses=2, ring=2, shard_weights="world"), dict(frames=1, height=48, width=80),
                             dict(lora=[("qwen_alpha", 0.7), ("qwen_ranks", 1.3)])),
    "hunyuan-lora-world-U4": (HUNYUAN, dict(ulysses=4, shard_weights="world"), dict(frames=5, height=32, width=48),
                              dict(lora=[("hunyuan_ranks", 0.9)])),
    "qwen-int8-U2R2": (QWEN, dict(ulysses=2, ring=2), dict(frames=1, height=48, width=80), dict(quant="int8_weight")),
    "qwen-int8-U4": (QWEN, dict(ulysses=4), dict(frames=1, height=48, width=80), dict(quant="int8_weight")),
}


def _tiny(cls):
    from sporch.orchestrator.models.families import require_family
    from sporch.runtime.models.families import family_module

    return dict(family_module(require_family(cls).name).TINY)


def peft_file(path, model, keep, seed, *, alpha=None, rank_of=lambda name: 3, bias=False, meta=None):
    """diffusers/PEFT keys ``transformer.<module>.lora_A/B.weight`` (and ``lora_B.bias``) on every
    kept Linear, of rank ``rank_of(name)``; with ``alpha``, lora_alpha in the header metadata as
    diffusers' save_lora_weights writes it."""
    import json

    import torch
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(seed)
    sd = {}
    for name, lin in model.named_modules():
        if not isinstance(lin, torch.nn.Linear) or not keep(name):
            continue
        r = rank_of(name)
        sd[f"transformer.{name}.lora_A.weight"] = torch.randn(r, lin.in_features, generator=g) * 0.4
        sd[f"transformer.{name}.lora_B.weight"] = torch.randn(lin.out_features, r, generator=g) * 0.4
        if bias:
            sd[f"transformer.{name}.lora_B.bias"] = torch.randn(lin.out_features, generator=g) * 0.4
    header = None if alpha is None else {"lora_adapter_metadata": json.dumps(
        {"transformer.r": 3, "transformer.lora_alpha": alpha, **{f"transformer.{k}": v for k, v in (meta or {}).items()},
         "transformer.lora_bias": bias,
         "transformer.target_modules": sorted({k.split(".lora_")[0].split(".", 1)[1] for k in sd})})}
    save_file(sd, str(path), metadata=header)
    return str(path)


def make_adapters(root, models) -> dict:
    """The adapter files of the LoRA cases, under ``root``."""
    qwen, hunyuan = models[QWEN], models[HUNYUAN]
    return {
        "qwen_alpha": peft_file(root / "qa.safetensors", qwen, lambda n: ".attn." in n, 1, alpha=6.0),
        "qwen_ranks": peft_file(root / "qr.safetensors", qwen, lambda n: "transformer_blocks" in n, 2,
                                rank_of=lambda n: 2 if ".img_mlp." in n else 4),
        "hunyuan_ranks": peft_file(root / "hr.safetensors", hunyuan, lambda n: "transformer_blocks" in n, 3,
                                  rank_of=lambda n: 2 if "single" in n else 3),
    }


def _family_tiny(fam):
    from sporch.runtime.models.families import family_module

    return family_module(fam).TINY


def make_plans(root) -> dict:
    """A tiny folder per class under ``root`` and each case's plan (as a dict)."""
    from sporch.orchestrator.config.cluster import find_cluster
    from sporch.orchestrator.config.job import job_from_dict
    from sporch.orchestrator.plan.planner import make_plan
    from sporch.runtime.models.build import random_diffusers

    folders, models = {}, {}
    for i, cls in enumerate((QWEN, HUNYUAN)):
        folders[cls] = root / cls
        models[cls] = random_diffusers(cls, _tiny(cls), seed=i + 1)
        models[cls].save_pretrained(str(folders[cls] / "transformer"))
    adapters = make_adapters(root, models)
    out = {}
    for name, (cls, parallel, workload, model) in PLANS.items():
        if "lora" in model:
            model = {**model, "lora": [{"path": adapters[k], "scale": s} for k, s in model["lora"]]}
        job = {"name": name, "model": {"weights": str(folders[cls]), "text_len": 5, **model}, "parallel": parallel,
               "workload": {**VERIFY, **workload}}
        plan = make_plan(find_cluster("local"), job_from_dict(job, "<test>"))
        assert plan.placement.shard_weights == parallel.get("shard_weights", "none"), plan.placement
        out[name] = plan.to_dict()
    return out


def _sharded_vs_diffusers(plan, ctx):
    import torch
    from torch.distributed.tensor import DTensor

    from sporch.runtime.models.runner import ShardedTransformer

    from sporch.runtime.models.build import load_diffusers
    from sporch.runtime.models.families import family_module
    from sporch.runtime.models.workload import build_from_plan, inputs_from_plan
    from sporch.runtime.models.shard_weights import resident_parameter_bytes

    cpu = torch.device("cpu")
    model, config = build_from_plan(plan, cpu, ctx)
    ref = load_diffusers(plan.model.weights)
    inputs = inputs_from_plan(plan, config, cpu)
    got = ShardedTransformer(model, ctx, batched=family_module(plan.model.family).BATCHED).forward(**inputs)
    with torch.no_grad():
        want = ref(**inputs)[0]
    return {"max_abs_err": float((got - want).abs().max()), "ref_max_abs": float(want.abs().max()),
            "dtensors": sum(isinstance(p, DTensor) for p in model.parameters()),
            "parameters": sum(1 for _ in model.parameters()),
            "resident": resident_parameter_bytes(model), "resident_unsharded": resident_parameter_bytes(ref)}


def _lora_sharded_vs_unsharded(plan, ctx):
    """The plan's model with the adapters merged into its shards, run sequence-parallel, vs the
    unsharded path's (diffusers' loader + PEFT, fused) and vs the folder's own model."""
    import torch
    from torch.distributed.tensor import DTensor

    from sporch.runtime.models.runner import ShardedTransformer

    from sporch.runtime.models.build import load_diffusers
    from sporch.runtime.models.families import family_module
    from sporch.runtime.models.workload import build_from_plan, inputs_from_plan

    cpu = torch.device("cpu")
    model, config = build_from_plan(plan, cpu, ctx)
    whole, _ = build_from_plan(plan, cpu)  # no context: whole parameters, apply_lora
    inputs = inputs_from_plan(plan, config, cpu)
    got = ShardedTransformer(model, ctx, batched=family_module(plan.model.family).BATCHED).forward(**inputs)
    with torch.no_grad():
        want = whole(**inputs)[0]
        plain = load_diffusers(plan.model.weights)(**inputs)[0]
    return {"max_abs_err": float((got - want).abs().max()), "lora_effect": float((want - plain).abs().max()),
            "ref_max_abs": float(want.abs().max()), "dtensors": sum(isinstance(p, DTensor) for p in model.parameters()),
            "peft_left": sum("lora" in n for n, _ in whole.named_modules())}


def _quant_outputs(plans, ctxs):
    """The int8 model's output on each layout and unsharded, and the float model's."""
    import torch

    from sporch.runtime.models.runner import ShardedTransformer

    from sporch.runtime.models.build import load_diffusers
    from sporch.runtime.models.families import family_module
    from sporch.runtime.models.workload import build_from_plan, inputs_from_plan
    from sporch.runtime.models.quant import weight_bytes

    cpu = torch.device("cpu")
    outs, qbytes = {}, 0
    for name, plan in plans.items():
        model, config = build_from_plan(plan, cpu, ctxs[name])
        inputs = inputs_from_plan(plan, config, cpu)
        outs[name] = ShardedTransformer(model, ctxs[name], batched=family_module(plan.model.family).BATCHED).forward(**inputs)
        qbytes = weight_bytes(model)
    plan = next(iter(plans.values()))
    model, config = build_from_plan(plan, cpu, None)  # unsharded, quantised
    inputs = inputs_from_plan(plan, config, cpu)
    flt = load_diffusers(plan.model.weights)
    with torch.no_grad():
        outs["unsharded"] = model(**inputs)[0]
        ref = flt(**inputs)[0]
    diff = max(float((a - outs["unsharded"]).abs().max()) for a in outs.values())
    err = outs["unsharded"] - ref
    mse = float((err ** 2).mean())
    peak = float(ref.abs().max())
    return {"across_layouts": diff, "quant_vs_float_max_abs": float(err.abs().max()),
            "quant_vs_float_rel": float(err.abs().max()) / peak,
            "psnr_db": 10 * math.log10(peak ** 2 / mse) if mse else math.inf,
            "weight_bytes_int8": qbytes, "weight_bytes_float": weight_bytes(flt)}


def _recorded_heads(plan):
    """The generic attention follows ``plan.heads.q_heads_per_rank``: an edited record ([3, 1] for
    4 heads on U2 where the rule says [2, 2]) is followed (still exact; the Ulysses exchange sends by
    it), a record that does not describe the layout or the sequence is refused in one line."""
    import dataclasses

    import torch

    from sporch.runtime.attention import CommStats
    from sporch.runtime.models.runner import ShardedTransformer
    from sporch.runtime.models.families import family_module
    from sporch.runtime.models.workload import build_from_plan, inputs_from_plan
    from sporch.runtime.parallel import ParallelContext

    cpu = torch.device("cpu")
    model, config = build_from_plan(plan, cpu)  # no context: whole
    inputs = inputs_from_plan(plan, config, cpu)
    batched = family_module(plan.model.family).BATCHED
    with torch.no_grad():
        want = model(**inputs)[0]
    edited = dataclasses.replace(plan, heads=dataclasses.replace(plan.heads, q_heads_per_rank=[3, 1], even=False))
    ctx = ParallelContext.from_plan(edited)
    ctx.comm_stats = CommStats()
    got = ShardedTransformer(model, ctx, batched=batched).forward(**inputs)
    out = {"planned": list(plan.heads.q_heads_per_rank), "err": float((got - want).abs().max()),
           "ulysses_rank": ctx.ulysses_rank, "qkv_bytes": ctx.comm_stats.as_dict().get("ulysses_qkv", 0)}
    ctx.close()
    refused = {}
    for what, bad in (("heads", dataclasses.replace(plan, heads=dataclasses.replace(plan.heads, q_heads_per_rank=[4]))),
                      ("sequence", dataclasses.replace(plan, sequence=dataclasses.replace(plan.sequence,
                                                                                          tokens_per_rank=5)))):
        c = ParallelContext.from_plan(bad)
        try:
            ShardedTransformer(model, c, batched=batched).forward(**inputs)
            refused[what] = None
        except ValueError as exc:
            refused[what] = str(exc)
        c.close()
    out["refused"] = refused
    return out


def _bf16_kept_float32():
    """Wan in bfloat16 keeps its ``_keep_in_fp32_modules`` in float32 (as ``from_pretrained`` loads it);
    FSDP2 shards the bfloat16 parameters, leaves the float32 ones whole, and the forward equals the
    unsharded model's."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    from sporch.runtime.models.build import random_diffusers
    from sporch.runtime.models.families import family_module
    from sporch.runtime.models.shard_weights import shard_model

    wan = family_module("wan")
    cfg = dict(wan.TINY)
    inputs = wan.inputs(cfg, batch=1, grid=(2, 4, 4), text_len=5, generator=torch.Generator().manual_seed(0))
    inputs = {k: (v.to(torch.bfloat16) if torch.is_tensor(v) and v.is_floating_point() else v)
              for k, v in inputs.items()}
    whole = random_diffusers("WanTransformer3DModel", cfg, seed=1, dtype=torch.bfloat16)
    sharded = random_diffusers("WanTransformer3DModel", cfg, seed=1, dtype=torch.bfloat16)
    kept = sorted(n for n, p in whole.named_parameters() if p.dtype == torch.float32)
    shard_model(sharded, DeviceMesh("cpu", list(range(dist.get_world_size()))))
    with torch.no_grad():
        ref = whole(**{**inputs, "return_dict": False})[0]
        out = sharded(**{**inputs, "return_dict": False})[0]
    return {"kept": kept, "dtype": str(out.dtype), "err": float((out.float() - ref.float()).abs().max()),
            "ref_max": float(ref.float().abs().max()),
            "sharded_kept": sum(type(p).__name__ == "DTensor" for n, p in sharded.named_parameters() if n in kept)}


def _world(plan_dicts):
    import torch

    from sporch.orchestrator.contract.plan import Plan
    from sporch.runtime.models.workload import run_model
    from sporch.runtime.parallel import ParallelContext

    plans = {n: Plan.from_dict(d) for n, d in plan_dicts.items()}
    ctxs = {n: ParallelContext.from_plan(p) for n, p in plans.items()}
    out = {n: _sharded_vs_diffusers(plans[n], ctxs[n]) for n in ("qwen-world-U2R2", "hunyuan-world-U4")}
    for n in ("qwen-world-U2R2", "qwen-sequence-dp2U2-benchmark"):
        res = run_model(plans[n], ctxs[n], torch.device("cpu"))
        out[f"run {n}"] = {k: res.get(k) for k in ("kind", "ok", "max_abs_err", "shard_weights",
                                                  "resident_parameter_bytes", "steps_timed")}
    for n in ("qwen-lora-world-U2R2", "hunyuan-lora-world-U4"):
        out[n] = _lora_sharded_vs_unsharded(plans[n], ctxs[n])
    out["heads"] = _recorded_heads(plans["qwen-world-U2R2"])
    out["quant"] = _quant_outputs({n: plans[n] for n in ("qwen-int8-U2R2", "qwen-int8-U4")}, ctxs)
    out["bf16"] = _bf16_kept_float32()
    for c in ctxs.values():
        c.close()
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return run_distributed(_world, 4, make_plans(tmp_path_factory.mktemp("generic-shard")), timeout=600)


@pytest.mark.parametrize("name", ["qwen-world-U2R2", "hunyuan-world-U4"])
def test_sharded_parameters_equal_the_unsharded_diffusers_model(world, name):
    for rank, w in enumerate(world):
        r = w[name]
        print(f"{name} rank {rank}: max abs err {r['max_abs_err']:.3g} (ref max {r['ref_max_abs']:.3g}), resident "
              f"{r['resident']} of {r['resident_unsharded']} bytes")
        assert r["dtensors"] == r["parameters"] > 0, r  # every parameter is an FSDP2 shard
        assert r["max_abs_err"] <= TOL, f"{name} rank {rank}: max abs error {r['max_abs_err']:.3g} > {TOL}"
        # world = 4 ranks: each holds about a quarter (rows round up per parameter)
        assert r["resident"] <= 0.3 * r["resident_unsharded"], r


@pytest.mark.parametrize("name", ["qwen-lora-world-U2R2", "hunyuan-lora-world-U4"])
def test_lora_merged_into_sharded_parameters_equals_the_unsharded_merge(world, name):
    for rank, w in enumerate(world):
        r = w[name]
        print(f"{name} rank {rank}: max abs err {r['max_abs_err']:.3g} vs unsharded LoRA (ref max "
              f"{r['ref_max_abs']:.3g}), LoRA moves the output by {r['lora_effect']:.3g}")
        assert r["dtensors"] > 0 and r["peft_left"] == 0, r
        assert r["lora_effect"] > 1000 * TOL, f"{name}: the adapters barely move the output; the test proves nothing"
        assert r["max_abs_err"] <= TOL, f"{name} rank {rank}: max abs error {r['max_abs_err']:.3g} > {TOL}"


def test_run_generic_verifies_and_benchmarks_sharded_plans(world):
    for rank, w in enumerate(world):
        v, b = w["run qwen-world-U2R2"], w["run qwen-sequence-dp2U2-benchmark"]
        assert v["kind"] == "verify" and v["ok"] and v["max_abs_err"] <= TOL and v["shard_weights"] == "world", v
        assert b["kind"] == "benchmark" and b["steps_timed"] == 1 and b["shard_weights"] == "sequence", b
        # sequence = the 2 ranks of a replica: about half; world = 4: about a quarter
        assert b["resident_parameter_bytes"] < 0.6 * w["qwen-world-U2R2"]["resident_unsharded"], b
        assert v["resident_parameter_bytes"] < 0.3 * w["qwen-world-U2R2"]["resident_unsharded"], v


def test_int8_weights_agree_across_layouts_and_stay_close_to_float(world):
    for rank, w in enumerate(world):
        q = w["quant"]
        print(f"rank {rank}: int8 vs float max abs {q['quant_vs_float_max_abs']:.3g} (rel {q['quant_vs_float_rel']:.3g}, "
              f"PSNR {q['psnr_db']:.1f} dB), across layouts {q['across_layouts']:.3g}, weights "
              f"{q['weight_bytes_int8']} vs {q['weight_bytes_float']} bytes")
        assert q["across_layouts"] <= TOL, q
        assert q["quant_vs_float_max_abs"] > 1000 * TOL, q  # the weights really are quantised
        assert q["quant_vs_float_rel"] < 0.05 and q["psnr_db"] > 30, q
        assert q["weight_bytes_int8"] < 0.6 * q["weight_bytes_float"], q


def test_generic_attention_follows_the_recorded_head_split(world):
    for w in world:
        h = w["heads"]
        assert h["planned"] == [2, 2] and h["err"] <= TOL, h
        assert h["refused"]["heads"] and h["refused"]["heads"].startswith("plan.heads records"), h
        assert h["refused"]["sequence"] and h["refused"]["sequence"].startswith("plan.sequence records"), h
        assert all("\n" not in line for line in h["refused"].values())
    # Ulysses rank 0 sends rank 1's 1 head (q, k, v), rank 1 sends rank 0's 3: three times the bytes,
    # where the rule's [2, 2] would send the same from both
    by_rank = {}
    for w in world:
        by_rank.setdefault(w["heads"]["ulysses_rank"], set()).add(w["heads"]["qkv_bytes"])
    (r0,), (r1,) = by_rank[0], by_rank[1]
    assert r0 > 0 and r1 == 3 * r0, by_rank


def test_bfloat16_wan_keeps_its_float32_modules_whole_under_fsdp2(world):
    for rank, w in enumerate(world):
        b = w["bf16"]
        assert b["kept"] and any("norm" in n for n in b["kept"]) and any("scale_shift" in n for n in b["kept"]), b
        assert b["sharded_kept"] == 0 and b["dtype"] == "torch.bfloat16", b
        assert b["ref_max"] > 0 and b["err"] == 0.0, f"rank {rank}: FSDP2-sharded bf16 Wan differs by {b['err']:.3g}"


def test_row_merge_scales_as_peft_fuses(tmp_path):
    """One process, whole parameters: ``merge_lora_rows`` == ``apply_lora`` (diffusers' loader, PEFT
    fused) for what the world's plans cannot carry (the planner refuses ``lora_B`` biases): rsLoRA,
    an ``alpha_pattern``, a bias, two adapters; on Flux a kohya file (the loader's conversion) and
    one with per-module alphas (returned apart); and a module the model lacks is named."""
    import torch

    from sporch.runtime.models.build import random_diffusers
    from sporch.runtime.models.lora import LoraError, apply_lora, merge_lora_rows

    cfg = _tiny(QWEN)
    base = random_diffusers(QWEN, cfg, seed=1)
    odd = next(n for n, m in base.named_modules() if n.endswith("attn.to_k"))
    files = [
        peft_file(tmp_path / "rs.safetensors", base, lambda n: ".attn." in n, 7, alpha=5.0, bias=True,
                  meta={"use_rslora": True}),
        peft_file(tmp_path / "ap.safetensors", base, lambda n: "img_mlp" in n or n == odd, 8, alpha=2.0,
                  meta={"alpha_pattern": {odd: 9.0}}),
    ]
    adapters = [{"path": f, "scale": s} for f, s in zip(files, (0.6, 1.4))]
    ours, theirs = random_diffusers(QWEN, cfg, seed=1), random_diffusers(QWEN, cfg, seed=1)
    n = merge_lora_rows(ours, adapters, "QwenImageLoraLoaderMixin")
    assert n == apply_lora(theirs, adapters, "QwenImageLoraLoaderMixin") > 0
    want, got, plain = theirs.state_dict(), ours.state_dict(), base.state_dict()
    err = max(float((got[k] - want[k]).abs().max()) for k in want)
    moved = max(float((want[k] - plain[k]).abs().max()) for k in want)
    assert moved > 1000 * TOL and err <= TOL, (err, moved)
    # a kohya file with Flux's original names: the loader's conversion and its alphas (network_alphas)
    from tests.runtime.models.test_generic_levers import kohya_flux_file

    # and a diffusers-named Flux file with per-module ``.alpha`` tensors (two values), which Flux's
    # loader returns apart (network_alphas -> lora_alpha + alpha_pattern)
    from safetensors.torch import load_file, save_file

    flux_cfg = dict(_family_tiny("flux"))
    f_base, f_ours, f_theirs = (random_diffusers("FluxTransformer2DModel", flux_cfg, seed=2) for _ in range(3))
    alphas = load_file(peft_file(tmp_path / "fa.safetensors", f_base, lambda n: ".attn." in n, 4))
    for key in [k for k in alphas if k.endswith(".lora_A.weight")]:
        alphas[key.replace(".lora_A.weight", ".alpha")] = torch.tensor(1.5 if "single" in key else 6.0)
    save_file(alphas, str(tmp_path / "fa.safetensors"))
    kohya = [{"path": kohya_flux_file(tmp_path / "fk.safetensors", flux_cfg, 3), "scale": 0.8},
             {"path": str(tmp_path / "fa.safetensors"), "scale": 1.2}]
    assert merge_lora_rows(f_ours, kohya, "FluxLoraLoaderMixin") == apply_lora(f_theirs, kohya, "FluxLoraLoaderMixin") > 0
    want, got, plain = f_theirs.state_dict(), f_ours.state_dict(), f_base.state_dict()
    err = max(float((got[k] - want[k]).abs().max()) for k in want)
    moved = max(float((want[k] - plain[k]).abs().max()) for k in want)
    assert moved > 1000 * TOL and err <= TOL, ("flux", err, moved)
    other = peft_file(tmp_path / "h.safetensors", random_diffusers(HUNYUAN, _tiny(HUNYUAN), seed=1),
                      lambda n: "token_refiner" in n, 9)
    with pytest.raises(LoraError, match=r"not in QwenImageTransformer2DModel \(first: context_embedder|token_refiner"):
        merge_lora_rows(ours, [{"path": other, "scale": 1.0}], "QwenImageLoraLoaderMixin")
