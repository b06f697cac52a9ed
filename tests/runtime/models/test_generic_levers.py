"""LoRA, the attention kernel and compile on the generic path (issue 34 item 4), 4 gloo ranks, float32.

* LoRA: adapters merged by ``models/lora.py`` (the family's diffusers loader converts the keys,
  PEFT injects, the adapters fused at their scales, PEFT layers unloaded), then the model run
  sharded == the unsharded diffusers model with the same files loaded through the family's
  diffusers *pipeline* (``load_lora_weights`` + ``set_adapters``, NOT fused: PEFT's LoRA layers in
  the forward). PEFT-format files with alpha in the header metadata, two adapters at once, and a
  kohya file with the original Flux names (converted by diffusers' Flux loader).
* compile: every block through ``torch.compile`` (backend ``eager``: Dynamo's graph capture
  with the split/gather hooks and the attention routing in place, without Inductor's C++ build,
  which takes minutes on CI's CPUs; Inductor was checked by hand, docs/model.md), sharded == the
  eager unsharded model; Dynamo must have captured graphs.
* ``run_model`` from a plan (a tiny Qwen-Image folder, ``model.lora``, ``workload.compile: true``,
  15 tokens on U4: uneven): the kernel recorded is the plan's choice, the blocks compiled, the
  adapter merged (the output differs from the folder's own), verify ok.

Everything runs in ONE spawned world of 4 gloo ranks (the start-up is most of the cost).

Tolerance 1e-5 relative to the reference's largest value (fused vs unfused LoRA differ by the
order of one rank-3 matmul's additions, ~1e-7 relative).
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("diffusers")
pytest.importorskip("peft")

from sporch.runtime.testing import run_distributed  # noqa: E402

TOL = 1e-5
RANK = 3
PIPELINES = {"flux": "FluxPipeline", "wan": "WanPipeline", "qwen-image": "QwenImagePipeline"}
CLASSES = {"flux": "FluxTransformer2DModel", "wan": "WanTransformer3DModel", "qwen-image": "QwenImageTransformer2DModel"}

# name, family, layout, grid, text tokens, adapters [(file key, scale)]
LORA_CASES = [
    ("flux-peft-two-U2R2", "flux", dict(ulysses=2, ring=2), (1, 3, 5), 7, [("flux_attn", 0.7), ("flux_ff", 1.3)]),
    ("flux-kohya-U4", "flux", dict(ulysses=4), (1, 3, 3), 5, [("flux_kohya", 0.8)]),
    ("wan-peft-R4", "wan", dict(ring=4), (1, 3, 3), 5, [("wan_attn", 0.9)]),
    ("qwen-peft-cfg2U2", "qwen-image", dict(cfg=2, ulysses=2), (1, 3, 3), 5, [("qwen_all", 1.0)]),
]
# name, family, layout, grid, text tokens, batch, timestep scale, threshold (between the changes seen, so
# some steps are skipped and some computed)
CACHE_CASES = [
    ("flux-fbcache-U2R2", "flux", dict(ulysses=2, ring=2), (1, 3, 5), 7, 1, 1.0, 0.5),
    ("wan-fbcache-cfg2U2", "wan", dict(cfg=2, ulysses=2), (1, 3, 3), 5, 2, 1000.0, 0.35),
]
CACHE_STEPS = 8
# name, family, layout, grid, text tokens
COMPILE_CASES = [
    ("wan-compiled-U2R2", "wan", dict(ulysses=2, ring=2), (1, 3, 3), 5),  # Wan splits at blocks.0: a hook on a compiled block
    ("flux-compiled-U4", "flux", dict(ulysses=4), (1, 3, 5), 7),
]


def _linears(model, keep):
    import torch

    return {n: m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and keep(n)}


def peft_file(path, model, keep, seed, alpha=None):
    """diffusers/PEFT keys ``transformer.<module>.lora_A/B.weight`` on every kept Linear; with
    ``alpha``, the adapter's lora_alpha in the header metadata as diffusers' save_lora_weights writes it."""
    import torch
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(seed)
    sd = {}
    for name, lin in _linears(model, keep).items():
        sd[f"transformer.{name}.lora_A.weight"] = torch.randn(RANK, lin.in_features, generator=g) * 0.4
        sd[f"transformer.{name}.lora_B.weight"] = torch.randn(lin.out_features, RANK, generator=g) * 0.4
    meta = None if alpha is None else {"lora_adapter_metadata": json.dumps(
        {"transformer.r": RANK, "transformer.lora_alpha": alpha,
         "transformer.target_modules": sorted({k.split(".lora_")[0].split(".", 1)[1] for k in sd})})}
    save_file(sd, str(path), metadata=meta)
    return str(path)


def kohya_flux_file(path, config, seed, alpha=6.0):
    """sd-scripts' Flux names (the original release's): fused qkv, projections, MLPs of the double
    blocks, the single blocks' linear2 (diffusers' converter assumes the 3072-wide linear1)."""
    import torch
    from safetensors.torch import save_file

    d = config["num_attention_heads"] * config["attention_head_dim"]
    ffn = 4 * d
    mods = {}
    for i in range(config["num_layers"]):
        for s in ("img", "txt"):
            mods[f"double_blocks.{i}.{s}_attn.qkv"] = (3 * d, d)
            mods[f"double_blocks.{i}.{s}_attn.proj"] = (d, d)
            mods[f"double_blocks.{i}.{s}_mlp.0"], mods[f"double_blocks.{i}.{s}_mlp.2"] = (ffn, d), (d, ffn)
    for i in range(config["num_single_layers"]):
        mods[f"single_blocks.{i}.linear2"] = (d, d + ffn)
    g = torch.Generator().manual_seed(seed)
    sd = {}
    for name, (out, inp) in mods.items():
        key = "lora_unet_" + name.replace(".", "_")
        sd[key + ".lora_down.weight"] = torch.randn(RANK, inp, generator=g) * 0.4
        sd[key + ".lora_up.weight"] = torch.randn(out, RANK, generator=g) * 0.4
        sd[key + ".alpha"] = torch.tensor(alpha)
    save_file(sd, str(path))
    return str(path)


def _tiny(fam):
    from sporch.runtime.models.families import family_module

    return dict(family_module(fam).TINY)


def make_files(root) -> dict:
    """The adapter files of the cases, under ``root``."""
    from sporch.runtime.models.build import random_diffusers

    flux = random_diffusers(CLASSES["flux"], _tiny("flux"), seed=3)
    wan = random_diffusers(CLASSES["wan"], _tiny("wan"), seed=3)
    qwen = random_diffusers(CLASSES["qwen-image"], _tiny("qwen-image"), seed=3)
    return {
        "flux_attn": peft_file(root / "fa.safetensors", flux, lambda n: ".attn." in n, 1, alpha=6.0),
        "flux_ff": peft_file(root / "ff.safetensors", flux, lambda n: ".ff" in n or "proj_out" in n, 2),
        "flux_kohya": kohya_flux_file(root / "fk.safetensors", _tiny("flux"), 3),
        "wan_attn": peft_file(root / "wa.safetensors", wan, lambda n: ".attn" in n or ".ffn." in n, 4, alpha=1.5),
        "qwen_all": peft_file(root / "qa.safetensors", qwen, lambda n: "transformer_blocks" in n, 5),
    }


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return make_files(tmp_path_factory.mktemp("generic-lora"))


def _pipeline_with(fam, transformer):
    """The family's diffusers pipeline around ``transformer`` only (LoRA loading needs no other part)."""
    import inspect

    import diffusers

    cls = getattr(diffusers, PIPELINES[fam])
    parts = {p: None for p in inspect.signature(cls.__init__).parameters if p != "self"}
    return cls(**{**parts, "transformer": transformer})


