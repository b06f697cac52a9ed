"""What the families' records say about step caching holds for their classes, one process, CPU:

* every class of every family takes every method it lists (``Family.step_cache``): its blocks are
  in diffusers' ``TransformerBlockRegistry`` (at least two of them), the family's TeaCache probe
  reads its head block, and the cache applies; a family that lists none says why
  (``step_cache_refusal``) and the runtime refuses a cache with that reason;
* the calibration tables are their sources' numbers: Flux's MagCache ratios are diffusers'
  ``FLUX_MAG_RATIOS``, and the TeaCache polynomials keyed by presets, quartics with their
  published leading coefficients;
* the whole-stack hooks skip what diffusers' own MagCache skips and give its output, on a tiny
  Flux loop where sporch's policy and diffusers' coincide (warm-up 1 = ``retention_ratio`` 1/6, no
  cap, the last step computed either way);
* a block class diffusers does not know is refused in one line.
"""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("diffusers")

from sporch.orchestrator.contract.sections import CacheSection  # noqa: E402
from sporch.orchestrator.models.families import FAMILIES  # noqa: E402
from sporch.runtime.models.build import random_diffusers  # noqa: E402
from sporch.runtime.models.cache.apply import apply_step_cache, cache_blocks, registered  # noqa: E402
from sporch.runtime.models.families import family_module  # noqa: E402

STEPS = 6
SECTIONS = {"fbcache": CacheSection(method="fbcache", threshold=0.1),
            "teacache": CacheSection(method="teacache", threshold=0.1),
            "taylorseer": CacheSection(method="taylorseer", interval=2),
            "magcache": CacheSection(method="magcache", threshold=0.0)}


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_every_class_takes_every_cache_its_family_lists(family):
    from diffusers.utils.torch_utils import unwrap_module

    from sporch.runtime.models.cache.probe import make_probe

    if not family.step_cache:  # none listed: the family says why, and the runtime refuses with it
        assert family.step_cache_refusal and "\n" not in family.step_cache_refusal, family.name
        model = random_diffusers(family.classes[0], dict(family_module(family.name).TINY), seed=0)
        with pytest.raises(ValueError, match="is not built for") as info:
            apply_step_cache(model, SECTIONS["fbcache"], None, num_steps=STEPS)
        assert family.step_cache_refusal in str(info.value)
        return
    for cls in family.classes:
        model = random_diffusers(cls, dict(family_module(family.name).TINY), seed=0)
        blocks = cache_blocks(model)
        assert len(blocks) >= 2, (cls, len(blocks))
        metas = [registered(b, cls) for b in blocks]
        assert all(m.return_hidden_states_index is not None for m in metas)
        make_probe(family.teacache_probe, unwrap_module(blocks[0]), metas[0])
        for method in family.step_cache:
            hooks = apply_step_cache(model, SECTIONS[method], None, num_steps=STEPS)
            assert hooks.method == method and len(hooks.heads) == 1
    assert set(family.step_cache) == set(SECTIONS) and family.step_cache_refusal is None


def test_flux_magcache_ratios_are_diffusers():
    import runpy

    # the module's source run afresh (sys.modules untouched): a test that built a class under
    # ``torch.device("meta")`` may have imported the module there, its tensors on meta
    FLUX_MAG_RATIOS = runpy.run_module("diffusers.hooks.mag_cache")["FLUX_MAG_RATIOS"]

    from sporch.orchestrator.models.families import flux, published_magcache_ratios

    assert torch.equal(torch.tensor(flux.FLUX_MAG_RATIOS, dtype=FLUX_MAG_RATIOS.dtype), FLUX_MAG_RATIOS)
    assert published_magcache_ratios("FLUX.1-dev") == flux.FLUX_MAG_RATIOS and published_magcache_ratios("tiny") is None


