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
WAN_TINY_I2V = dict(WAN_TINY, in_channels=8, image_dim=20, added_kv_proj_dim=20)
TEXT_LEN = 7


def sporch_wan_dict(diffusers_cfg: dict, text_len: int = TEXT_LEN, preset: str | None = None) -> dict:
    """The ``plan.model`` dict that describes a diffusers Wan config."""
    d = diffusers_cfg
    heads, hd = d["num_attention_heads"], d["attention_head_dim"]
    out = dict(preset=preset, attention="cross", depth=d["num_layers"], hidden=heads * hd, num_heads=heads,
               num_kv_heads=heads, head_dim=hd, ffn_dim=d["ffn_dim"], patch=list(d["patch_size"]),
               in_channels=d["in_channels"], out_channels=d["out_channels"], text_len=text_len,
               text_dim=d["text_dim"], freq_dim=d["freq_dim"], qk_norm=True, eps=d["eps"])
    if d.get("image_dim"):
        out.update(image_dim=d["image_dim"], image_len=5)
    return out


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