def _inputs(fam, config, grid, text, batch=1):
    import torch

    from sporch.runtime.models.families import family_module

    return family_module(fam).inputs(config, batch=batch, grid=grid, text_len=text,
                                     generator=torch.Generator().manual_seed(7))


def _lora_world(cases, files):
    import torch

    from sporch.orchestrator.models.families import require_family
    from sporch.runtime.models.runner import ShardedTransformer
    from sporch.runtime.models.build import random_diffusers
    from sporch.runtime.models.families import family_module
    from sporch.runtime.models.lora import apply_lora
    from sporch.runtime.parallel import ParallelContext

    out = {}
    for name, fam, layout, grid, text, adapters in cases:
        ctx = ParallelContext.from_layout(**layout)
        config, cls = _tiny(fam), CLASSES[fam]
        inputs = _inputs(fam, config, grid, text, batch=2 if layout.get("cfg") else 1)
        ref_model = random_diffusers(cls, config, seed=3)
        with torch.no_grad():
            plain = ref_model(**inputs)[0]
        pipe = _pipeline_with(fam, ref_model)
        for i, (key, _) in enumerate(adapters):
            pipe.load_lora_weights(files[key], adapter_name=f"ref{i}")
        pipe.set_adapters([f"ref{i}" for i in range(len(adapters))], adapter_weights=[s for _, s in adapters])
        with torch.no_grad():
            ref = ref_model(**inputs)[0]
        ours = random_diffusers(cls, config, seed=3)
        changed = apply_lora(ours, [{"path": files[k], "scale": s} for k, s in adapters], require_family(cls).lora_loader)
        got = ShardedTransformer(ours, ctx, batched=family_module(fam).BATCHED).forward(**inputs)
        scale = float(ref.abs().max())
        out[name] = {"rel_err": float((got - ref).abs().max()) / scale, "lora_effect": float((ref - plain).abs().max()) / scale,
                     "changed": changed, "peft_left": sum("lora" in n for n, _ in ours.named_modules())}
        ctx.close()
    return out


