"""LoRA formats on the one model path (issue 47 item 2): every adapter goes through the family's
diffusers loader mixin (runtime/models/lora.py, lora_formats.py), sporch handing it the
adapter in the key form diffusers' converter reads for the family (models/lora_names.py) with
per-module alphas folded in, and adding LightX2V's whole-tensor differences, which diffusers drops.

Each adapter is written by the test in its published layout, for a tiny random Wan I2V (so the image
input's modules are there) or Flux, naming the modules as the original release does (the test's
own name map: tests/runtime/models/published.py's regexes for Wan; Flux's fused rows by hand), and
the merged weights are checked parameter by parameter against the arithmetic, computed here:
``W += scale x alpha / rank x up @ down`` (Flux's q|k|v and final-modulation halves cut and swapped
as the release stores them), ``P += scale x delta``, every other parameter unchanged; then the same
adapters merged into FSDP2 row shards on 2 gloo ranks equal the unsharded merge. The planner's
torch-free checks refuse in one line what the model cannot take.

Formats: musubi-tuner's Wan (underscored original names, alpha != rank, a partial set: diffusers'
musubi converter needs every module of every block), LightX2V's Wan step-distill adapter (dotted
original names under ``diffusion_model.``, ``.diff`` / ``.diff_b`` / ``.diff_m``), a PEFT file in
Wan's original names without prefix, sd-scripts' Flux (fused qkv, the final layer with its alpha,
which diffusers' converter drops), PEFT in BFL's names, and ai-toolkit's underscored diffusers names.
"""

from __future__ import annotations

import re

import pytest

pytest.importorskip("diffusers")
pytest.importorskip("peft")

import torch  # noqa: E402

from sporch.runtime.testing import run_distributed  # noqa: E402
from tests.runtime.models.published import FLUX_TINY, WAN_TINY_I2V, WAN_TO_ORIGINAL, randomize  # noqa: E402

TOL = 1e-5
RANK = 3
SCALE = 0.7
CLASSES = {"wan": "WanTransformer3DModel", "flux": "FluxTransformer2DModel"}
LOADERS = {"wan": "WanLoraLoaderMixin", "flux": "FluxLoraLoaderMixin"}
CONFIGS = {"wan": WAN_TINY_I2V, "flux": FLUX_TINY}


def base_model(family: str):
    import diffusers

    return randomize(getattr(diffusers, CLASSES[family])(**CONFIGS[family]), 4).requires_grad_(False)


def wan_original(name: str) -> str:
    """A diffusers Wan module name in WanModel's names (the test's own regexes)."""
    out = name + "."
    for pat, rep in WAN_TO_ORIGINAL:
        out = re.sub(pat, rep, out)
    return out[:-1]


class Writer:
    """Draws LoRA pairs and differences and records what each parameter must become."""

    def __init__(self, model, seed: int):
        self.g = torch.Generator().manual_seed(seed)
        self.params = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.tensors: dict[str, torch.Tensor] = {}
        self.delta = {k: torch.zeros_like(v) for k, v in self.params.items()}

    def pair(self, out: int, inp: int):
        return torch.randn(RANK, inp, generator=self.g) * 0.4, torch.randn(out, RANK, generator=self.g) * 0.4

    def add(self, param: str, update: torch.Tensor) -> None:
        self.delta[param] += SCALE * update

    def expected(self) -> dict[str, torch.Tensor]:
        return {k: self.params[k] + self.delta[k] for k in self.params}

    def save(self, path) -> str:
        from safetensors.torch import save_file

        save_file(self.tensors, str(path))
        return str(path)


def _linear(model, name) -> torch.nn.Linear:
    return dict(model.named_modules())[name]