def test_teacache_coefficients_are_keyed_by_presets_and_are_quartics():
    tables = {preset: coeffs for f in FAMILIES for preset, coeffs in f.teacache_coefficients.items()}
    presets = {p.name for f in FAMILIES for p in f.presets}
    assert tables and set(tables) <= presets, set(tables) - presets  # keyed by preset names sporch has
    assert all(len(c) == 5 and all(isinstance(x, float) for x in c) for c in tables.values())
    # the published TeaCache4Wan2.1 T2V-1.3B polynomial's leading coefficient (ali-vilab/TeaCache)
    assert tables["wan2.1-t2v-1.3b"][0] == -5.21862437e+04


def _flux_loop(model, inputs, sigmas):
    x = inputs["hidden_states"]
    with torch.no_grad():
        for i in range(STEPS):
            with model.cache_context("cond"):
                v = model(**{**inputs, "hidden_states": x, "timestep": torch.full((1,), float(sigmas[i]))})[0]
            x = x + (sigmas[i + 1] - sigmas[i]) * v
    return x


def test_the_stack_hooks_skip_and_add_what_diffusers_magcache_does():
    from diffusers.hooks import MagCacheConfig, apply_mag_cache

    config = {**family_module("flux").TINY, "num_layers": 2, "num_single_layers": 2}
    config["out_channels"] = config["in_channels"]
    inputs = family_module("flux").inputs(config, batch=1, grid=(1, 4, 4), text_len=5,
                                          generator=torch.Generator().manual_seed(1))
    sigmas = torch.linspace(1.0, 0.0, STEPS + 1)
    ratios = [1.0, 0.98, 0.97, 1.02, 0.99, 0.8]  # the last step's error crosses any threshold below: computed
    theirs = random_diffusers("FluxTransformer2DModel", config, seed=3)
    apply_mag_cache(theirs, MagCacheConfig(threshold=0.06, max_skip_steps=STEPS, retention_ratio=1 / STEPS,
                                           num_inference_steps=STEPS, mag_ratios=torch.tensor(ratios)))
    skipped_by_them = []
    head = cache_blocks(theirs)[0]
    head.register_forward_hook(lambda m, a, o: skipped_by_them.append(
        not head._diffusers_hook.get_hook("mag_cache_leader_block_hook").state_manager.get_state().should_compute))
    ref = _flux_loop(theirs, inputs, sigmas)
    ours = random_diffusers("FluxTransformer2DModel", config, seed=3)
    hooks = apply_step_cache(ours, CacheSection(method="magcache", threshold=0.06, ratios=ratios), None,
                             num_steps=STEPS)
    got = _flux_loop(ours, inputs, sigmas)
    rec = hooks.records["cond"]
    assert rec.skipped == [i for i, s in enumerate(skipped_by_them) if s] and rec.skipped, (rec.skipped, skipped_by_them)
    assert STEPS - 1 in rec.computed
    assert float((got - ref).abs().max()) <= 1e-6 * float(ref.abs().max())
    uncached = _flux_loop(random_diffusers("FluxTransformer2DModel", config, seed=3), inputs, sigmas)
    assert float((uncached - ref).abs().max()) > 1e-3 * float(ref.abs().max())  # the skips changed the output


def test_a_block_class_diffusers_does_not_know_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^Toy's blocks \(Linear\) are not in diffusers' TransformerBlockRegistry") as exc:
        registered(torch.nn.Linear(2, 2), "Toy")
    assert "\n" not in str(exc.value)


def test_magcache_measures_a_ratio_per_step_and_starts_at_one():
    model = random_diffusers("FluxTransformer2DModel", {**family_module("flux").TINY, "out_channels": 16}, seed=3)
    inputs = family_module("flux").inputs(dict(model.config), batch=1, grid=(1, 4, 4), text_len=5,
                                          generator=torch.Generator().manual_seed(1))
    hooks = apply_step_cache(model, SECTIONS["magcache"], None, num_steps=STEPS)
    _flux_loop(model, inputs, torch.linspace(1.0, 0.0, STEPS + 1))
    rec = hooks.records["cond"].record()
    assert rec["skipped"] == [] and rec["changes"][0] == 1.0 and len(rec["changes"]) == STEPS
    assert all(c is not None and math.isfinite(c) and c > 0 for c in rec["changes"])