def _compile_world(cases):
    import torch
    import torch._dynamo

    from sporch.runtime.compile import compile_blocks
    from sporch.runtime.models.runner import ShardedTransformer
    from sporch.runtime.models.build import random_diffusers
    from sporch.runtime.models.families import family_module
    from sporch.runtime.parallel import ParallelContext

    out = {}
    for name, fam, layout, grid, text in cases:
        ctx = ParallelContext.from_layout(**layout)
        config = _tiny(fam)
        inputs = _inputs(fam, config, grid, text)
        model = random_diffusers(CLASSES[fam], config, seed=3)
        with torch.no_grad():
            ref = model(**inputs)[0]
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        info = compile_blocks(model, backend="eager")
        runner = ShardedTransformer(model, ctx, batched=family_module(fam).BATCHED)
        got = runner.forward(**inputs)
        again = runner.forward(**inputs)  # the compiled code, not the first trace
        scale = float(ref.abs().max())
        out[name] = {"rel_err": max(float((g - ref).abs().max()) for g in (got, again)) / scale,
                     "blocks": info.blocks, "graphs": int(torch._dynamo.utils.counters["stats"]["unique_graphs"])}
        ctx.close()
    return out


def _cache_world(cases):
    """An Euler loop of CACHE_STEPS steps: our fbcache on the sharded model vs diffusers' First Block
    Cache on the unsharded one, same threshold; the reference's last step forced computed (sporch's
    step policy: the last step always runs) by lifting its threshold for that step."""
    import torch
    from diffusers.hooks import FirstBlockCacheConfig, HookRegistry, apply_first_block_cache

    from sporch.orchestrator.contract.sections import CacheSection
    from sporch.runtime.models.runner import ShardedTransformer
    from sporch.runtime.models.build import random_diffusers
    from sporch.runtime.models.cache.apply import apply_step_cache
    from sporch.runtime.models.families import family_module
    from sporch.runtime.parallel import ParallelContext

    out = {}
    sigmas = torch.linspace(1.0, 0.0, CACHE_STEPS + 1)
    for name, fam, layout, grid, text, batch, tscale, threshold in cases:
        ctx = ParallelContext.from_layout(**layout)
        config = {**_tiny(fam), "out_channels": _tiny(fam)["in_channels"]}  # a velocity of the latent's width
        inputs = _inputs(fam, config, grid, text, batch)

        def loop(model, forward, before_step=lambda i: None):
            x, pattern = inputs["hidden_states"], []
            with torch.no_grad(), model.cache_context("denoise"):
                for i in range(CACHE_STEPS):
                    before_step(i)
                    t = torch.full((batch,), tscale * float(sigmas[i]))
                    v = forward(**{**inputs, "hidden_states": x, "timestep": t})
                    pattern.append(v[1])
                    x = x + (sigmas[i + 1] - sigmas[i]) * v[0]
            return x, pattern

        ref_model = random_diffusers(CLASSES[fam], config, seed=3)
        apply_first_block_cache(ref_model, FirstBlockCacheConfig(threshold=threshold))
        head = next(b[0] for n, b in ref_model.named_children() if n in ("transformer_blocks", "blocks"))
        theirs = HookRegistry.check_if_exists_or_initialize(head).get_hook("fbc_leader_block_hook")

        def ref_forward(**kw):
            v = ref_model(**kw)[0]
            return v, theirs.state_manager.get_state().should_compute

        def last_step_computed(i):
            if i == CACHE_STEPS - 1:
                theirs.threshold = -1.0

        ref, ref_pattern = loop(ref_model, ref_forward, last_step_computed)
        model = random_diffusers(CLASSES[fam], config, seed=3)
        hook = apply_step_cache(model, CacheSection(method="fbcache", threshold=threshold), ctx, num_steps=CACHE_STEPS)
        runner = ShardedTransformer(model, ctx, batched=family_module(fam).BATCHED)
        got, _ = loop(model, lambda **kw: (runner.forward(**kw), None))
        rec = hook.records["denoise"].record()
        out[name] = {"rel_err": float((got - ref).abs().max()) / float(ref.abs().max()),
                     "ref_computed": [i for i, c in enumerate(ref_pattern) if c],
                     "computed": rec["computed"], "skipped": rec["skipped"], "changes": rec["changes"]}
        ctx.close()
    return out