def musubi_wan(model, path) -> tuple[str, dict]:
    """musubi-tuner: lora_unet_<original, underscored>; blocks 0 and 1 with different modules (a set
    diffusers' musubi converter cannot read), the image keys, root modules; alphas != rank."""
    w = Writer(model, 1)
    modules = ["blocks.0.attn1.to_q", "blocks.0.attn2.add_k_proj", "blocks.1.attn2.add_v_proj", "blocks.1.ffn.net.0.proj",
               "blocks.1.attn2.to_out.0",
               "condition_embedder.time_embedder.linear_1", "condition_embedder.image_embedder.ff.net.2", "proj_out"]
    for i, name in enumerate(modules):
        lin = _linear(model, name)
        down, up = w.pair(lin.out_features, lin.in_features)
        key = "lora_unet_" + wan_original(name).replace(".", "_")
        alpha = 1.5 + i
        w.tensors.update({key + ".lora_down.weight": down, key + ".lora_up.weight": up, key + ".alpha": torch.tensor(alpha)})
        w.add(name + ".weight", alpha / RANK * up @ down)
    return w.save(path), w.expected()


def lightx2v_wan(model, path) -> tuple[str, dict]:
    """LightX2V: diffusion_model.<original>, lora_down/up (alpha on one), diff_b on the adapted linears,
    a norm3 diff, a block's diff_m, the head's diff."""
    w = Writer(model, 2)
    p = "diffusion_model."
    for name, alpha in (("blocks.0.attn1.to_k", 8.0), ("blocks.1.ffn.net.2", None), ("blocks.0.attn2.to_v", None)):
        lin = _linear(model, name)
        down, up = w.pair(lin.out_features, lin.in_features)
        orig = p + wan_original(name)
        w.tensors.update({orig + ".lora_down.weight": down, orig + ".lora_up.weight": up})
        if alpha is not None:
            w.tensors[orig + ".alpha"] = torch.tensor(alpha)
        w.add(name + ".weight", (alpha or RANK) / RANK * up @ down)
        bias = torch.randn(lin.out_features, generator=w.g) * 0.1
        w.tensors[orig + ".diff_b"] = bias
        w.add(name + ".bias", bias)
    for theirs, ours in (("blocks.1.norm3.diff", "blocks.1.norm2.weight"), ("blocks.1.diff_m", "blocks.1.scale_shift_table"),
                         ("head.head.diff", "proj_out.weight")):
        d = torch.randn(w.params[ours].shape, generator=w.g) * 0.1
        w.tensors[p + theirs] = d
        w.add(ours, d)
    return w.save(path), w.expected()


def peft_original_wan(model, path) -> tuple[str, dict]:
    """PEFT keys (lora_A / lora_B) on WanModel's names without a prefix (diffusers reads neither)."""
    w = Writer(model, 3)
    for name in ("blocks.0.attn1.to_v", "blocks.1.attn2.to_q", "condition_embedder.text_embedder.linear_2"):
        lin = _linear(model, name)
        down, up = w.pair(lin.out_features, lin.in_features)
        orig = wan_original(name)
        w.tensors.update({orig + ".lora_A.weight": down, orig + ".lora_B.weight": up})
        w.add(name + ".weight", up @ down)
    return w.save(path), w.expected()


def _fused(w: Writer, model, stem: str, parts: list[str], rows: list[int], alpha: float | None):
    """A fused original module over diffusers' ``parts`` (rows stacked in that order)."""
    lin = _linear(model, parts[0])
    down, up = w.pair(sum(rows), lin.in_features)
    w.tensors.update({stem + ".lora_down.weight": down, stem + ".lora_up.weight": up})
    if alpha is not None:
        w.tensors[stem + ".alpha"] = torch.tensor(alpha)
    at = 0
    for name, n in zip(parts, rows):
        w.add(name + ".weight", (alpha or RANK) / RANK * up[at:at + n] @ down)
        at += n


