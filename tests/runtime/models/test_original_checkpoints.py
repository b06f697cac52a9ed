"""Original releases' checkpoints on the one model path (issue 47 item 2): Wan-Video's ``WanModel``
format and Black Forest Labs' Flux format load into the diffusers class through diffusers' own
single-file converter (runtime/models/original.py: run on row labels, then each rank's rows
copied from the memory-mapped files), unsharded and sharded (FSDP2 rows) over 2 and 4 gloo ranks.

Each checkpoint is written by the test from a random diffusers model's state dict converted back to
the release's names (tests/runtime/models/published.py, a mapping written independently of sporch
and of diffusers' converter): a Wan T2V in 2 shards with an index and its config.json, a Wan I2V
(CLIP image input) in ComfyUI's ``model.diffusion_model.`` repackaging, and a Flux in one
``flux1-*.safetensors`` without config (its width 64: diffusers' converter cuts ``linear1`` at
Flux.1's 3072, so sporch pads the labels). Every parameter must equal the diffusers folder's of the
same weights bit for bit, so the outputs are equal too (checked: max abs difference 0). Everything
sharded runs in ONE world of 4 ranks (dp 2 x U2: ``sequence`` shards over 2 ranks, ``world`` over 4).
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("diffusers")

import torch  # noqa: E402

from sporch.orchestrator.models.checkpoint_files import CheckpointError  # noqa: E402
from sporch.runtime.testing import run_distributed  # noqa: E402
from tests.runtime.models.published import (FLUX_TINY, WAN_TINY, WAN_TINY_I2V, WAN_TO_ORIGINAL,  # noqa: E402
                                           diffusers_flux, diffusers_wan, flux_to_original, original_wan_config,
                                           to_original, write_safetensors)

#: name -> (family, diffusers config)
CASES = {"wan-t2v": ("wan", WAN_TINY), "wan-i2v": ("wan", WAN_TINY_I2V), "flux-dev": ("flux", FLUX_TINY)}
COMFY = "model.diffusion_model."


def wan_config(cfg: dict) -> dict:
    """The release's config.json; text_dim stated (the releases rely on WanModel's 4096)."""
    return {**original_wan_config(cfg), "text_dim": cfg["text_dim"]}


def write_cases(root) -> dict:
    """{case: {"diffusers": folder, "original": path, "config": diffusers config}} under ``root``."""
    from safetensors.torch import save_file

    out = {}
    for i, (name, (family, cfg)) in enumerate(CASES.items()):
        model = (diffusers_wan if family == "wan" else diffusers_flux)(cfg, 10 + i)
        model.save_pretrained(str(root / name / "diffusers"))
        if name == "wan-t2v":
            original = write_safetensors(to_original(model.state_dict(), WAN_TO_ORIGINAL), root / name / "original",
                                         shards=2, config=wan_config(cfg))
        elif name == "wan-i2v":
            state = {COMFY + k: v for k, v in to_original(model.state_dict(), WAN_TO_ORIGINAL).items()}
            original = write_safetensors(state, root / name / "original", config=wan_config(cfg))
        else:
            (root / name / "bfl").mkdir(parents=True)
            original = root / name / "bfl" / "flux1-tiny.safetensors"
            save_file(flux_to_original(model.state_dict(), cfg), str(original))
        out[name] = {"diffusers": str(root / name / "diffusers"), "original": str(original),
                     "config": dict(model.config)}
    return out


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    return write_cases(tmp_path_factory.mktemp("original"))


def _inputs(family: str, config: dict, seed: int = 3) -> dict:
    from sporch.runtime.models.families import family_module

    kw = family_module(family).inputs(config, batch=1, grid=(2, 2, 3) if family == "wan" else (1, 2, 3), text_len=5,
                                      generator=torch.Generator().manual_seed(seed))
    if config.get("image_dim"):  # Wan I2V: the CLIP image tokens
        kw["encoder_hidden_states_image"] = torch.randn(1, 4, config["image_dim"], generator=torch.Generator().manual_seed(1))
    return kw


def _plain(config: dict) -> dict:
    return json.loads(json.dumps(config))  # tuples as lists


def _known(family: str, case: dict) -> dict | None:
    """What the plan would record beside a Flux file (its RoPE axes are not in the file)."""
    return case["config"] if family == "flux" else None


@pytest.mark.parametrize("name", list(CASES))
def test_an_original_checkpoint_equals_the_diffusers_folder(cases, name):
    from sporch.runtime.models.build import load_diffusers, read_config

    family, _ = CASES[name]
    case = cases[name]
    ref = load_diffusers(case["diffusers"])
    got = load_diffusers(case["original"], config=_known(family, case))
    assert type(got) is type(ref)
    want = _plain({k: v for k, v in ref.config.items() if not k.startswith("_")})
    assert _plain({k: got.config[k] for k in want}) == want
    mine, theirs = got.state_dict(), ref.state_dict()
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[k], theirs[k]) for k in theirs), [k for k in theirs if not torch.equal(mine[k], theirs[k])]
    inputs = _inputs(family, case["config"])
    with torch.no_grad():
        assert float((got(**inputs)[0] - ref(**inputs)[0]).abs().max()) == 0.0
    if family == "wan":  # the planner's view: the release's config.json mapped, nothing loaded
        assert _plain({k: read_config(case["original"])[k] for k in want}) == want


def _sharded_world(cases):
    from torch.distributed.tensor import DTensor

    from sporch.runtime.models.build import load_diffusers
    from sporch.runtime.models.placed import load_sharded
    from sporch.runtime.parallel import ParallelContext

    ctx = ParallelContext.from_layout(dp=2, ulysses=2)
    out = {}
    for name, case in cases.items():
        family, _ = CASES[name]
        ref = load_diffusers(case["diffusers"])
        inputs = _inputs(family, case["config"])
        with torch.no_grad():
            want = ref(**inputs)[0]
        for mode, ranks in (("sequence", 2), ("world", 4)):
            model = load_sharded(case["original"], ctx, mode, config=_known(family, case))
            theirs = ref.state_dict()
            local = sum(p.to_local().numel() for p in model.parameters() if isinstance(p, DTensor))
            params = {k: (v.full_tensor() if isinstance(v, DTensor) else v) for k, v in model.state_dict().items()}
            with torch.no_grad():
                got = model(**inputs)[0]
            out[f"{name}-{mode}"] = {
                "ranks": ranks, "unequal": [k for k in theirs if not torch.equal(params[k], theirs[k])],
                "dtensors": sum(isinstance(p, DTensor) for p in model.parameters()),
                "parameters": sum(1 for _ in model.parameters()), "local_fraction": local / ref.num_parameters(),
                "max_abs_err": float((got - want).abs().max())}
    ctx.close()
    return out


def test_original_checkpoints_load_sharded_over_2_and_4_ranks(cases):
    results = run_distributed(_sharded_world, 4, cases, timeout=300)
    for rank, res in enumerate(results):
        for key, r in res.items():
            assert r["dtensors"] == r["parameters"] and not r["unequal"], (rank, key, r["unequal"][:3])
            assert r["max_abs_err"] == 0.0, (rank, key, r)
            # each rank holds about 1/ranks of the parameters (chunked rows: a little more on the first)
            assert r["local_fraction"] < 1.5 / r["ranks"], (rank, key, r)


# -- strict: every problem one line naming the tensor -----------------------------------------------

def _damaged(cases, tmp_path, change):
    """The Wan T2V original checkpoint with ``change(state) -> state`` applied, as one file."""
    from safetensors.torch import load_file

    src = cases["wan-t2v"]["original"]
    from pathlib import Path

    state = {}
    for f in sorted(Path(src).glob("*.safetensors")):
        state.update(load_file(str(f)))
    return write_safetensors(change(state), tmp_path / "damaged", config=wan_config(WAN_TINY))


@pytest.mark.parametrize("change,message", [
    (lambda s: {k: v for k, v in s.items() if k != "blocks.1.ffn.2.weight"},
     r"lacks tensor 'blocks\.1\.ffn\.net\.2\.weight' of WanTransformer3DModel"),
    (lambda s: {**s, "blocks.0.extra.weight": torch.zeros(2)}, r"has unexpected tensor 'blocks\.0\.extra\.weight'"),
    (lambda s: {**s, "blocks.0.ffn.0.weight": torch.zeros(40, 64)},
     r"blocks\.0\.ffn\.net\.0\.proj\.weight of WanTransformer3DModel needs \[48, 64\], but the checkpoint gives \[40, 64\]"),
    (lambda s: {**s, "blocks.1.cross_attn.k.weight": s["blocks.1.cross_attn.k.weight"].index_fill(0, torch.tensor([3]), float("nan"))},
     r"tensor 'blocks\.1\.cross_attn\.k\.weight' \(blocks\.1\.attn2\.to_k\.weight\): 64 of 4096 values are NaN or inf; the "
     r"checkpoint is corrupt"),
])
def test_a_damaged_original_checkpoint_is_one_line(cases, tmp_path, change, message):
    from sporch.runtime.models.build import load_diffusers

    with pytest.raises(CheckpointError, match=message) as info:
        load_diffusers(_damaged(cases, tmp_path, change))
    assert "\n" not in str(info.value)


def test_an_overflowing_weight_asks_for_a_wider_dtype(cases, tmp_path):
    from sporch.runtime.models.build import load_diffusers

    def big(s):
        return {**s, "head.head.weight": s["head.head.weight"] * 1e6}
    with pytest.raises(CheckpointError, match=r"tensor 'head\.head\.weight' \(proj_out\.weight\) overflows float16 .*"
                                              r"run in a wider workload\.dtype"):
        load_diffusers(_damaged(cases, tmp_path, big), dtype=torch.float16)


def test_a_flux_file_without_its_rope_axes_is_one_line(cases):
    from sporch.runtime.models.build import load_diffusers

    with pytest.raises(CheckpointError, match=r"flux1-tiny\.safetensors: the Black Forest Labs Flux checkpoint has "
                                              r"16-wide heads .* name the model's preset"):
        load_diffusers(cases["flux-dev"]["original"])


def test_a_config_json_of_another_model_type_is_refused(cases, tmp_path):
    from sporch.runtime.models.build import read_config

    folder = _damaged(cases, tmp_path, lambda s: s)
    (folder / "config.json").write_text(json.dumps({**wan_config(WAN_TINY), "model_type": "vace"}))
    with pytest.raises(CheckpointError, match=r"model_type: 'vace' is not loadable"):
        read_config(folder)