def _run_generic_world(plan_dict):
    import torch

    from sporch.runtime.models.workload import build_from_plan, inputs_from_plan

    from sporch.orchestrator.contract.plan import Plan
    from sporch.runtime.attention.select import run_choice
    from sporch.runtime.compile import compile_blocks
    from sporch.runtime.models.workload import run_model
    from sporch.runtime.parallel import ParallelContext

    plan = Plan.from_dict(plan_dict)
    ctx = ParallelContext.from_plan(plan)
    res = run_model(plan, ctx, torch.device("cpu"),
                      compile_model=lambda m: compile_blocks(m, backend="eager"))
    if ctx.rank == 0:  # the adapter's effect on the unsharded model: the same on every rank, measured once
        model, config = build_from_plan(plan, torch.device("cpu"))  # with the adapter merged
        inputs = inputs_from_plan(plan, config, torch.device("cpu"))
        from sporch.runtime.models.build import load_diffusers

        with torch.no_grad():
            res["lora_effect"] = float((model(**inputs)[0] - load_diffusers(plan.model.weights)(**inputs)[0]).abs().max())
    res["expected_kernel"] = run_choice(plan.workload.attention_precision, "cpu", plan.workload.dtype,
                                        ring=plan.layout.ring).kernel
    ctx.close()
    return res


def _world(files, plan_dict):
    return {"lora": _lora_world(LORA_CASES, files), "compile": _compile_world(COMPILE_CASES),
            "cache": _cache_world(CACHE_CASES),
            "run_model": _run_generic_world(plan_dict)}


def make_plan_dict(root, files) -> dict:
    """A tiny Qwen-Image folder under ``root`` with one adapter and workload.compile: true, planned."""
    from sporch.orchestrator.config.cluster import find_cluster
    from sporch.orchestrator.config.job import job_from_dict
    from sporch.orchestrator.plan.planner import make_plan
    from sporch.runtime.models.build import random_diffusers

    random_diffusers(CLASSES["qwen-image"], _tiny("qwen-image"), seed=1).save_pretrained(str(root / "transformer"))
    job = {"name": "g", "model": {"weights": str(root), "text_len": 5,
                                  "lora": [{"path": files["qwen_all"], "scale": 0.5}]},
           "parallel": {"ulysses": 4},
           "workload": {"kind": "verify", "frames": 1, "height": 48, "width": 80, "steps": 1, "dtype": "float32",
                        "guidance_scale": 1.0, "compile": True}}
    plan = make_plan(find_cluster("local"), job_from_dict(job, "<test>"))
    assert plan.model.diffusers_class == CLASSES["qwen-image"] and plan.model.lora[0]["scale"] == 0.5
    return plan.to_dict()