def kohya_flux(model, path) -> tuple[str, dict]:
    """sd-scripts: lora_unet_<BFL name, underscored>: fused qkv of both streams, a projection, the
    text stream's modulation, a single block's linear2, the guidance input, the final layer (its
    alpha and its (shift, scale) halves)."""
    w = Writer(model, 4)
    d = 64
    t = "transformer_blocks.0."
    _fused(w, model, "lora_unet_double_blocks_0_img_attn_qkv", [t + "attn.to_q", t + "attn.to_k", t + "attn.to_v"], [d] * 3, 6.0)
    _fused(w, model, "lora_unet_double_blocks_0_txt_attn_qkv",
           [t + "attn.add_q_proj", t + "attn.add_k_proj", t + "attn.add_v_proj"], [d] * 3, None)
    for theirs, ours, alpha in (("double_blocks_0_img_attn_proj", t + "attn.to_out.0", 2.0),
                                ("double_blocks_0_txt_mod_lin", t + "norm1_context.linear", 4.5),
                                ("single_blocks_1_linear2", "single_transformer_blocks.1.proj_out", 1.0),
                                ("guidance_in_out_layer", "time_text_embed.guidance_embedder.linear_2", 9.0)):
        _fused(w, model, "lora_unet_" + theirs, [ours], [_linear(model, ours).out_features], alpha)
    # the final modulation: BFL stores (shift, scale), diffusers (scale, shift)
    lin = _linear(model, "norm_out.linear")
    down, up = w.pair(lin.out_features, lin.in_features)
    stem = "lora_unet_final_layer_adaLN_modulation_1"
    w.tensors.update({stem + ".lora_down.weight": down, stem + ".lora_up.weight": up, stem + ".alpha": torch.tensor(5.0)})
    shift, scale = (up @ down).chunk(2)
    w.add("norm_out.linear.weight", 5.0 / RANK * torch.cat([scale, shift]))
    return w.save(path), w.expected()


def peft_bfl_flux(model, path) -> tuple[str, dict]:
    """PEFT keys on BFL's names under ``diffusion_model.`` (a fused qkv and a single block's modulation)."""
    w = Writer(model, 5)
    t = "transformer_blocks.0."
    _fused(w, model, "diffusion_model.double_blocks.0.txt_attn.qkv",
           [t + "attn.add_q_proj", t + "attn.add_k_proj", t + "attn.add_v_proj"], [64] * 3, None)
    _fused(w, model, "diffusion_model.single_blocks.0.modulation.lin", ["single_transformer_blocks.0.norm.linear"],
           [_linear(model, "single_transformer_blocks.0.norm.linear").out_features], None)
    w.tensors = {k.replace("lora_down", "lora_A").replace("lora_up", "lora_B"): v for k, v in w.tensors.items()}
    return w.save(path), w.expected()


def ai_toolkit_flux(model, path) -> tuple[str, dict]:
    """lora_transformer_<diffusers name, underscored>, no alphas (diffusers' converter needs them)."""
    w = Writer(model, 6)
    for name in ("single_transformer_blocks.0.proj_mlp", "transformer_blocks.0.ff.net.2", "x_embedder"):
        _fused(w, model, "lora_transformer_" + name.replace(".", "_"), [name], [_linear(model, name).out_features], None)
    return w.save(path), w.expected()


WRITERS = {"wan-musubi": musubi_wan, "wan-lightx2v": lightx2v_wan, "wan-peft-original": peft_original_wan,
           "flux-kohya": kohya_flux, "flux-peft-bfl": peft_bfl_flux, "flux-ai-toolkit": ai_toolkit_flux}


@pytest.fixture(scope="module")
def adapters(tmp_path_factory):
    root = tmp_path_factory.mktemp("lora-formats")
    out = {}
    for name, write in WRITERS.items():
        out[name] = write(base_model(name.split("-")[0]), root / f"{name}.safetensors")
    return out


def _errors(got: dict, want: dict) -> dict[str, float]:
    return {k: float((got[k].float() - want[k]).abs().max()) for k in want}


