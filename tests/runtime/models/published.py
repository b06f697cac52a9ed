"""Tiny random published models (diffusers as the reference) and their checkpoints on disk.

Every parameter is drawn at random after construction (diffusers zero-inits some, e.g. norm
scales are ones): a name mapped to the wrong place shows up as a wrong output. The original
releases' state dicts are written from the diffusers weights with the originals' own module
names (Wan-Video/Wan2.1 ``wan/modules/model.py``, black-forest-labs/flux ``flux/model.py``),
a mapping written here independently of sporch's tables.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import torch

# ---------------------------------------------------------------------------------------------
# Wan2.1

WAN_TINY = dict(patch_size=(1, 2, 2), num_attention_heads=4, attention_head_dim=16, in_channels=4, out_channels=4,
                text_dim=24, freq_dim=32, ffn_dim=48, num_layers=2, cross_attn_norm=True,
                qk_norm="rms_norm_across_heads", eps=1e-6)
WAN_TINY_I2V = dict(WAN_TINY, in_channels=8, image_dim=20, added_kv_proj_dim=64)  # 4 noise + 4 condition channels
WAN_TINY_I2V_3H = dict(WAN_TINY_I2V, num_attention_heads=3, added_kv_proj_dim=48)  # 3 heads x 16
I2V_TEXT_LEN = 512  # diffusers takes the last 512 context tokens as text
TEXT_LEN = 7
IMAGE_LEN = 5  # CLIP image tokens (257 in Wan2.1 I2V)


@torch.no_grad()
def randomize(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        r = torch.randn(p.shape, generator=g)
        if p.dim() >= 2 and "scale_shift_table" not in name and "modulation" not in name:
            p.copy_(r / math.sqrt(p[0].numel()))
        elif p.dim() >= 2:  # modulation tables [1, k, D]
            p.copy_(r / math.sqrt(p.shape[-1]))
        elif name.endswith("weight") or name.endswith("scale"):  # norm scales
            p.copy_(1.0 + 0.2 * r)
        else:
            p.copy_(0.1 * r)
    return model.eval()


def diffusers_wan(cfg: dict = WAN_TINY, seed: int = 0):
    from diffusers import WanTransformer3DModel

    return randomize(WanTransformer3DModel(**cfg), seed)


#: diffusers -> original Wan2.1 names (regex, replacement), in order.
WAN_TO_ORIGINAL = [
    (r"^condition_embedder\.text_embedder\.linear_1\.", "text_embedding.0."),
    (r"^condition_embedder\.text_embedder\.linear_2\.", "text_embedding.2."),
    (r"^condition_embedder\.time_embedder\.linear_1\.", "time_embedding.0."),
    (r"^condition_embedder\.time_embedder\.linear_2\.", "time_embedding.2."),
    (r"^condition_embedder\.time_proj\.", "time_projection.1."),
    (r"^condition_embedder\.image_embedder\.norm1\.", "img_emb.proj.0."),
    (r"^condition_embedder\.image_embedder\.ff\.net\.0\.proj\.", "img_emb.proj.1."),
    (r"^condition_embedder\.image_embedder\.ff\.net\.2\.", "img_emb.proj.3."),
    (r"^condition_embedder\.image_embedder\.norm2\.", "img_emb.proj.4."),
    (r"\.attn1\.to_out\.0\.", ".self_attn.o."),
    (r"\.attn1\.to_([qkv])\.", r".self_attn.\1."),
    (r"\.attn1\.norm_([qk])\.", r".self_attn.norm_\1."),
    (r"\.attn2\.to_out\.0\.", ".cross_attn.o."),
    (r"\.attn2\.to_([qkv])\.", r".cross_attn.\1."),
    (r"\.attn2\.norm_([qk])\.", r".cross_attn.norm_\1."),
    (r"\.attn2\.add_([kv])_proj\.", r".cross_attn.\1_img."),
    (r"\.attn2\.norm_added_k\.", ".cross_attn.norm_k_img."),
    (r"^(blocks\.\d+)\.norm2\.", r"\1.norm3."),
    (r"\.ffn\.net\.0\.proj\.", ".ffn.0."),
    (r"\.ffn\.net\.2\.", ".ffn.2."),
    (r"^(blocks\.\d+)\.scale_shift_table$", r"\1.modulation"),
    (r"^proj_out\.", "head.head."),
    (r"^scale_shift_table$", "head.modulation"),
]


def to_original(state: dict, table) -> dict:
    out = {}
    for name, t in state.items():
        new = name
        for pat, rep in table:
            new = re.sub(pat, rep, new)
        out[new] = t.detach().clone().contiguous()
    return out


def original_wan_config(d: dict) -> dict:
    """config.json of the original release (``WanModel``)."""
    return {"_class_name": "WanModel", "model_type": "i2v" if d.get("image_dim") else "t2v",
            "dim": d["num_attention_heads"] * d["attention_head_dim"], "num_heads": d["num_attention_heads"],
            "num_layers": d["num_layers"], "ffn_dim": d["ffn_dim"], "in_dim": d["in_channels"],
            "out_dim": d["out_channels"], "freq_dim": d["freq_dim"], "text_len": 512, "eps": d["eps"]}


# ---------------------------------------------------------------------------------------------
# writing checkpoints

def write_safetensors(state: dict, folder: Path, *, shards: int = 1, config: dict | None = None,
                      stem: str = "diffusion_pytorch_model") -> Path:
    """``state`` as one file or ``shards`` files plus ``<stem>.safetensors.index.json``."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    names = list(state)
    if shards == 1:
        save_file(state, str(folder / f"{stem}.safetensors"))
    else:
        weight_map = {}
        per = -(-len(names) // shards)
        for k in range(shards):
            part = names[k * per:(k + 1) * per]
            fname = f"{stem}-{k + 1:05d}-of-{shards:05d}.safetensors"
            save_file({n: state[n] for n in part}, str(folder / fname))
            weight_map.update({n: fname for n in part})
        (folder / f"{stem}.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}), encoding="utf-8")
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


# ---------------------------------------------------------------------------------------------
# Flux.1

FLUX_TINY = dict(patch_size=1, in_channels=16, num_layers=1, num_single_layers=2, attention_head_dim=16,
                 num_attention_heads=4, joint_attention_dim=24, pooled_projection_dim=12, guidance_embeds=True,
                 axes_dims_rope=(4, 6, 6))


def diffusers_flux(cfg: dict = FLUX_TINY, seed: int = 0):
    from diffusers import FluxTransformer2DModel

    return randomize(FluxTransformer2DModel(**cfg), seed)


def flux_to_original(state: dict, cfg: dict = FLUX_TINY) -> dict:
    """diffusers -> black-forest-labs/flux names: fused qkv (and linear1 = qkv + MLP input),
    ``scale`` for the q/k norms, (shift, scale) order in the final layer."""
    s = {k: v.detach().clone() for k, v in state.items()}
    out = {}

    def take(dst, *src, suffix=("weight", "bias")):
        for leaf in suffix:
            out[f"{dst}.{leaf}"] = torch.cat([s.pop(f"{n}.{leaf}") for n in src]).contiguous()

    take("img_in", "x_embedder")
    take("txt_in", "context_embedder")
    for ours, theirs in (("time_in", "timestep_embedder"), ("guidance_in", "guidance_embedder"),
                         ("vector_in", "text_embedder")):
        if f"time_text_embed.{theirs}.linear_1.weight" in s:
            take(f"{ours}.in_layer", f"time_text_embed.{theirs}.linear_1")
            take(f"{ours}.out_layer", f"time_text_embed.{theirs}.linear_2")
    for i in range(cfg["num_layers"]):
        b, d = f"transformer_blocks.{i}", f"double_blocks.{i}"
        for stream, q, k, v, o, nq, nk, mod, ff in (
                ("img", "to_q", "to_k", "to_v", "to_out.0", "norm_q", "norm_k", "norm1", "ff"),
                ("txt", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out", "norm_added_q", "norm_added_k",
                 "norm1_context", "ff_context")):
            take(f"{d}.{stream}_mod.lin", f"{b}.{mod}.linear")
            take(f"{d}.{stream}_attn.qkv", f"{b}.attn.{q}", f"{b}.attn.{k}", f"{b}.attn.{v}")
            out[f"{d}.{stream}_attn.norm.query_norm.scale"] = s.pop(f"{b}.attn.{nq}.weight")
            out[f"{d}.{stream}_attn.norm.key_norm.scale"] = s.pop(f"{b}.attn.{nk}.weight")
            take(f"{d}.{stream}_attn.proj", f"{b}.attn.{o}")
            take(f"{d}.{stream}_mlp.0", f"{b}.{ff}.net.0.proj")
            take(f"{d}.{stream}_mlp.2", f"{b}.{ff}.net.2")
    for i in range(cfg["num_single_layers"]):
        b, d = f"single_transformer_blocks.{i}", f"single_blocks.{i}"
        take(f"{d}.linear1", f"{b}.attn.to_q", f"{b}.attn.to_k", f"{b}.attn.to_v", f"{b}.proj_mlp")
        take(f"{d}.linear2", f"{b}.proj_out")
        out[f"{d}.norm.query_norm.scale"] = s.pop(f"{b}.attn.norm_q.weight")
        out[f"{d}.norm.key_norm.scale"] = s.pop(f"{b}.attn.norm_k.weight")
        take(f"{d}.modulation.lin", f"{b}.norm.linear")
    for leaf in ("weight", "bias"):
        scale, shift = s.pop(f"norm_out.linear.{leaf}").chunk(2)
        out[f"final_layer.adaLN_modulation.1.{leaf}"] = torch.cat([shift, scale]).contiguous()
    take("final_layer.linear", "proj_out")
    assert not s, f"unconverted: {sorted(s)}"
    return out