@pytest.fixture(scope="module")
def plan_dict(tmp_path_factory, files):
    return make_plan_dict(tmp_path_factory.mktemp("generic-folder"), files)


@pytest.fixture(scope="module")
def world(files, plan_dict):
    return run_distributed(_world, 4, files, plan_dict, timeout=600)


@pytest.fixture(scope="module")
def lora_results(world):
    return [w["lora"] for w in world]


@pytest.fixture(scope="module")
def compile_results(world):
    return [w["compile"] for w in world]


@pytest.mark.parametrize("case", LORA_CASES, ids=lambda c: c[0])
def test_lora_sharded_equals_unsharded_diffusers_with_the_adapters(lora_results, case):
    name = case[0]
    for rank, res in enumerate(lora_results):
        r = res[name]
        assert r["lora_effect"] > 1000 * TOL, f"{name}: the adapters barely move the output; the test proves nothing"
        assert r["changed"] > 0 and r["peft_left"] == 0, r  # fused into the base weights, PEFT layers gone
        assert r["rel_err"] <= TOL, f"{name} rank {rank}: relative error {r['rel_err']:.3g} > {TOL}"


@pytest.mark.parametrize("case", COMPILE_CASES, ids=lambda c: c[0])
def test_compiled_blocks_sharded_equal_the_eager_unsharded_model(compile_results, case):
    name = case[0]
    for rank, res in enumerate(compile_results):
        r = res[name]
        assert r["blocks"] >= 2 and r["graphs"] >= 1, f"{name}: nothing was compiled ({r})"
        assert r["rel_err"] <= TOL, f"{name} rank {rank}: relative error {r['rel_err']:.3g} > {TOL}"


@pytest.mark.parametrize("case", CACHE_CASES, ids=lambda c: c[0])
def test_fbcache_sharded_skips_the_steps_unsharded_diffusers_skips(world, case):
    """The decision reduced over the replica's ranks: the same steps computed on every rank as
    diffusers' First Block Cache computes unsharded, and the same latents after the loop."""
    name = case[0]
    for rank, w in enumerate(world):
        r = w["cache"][name]
        assert r["skipped"] and len(r["ref_computed"]) >= 2, f"{name}: no step skipped or computed, proves nothing: {r}"
        assert r["computed"] == r["ref_computed"], f"{name} rank {rank}: computed {r['computed']}, diffusers {r['ref_computed']}"
        assert r["rel_err"] <= TOL, f"{name} rank {rank}: relative error {r['rel_err']:.3g} > {TOL}"


def test_lora_with_modules_the_model_lacks_is_refused(files):
    """A Flux adapter on a Wan model: one line naming what is missing (diffusers would only warn)."""
    from sporch.runtime.models.build import random_diffusers
    from sporch.runtime.models.lora import LoraError, apply_lora

    wan = random_diffusers(CLASSES["wan"], _tiny("wan"), seed=3)
    with pytest.raises(LoraError, match=r"not in WanTransformer3DModel|not found in the base model"):
        apply_lora(wan, [{"path": files["flux_attn"], "scale": 1.0}], "WanLoraLoaderMixin")


def test_run_generic_applies_the_plans_kernel_compile_and_lora(world):
    """run_model of the planned tiny Qwen-Image folder (one adapter, workload.compile: true, U4 on
    15 tokens): the kernel recorded is the plan's rule's, the blocks compiled, the adapter merged,
    the compiled sharded forward == the eager unsharded one."""
    for rank, w in enumerate(world):
        r = w["run_model"]
        assert r["ok"] and r["max_rel_err"] <= TOL, (rank, r)
        assert r["attention_kernel"] == r["expected_kernel"], r
        assert r["compile"]["enabled"] and r["compile"]["blocks"] == 2, r["compile"]
        assert r["lora_adapters"] == 1 and world[0]["run_model"]["lora_effect"] > 1000 * TOL, r  # rank 0 measures it