@pytest.mark.parametrize("name", list(WRITERS))
def test_an_adapter_merges_to_the_arithmetic(adapters, name):
    from sporch.runtime.models.lora import apply_lora

    family = name.split("-")[0]
    path, want = adapters[name]
    model = base_model(family)
    changed = apply_lora(model, [{"path": path, "scale": SCALE}], LOADERS[family])
    errors = _errors(model.state_dict(), want)
    assert max(errors.values()) <= TOL, sorted(errors.items(), key=lambda kv: -kv[1])[:3]
    moved = [k for k in want if not torch.equal(want[k], base_model(family).state_dict()[k])]
    assert changed >= 3 and len(moved) >= 3, (changed, moved)  # the adapter did something to check


def _sharded_world(adapters):
    from torch.distributed.tensor import DTensor

    from sporch.runtime.models.placed import build_transformer
    from sporch.runtime.parallel import ParallelContext

    ctx = ParallelContext.from_layout(ulysses=2)
    out = {}
    for name, (path, want) in adapters.items():
        family = name.split("-")[0]
        lora = [{"path": path, "scale": SCALE}]
        kw = dict(weights=None, class_name=CLASSES[family], config=CONFIGS[family], seed=9, lora=lora)
        whole = build_transformer(ctx=None, **kw).state_dict()
        sharded = build_transformer(ctx=ctx, shard_weights="world", **kw)
        params = {k: (v.full_tensor() if isinstance(v, DTensor) else v) for k, v in sharded.state_dict().items()}
        plain = build_transformer(ctx=None, **{**kw, "lora": None}).state_dict()
        out[name] = {"max_abs_err": max(float((params[k] - whole[k]).abs().max()) for k in whole),
                     "moved": sum(not torch.equal(whole[k], plain[k]) for k in whole),
                     "dtensors": sum(isinstance(p, DTensor) for p in sharded.parameters())}
    ctx.close()
    return out


def test_adapters_merge_into_row_shards_as_unsharded(adapters):
    for rank, res in enumerate(run_distributed(_sharded_world, 2, adapters, timeout=300)):
        for name, r in res.items():
            assert r["dtensors"] > 0 and r["moved"] >= 3, (rank, name, r)
            assert r["max_abs_err"] <= TOL, (rank, name, r)


