"""The published models, against diffusers: tiny random configs, checkpoints written in the
publishers' layouts (diffusers ``save_pretrained``; the original releases' names), loaded by
sporch from the folder, compared unsharded and sharded on 4 gloo ranks (<= 1e-5 relative,
float32, CPU). Full-size parameter counts against diffusers' models on the meta device."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("diffusers")

from published import (  # noqa: E402
    TEXT_LEN, WAN_TINY, WAN_TO_ORIGINAL, diffusers_wan, original_wan_config, sporch_wan_dict, to_original,
    write_safetensors,
)
from runtime.model import build_model, count_parameters  # noqa: E402
from runtime.model.verify import compare  # noqa: E402
from runtime.testing import run_distributed  # noqa: E402

TOL = 1e-5
GUIDANCE = 5.0


def _wan_inputs(batch=2, grid=(3, 3, 3), seed=0):
    g = torch.Generator().manual_seed(seed)
    f, h, w = grid
    x = torch.randn(batch, WAN_TINY["out_channels"], f, 2 * h, 2 * w, generator=g)
    text = torch.randn(batch, TEXT_LEN, WAN_TINY["text_dim"], generator=g)
    t = torch.tensor([700.0, 300.0][:batch])
    return x, t, text


@pytest.fixture(scope="module")
def wan(tmp_path_factory):
    """One random diffusers Wan2.1 model in four folders (diffusers: pipeline layout and a
    sharded transformer/ folder; original: one file and sharded with an index) and its outputs."""
    root = tmp_path_factory.mktemp("wan")
    dm = diffusers_wan()
    dm.save_pretrained(root / "Wan-T2V-Diffusers" / "transformer")
    dm.save_pretrained(root / "Wan-T2V-Diffusers-sharded" / "transformer", max_shard_size="40KB")
    orig = to_original(dm.state_dict(), WAN_TO_ORIGINAL)
    write_safetensors(orig, root / "Wan-T2V", config=original_wan_config(WAN_TINY))
    write_safetensors(orig, root / "Wan-T2V-sharded", shards=3, config=original_wan_config(WAN_TINY))
    x, t, text = _wan_inputs()
    with torch.no_grad():
        cond = dm(x, t, text, return_dict=False)[0]
        uncond = dm(x, t, torch.zeros_like(text), return_dict=False)[0]
    dirs = {k: str(root / k) for k in ("Wan-T2V-Diffusers", "Wan-T2V-Diffusers-sharded", "Wan-T2V", "Wan-T2V-sharded")}
    assert len(list((root / "Wan-T2V-Diffusers-sharded" / "transformer").glob("*.safetensors"))) > 1
    return dict(dirs=dirs, x=x, t=t, text=text, ref=cond, ref_cfg=uncond + GUIDANCE * (cond - uncond), root=root)


@pytest.mark.parametrize("folder", ["Wan-T2V-Diffusers", "Wan-T2V-Diffusers-sharded", "Wan-T2V", "Wan-T2V-sharded"])
def test_wan_t2v_loads_and_equals_diffusers(wan, folder):
    model = build_model(sporch_wan_dict(WAN_TINY), weights=wan["dirs"][folder])
    with torch.no_grad():
        out = model(wan["x"], wan["t"], wan["text"])
    err = compare(out, wan["ref"])
    assert err["max_rel_err"] <= TOL and err["ref_max_abs"] > 0.5, err


def test_wan_head_rows_matter(wan):
    """The output head's (pt, ph, pw, C) rows are permuted on load: without it the output is wrong."""
    from runtime.model.checkpoints import wan as wan_table
    from runtime.model.checkpoints.table import copy

    head = next(r for r in wan_table.WAN.rules if r.ours == "head.head")
    saved = head.transform
    object.__setattr__(head, "transform", copy)
    try:
        model = build_model(sporch_wan_dict(WAN_TINY), weights=wan["dirs"]["Wan-T2V"])
    finally:
        object.__setattr__(head, "transform", saved)
    with torch.no_grad():
        assert compare(model(wan["x"], wan["t"], wan["text"]), wan["ref"])["max_rel_err"] > 0.1