def test_the_class_linears_are_the_family_tables(tmp_path):
    """models/lora_names.linear_modules (torch-free, what the planner checks adapters against) lists
    exactly the diffusers class's nn.Linear modules, with and without the optional inputs."""
    import diffusers
    from accelerate import init_empty_weights

    from sporch.orchestrator.models.lora_names import linear_modules

    cases = [("wan", WAN_TINY_I2V), ("wan", {**WAN_TINY_I2V, "image_dim": None, "added_kv_proj_dim": None}),
             ("flux", FLUX_TINY), ("flux", {**FLUX_TINY, "guidance_embeds": False})]
    for family, config in cases:
        with init_empty_weights():
            model = getattr(diffusers, CLASSES[family])(**config)
        linears = {n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
        assert linear_modules(family, config) == linears, (family, linear_modules(family, config) ^ linears)


# -- plan time: one line for what the model cannot take ------------------------------------------------

def _plan_lora(tmp_path, family: str, lora_path: str):
    """``plan.model.lora`` as the planner resolves it (plan/adapters.with_lora) for the generic path's
    model of a tiny diffusers folder of ``family`` (what resolve.py records for it: family, class,
    weights; the shape fields play no part)."""
    from sporch.orchestrator.config.job_spec import LoraSpec
    from sporch.orchestrator.contract.sections import ModelSection
    from sporch.orchestrator.plan.adapters import with_lora

    folder = tmp_path / family
    if not folder.exists():
        import diffusers

        getattr(diffusers, CLASSES[family])(**CONFIGS[family]).save_pretrained(str(folder / "transformer"))
    model = ModelSection(preset=None, attention="cross", depth=2, single_depth=0, hidden=64, num_heads=4, num_kv_heads=4,
                         head_dim=16, ffn_dim=48, mlp_ratio=4.0, patch=[1, 2, 2], in_channels=8, vae_stride=[4, 8, 8],
                         text_len=5, text_dim=24, qk_norm=True, weights=str(folder), family=family,
                         diffusers_class=CLASSES[family])
    return with_lora(model, [LoraSpec(path=lora_path)])


def test_the_planner_takes_every_format(tmp_path, adapters):
    for name, (path, _) in adapters.items():
        model = _plan_lora(tmp_path, name.split("-")[0], path)
        assert model.lora == [{"path": path, "scale": 1.0, "expert": "both"}], name


def _keys(path, keys: dict) -> str:
    from safetensors.torch import save_file

    save_file({k: torch.zeros(s) for k, s in keys.items()}, str(path))
    return str(path)


@pytest.mark.parametrize("family,keys,message", [
    ("wan", {"lora_unet_blocks_5_self_attn_q.lora_down.weight": (2, 64), "lora_unet_blocks_5_self_attn_q.lora_up.weight": (64, 2)},
     r"1 of the LoRA's 1 target modules are not in WanTransformer3DModel as linear modules \(blocks_5_self_attn_q\); "
     r"use an adapter trained for this model"),
    ("wan", {"transformer.transformer_blocks.0.attn.to_q.lora_A.weight": (2, 64),
             "transformer.transformer_blocks.0.attn.to_q.lora_B.weight": (64, 2),
             "transformer.single_transformer_blocks.0.proj_mlp.lora_A.weight": (2, 64),
             "transformer.single_transformer_blocks.0.proj_mlp.lora_B.weight": (256, 2)},
     r"it is a LoRA for Flux\.1 \(2 of 2 modules match its names\)"),
    ("wan", {"lora_unet_blocks_0_cross_attn_k_img.lora_down.weight": (2, 64),
             "lora_unet_blocks_0_cross_attn_k_img.lora_up.weight": (64, 2)},
     r"diffusers' Wan LoRA converter reads cross_attn\.k_img only beside cross_attn\.v_img; use an adapter in "
     r"diffusers' names"),
    ("wan", {"diffusion_model.patch_embedding.lora_down.weight": (2, 64), "diffusion_model.patch_embedding.lora_up.weight": (64, 2)},
     r"not in WanTransformer3DModel as linear modules \(patch_embedding\)"),
    ("wan", {"diffusion_model.blocks.0.self_attn.q.lora_down.weight": (2, 64),
             "diffusion_model.blocks.0.self_attn.q.lora_up.weight": (64, 2), "diffusion_model.blocks.9.diff_m": (1, 6, 64)},
     r"1 of the adapter's 1 difference tensors change no parameter of the Wan2\.1 / Wan2\.2 model \(blocks\.9\.modulation\)"),
    ("flux", {"lora_unet_single_blocks_0_linear1.lora_down.weight": (2, 64),
              "lora_unet_single_blocks_0_linear1.lora_up.weight": (448, 2)},
     r"module 'single_blocks_0_linear1' is the release's fused single_blocks\.\{i\}\.linear1, which diffusers' LoRA "
     r"converter cuts at the width 3072, but the model is 64 wide"),
    ("flux", {"diffusion_model.double_blocks.0.img_attn.qkv.lora_down.weight": (2, 64),
              "diffusion_model.double_blocks.0.img_attn.qkv.lora_up.weight": (192, 2),
              "diffusion_model.double_blocks.0.img_attn.qkv.diff_b": (192,)},
     r"whole-tensor differences .* are merged into Wan models only"),
])
def test_the_planner_refuses_what_the_model_cannot_take(tmp_path, family, keys, message):
    from sporch.orchestrator.errors import SporchError

    path = _keys(tmp_path / "bad.safetensors", keys)
    with pytest.raises(SporchError, match=message) as info:
        _plan_lora(tmp_path, family, path)
    assert "\n" not in str(info.value)