def _sharded_world(cases, model_dict, x, t, text):
    from runtime.model import ShardedDiT
    from runtime.parallel import ParallelContext

    out = {}
    for name, layout, folder, guidance in cases:
        ctx = ParallelContext.from_layout(**layout)
        model = build_model(model_dict, weights=folder)
        runner = ShardedDiT(model, ctx, grid=(x.shape[2], x.shape[3] // 2, x.shape[4] // 2))
        out[name] = runner.forward(x, t, text, guidance_scale=guidance, null_cond=torch.zeros_like(text))
    return out


def test_wan_t2v_sharded_equals_diffusers(wan):
    d = wan["dirs"]
    cases = [
        ("U4-diffusers", dict(ulysses=4), d["Wan-T2V-Diffusers"], 1.0),
        ("R4-original-sharded", dict(ring=4), d["Wan-T2V-sharded"], 1.0),
        ("U2R2-diffusers-sharded", dict(ulysses=2, ring=2), d["Wan-T2V-Diffusers-sharded"], 1.0),
        ("cfg2-U2-original", dict(cfg=2, ulysses=2), d["Wan-T2V"], GUIDANCE),
    ]
    results = run_distributed(_sharded_world, 4, cases, sporch_wan_dict(WAN_TINY), wan["x"], wan["t"], wan["text"],
                              timeout=300)
    for name, _, _, guidance in cases:
        ref = wan["ref_cfg"] if guidance > 1 else wan["ref"]
        for rank, res in enumerate(results):
            err = compare(res[name], ref)
            assert err["max_rel_err"] <= TOL, (name, rank, err)


# -- parameter counts of the full-size presets ------------------------------------------------

#: The published transformers' configs (config.json of the Hugging Face releases).
WAN_T2V_14B = dict(patch_size=(1, 2, 2), num_attention_heads=40, attention_head_dim=128, in_channels=16,
                   out_channels=16, text_dim=4096, freq_dim=256, ffn_dim=13824, num_layers=40, cross_attn_norm=True,
                   qk_norm="rms_norm_across_heads", eps=1e-6)
WAN_T2V_1_3B = dict(WAN_T2V_14B, num_attention_heads=12, ffn_dim=8960, num_layers=30)


def _diffusers_count(cls_name: str, cfg: dict) -> int:
    import diffusers

    with torch.device("meta"):
        model = getattr(diffusers, cls_name)(**cfg)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("preset,cls_name,cfg,published", [
    ("wan2.1-t2v-1.3b", "WanTransformer3DModel", WAN_T2V_1_3B, 1_418_996_800),
    ("wan2.1-t2v-14b", "WanTransformer3DModel", WAN_T2V_14B, 14_288_491_584),
])
def test_full_size_parameter_counts(preset, cls_name, cfg, published):
    from orchestrator.config.job import ModelSpec, resolve_model

    ours = count_parameters(resolve_model(ModelSpec(preset=preset)))
    assert ours == _diffusers_count(cls_name, cfg) == published


# -- broken checkpoints: one line naming the problem ------------------------------------------

def _damaged(wan, tmp_path, folder, damage):
    import shutil

    dst = tmp_path / folder
    shutil.copytree(wan["root"] / folder, dst)
    damage(dst)
    return str(dst)


def _truncate(d):
    shard = sorted(d.glob("*-00002-of-*.safetensors"))[0]
    shard.write_bytes(shard.read_bytes()[:-100])


def _rewrite(d, edit):
    from safetensors.torch import load_file, save_file

    f = d / "diffusion_pytorch_model.safetensors"
    state = load_file(str(f))
    edit(state)
    save_file(state, str(f))


DAMAGES = {
    "truncated shard": ("Wan-T2V-sharded", _truncate, r"diffusion_pytorch_model-00002-of-00003.safetensors is truncated"),
    "missing shard": ("Wan-T2V-sharded", lambda d: sorted(d.glob("*-00003-of-*"))[0].unlink(),
                      r"lists shard diffusion_pytorch_model-00003-of-00003.safetensors, which is missing"),
    "broken index": ("Wan-T2V-sharded", lambda d: (d / "diffusion_pytorch_model.safetensors.index.json")
                     .write_text("{not json"), r"broken index"),
    "corrupt header": ("Wan-T2V", lambda d: (d / "diffusion_pytorch_model.safetensors")
                       .write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{garbage garbage}" + bytes(64)),
                       r"corrupt safetensors header"),
    "missing tensor": ("Wan-T2V", lambda d: _rewrite(d, lambda s: s.pop("blocks.1.ffn.2.bias")),
                       r"lacks tensor 'blocks.1.ffn.2.bias'"),
    "unexpected tensor": ("Wan-T2V", lambda d: _rewrite(d, lambda s: s.update(extra=torch.zeros(2))),
                          r"unexpected tensor 'extra'"),
    "mis-shaped tensor": ("Wan-T2V", lambda d: _rewrite(d, lambda s: s.update(
        {"blocks.0.self_attn.q.weight": torch.zeros(64, 32)})), r"'blocks.0.self_attn.q.weight' has shape \[64, 32\]"),
    "other heads in config": ("Wan-T2V-Diffusers", lambda d: (d / "transformer" / "config.json").write_text(
        (d / "transformer" / "config.json").read_text().replace('"num_attention_heads": 4', '"num_attention_heads": 2')),
        r"num_attention_heads=2 does not match the job's model \(num_heads=4\)"),
    "no weights": ("Wan-T2V", lambda d: (d / "diffusion_pytorch_model.safetensors").unlink(),
                   r"holds no \*.safetensors file"),
}


@pytest.mark.parametrize("case", sorted(DAMAGES))
def test_broken_checkpoint_one_line_error(wan, tmp_path, case):
    from runtime.model.checkpoints import CheckpointError

    folder, damage, needle = DAMAGES[case]
    path = _damaged(wan, tmp_path, folder, damage)
    with pytest.raises(CheckpointError, match=needle) as info:
        build_model(sporch_wan_dict(WAN_TINY), weights=path)
    assert "\n" not in str(info.value)


def test_bfloat16_keeps_float32_where_wan_does(wan):
    model = build_model(sporch_wan_dict(WAN_TINY), dtype="bfloat16", weights=wan["dirs"]["Wan-T2V"])
    dtypes = {n: p.dtype for n, p in model.named_parameters()}
    assert dtypes["blocks.0.self_attn.q.weight"] == torch.bfloat16
    for n in ("time_embedding.fc1.weight", "time_projection.weight", "blocks.0.modulation", "head.modulation",
              "head.head.weight", "blocks.1.norm3.weight"):
        assert dtypes[n] == torch.float32, n
    seen = []
    hook = model.blocks[0].register_forward_hook(lambda m, args, out: seen.append((args[0].dtype, out.dtype)))
    with torch.no_grad():
        out = model(wan["x"], wan["t"], wan["text"])
    hook.remove()
    assert seen == [(torch.float32, torch.float32)]  # the residual stream
    assert out.dtype == torch.float32
    assert compare(out, wan["ref"])["max_rel_err"] < 2e-2
