"""Flux.1 (dev, schnell): the published models' facts in one place.

* ``PRESETS``: MMDiT with 19 double-stream + 38 single-stream blocks, T5-XXL text tokens and
  CLIP's pooled vector (768 wide), RoPE split (16, 56, 56) over (t, h, w). Both are
  guidance-distilled (``distilled``: one transformer pass per step, no classifier-free-guidance
  branch, so ``parallel.cfg`` is 1); dev takes ``workload.guidance_scale`` as an embedded input
  (``guidance_embed``), schnell (timestep-distilled) has none and needs ``guidance_scale <= 1``.
* ``TABLE``: sporch's parameter names <- the original release (black-forest-labs/flux,
  ``flux1-dev.safetensors``) and diffusers (``FluxTransformer2DModel``). Diffusers stores q, k,
  v (and the single blocks' MLP input) as separate projections, concatenated on load, and its
  output norm's modulation as (scale, shift), swapped on load (keymap.py).
"""

from __future__ import annotations

from sporch.orchestrator.models.keymap import Table, rule
from sporch.orchestrator.models.preset import ModelPreset

#: What every Flux.1 transformer has.
KNOBS = {"rope_axes": (16, 56, 56), "pooled_dim": 768, "distilled": True}

_SHAPE = dict(attention="joint", depth=19, single_depth=38, hidden=3072, num_heads=24, num_kv_heads=24,
              head_dim=128, ffn_dim=12288, patch=[1, 2, 2], in_channels=16, vae_stride=[1, 8, 8],
              text_dim=4096, qk_norm=True)

PRESETS = {
    "flux.1-dev": ModelPreset(shape={**_SHAPE, "text_len": 512}, knobs={**KNOBS, "guidance_embed": True}),
    "flux.1-schnell": ModelPreset(shape={**_SHAPE, "text_len": 256}, knobs={**KNOBS, "guidance_embed": False}),
}

D = "double_blocks.{i}."
DD = "transformer_blocks.{i}."
S = "single_blocks.{i}."
SD = "single_transformer_blocks.{i}."


def _stream(ours: str, bfl: str, attn_q: str, attn_k: str, attn_v: str, attn_out: str, norm_q: str, norm_k: str,
            mod: str, ff: str) -> list:
    """The rows of one stream (image or text) of a double block."""
    return [
        rule(D + f"{ours}_mod", original=D + f"{bfl}_mod.lin", diffusers=DD + mod),
        rule(D + f"{ours}_attn.qkv", "cat", original=D + f"{bfl}_attn.qkv",
             diffusers=(DD + attn_q, DD + attn_k, DD + attn_v)),
        rule(D + f"{ours}_attn.norm.q.weight", original=D + f"{bfl}_attn.norm.query_norm.scale",
             diffusers=DD + norm_q + ".weight"),
        rule(D + f"{ours}_attn.norm.k.weight", original=D + f"{bfl}_attn.norm.key_norm.scale",
             diffusers=DD + norm_k + ".weight"),
        rule(D + f"{ours}_attn.proj", original=D + f"{bfl}_attn.proj", diffusers=DD + attn_out),
        rule(D + f"{ours}_mlp.fc1", original=D + f"{bfl}_mlp.0", diffusers=DD + ff + ".net.0.proj"),
        rule(D + f"{ours}_mlp.fc2", original=D + f"{bfl}_mlp.2", diffusers=DD + ff + ".net.2"),
    ]


TABLE = Table(
    model="Flux.1",
    rules=[
        rule("img_in", original="img_in", diffusers="x_embedder"),
        rule("txt_in", original="txt_in", diffusers="context_embedder"),
        rule("time_in.fc1", original="time_in.in_layer", diffusers="time_text_embed.timestep_embedder.linear_1"),
        rule("time_in.fc2", original="time_in.out_layer", diffusers="time_text_embed.timestep_embedder.linear_2"),
        rule("guidance_in.fc1", original="guidance_in.in_layer",
             diffusers="time_text_embed.guidance_embedder.linear_1"),
        rule("guidance_in.fc2", original="guidance_in.out_layer",
             diffusers="time_text_embed.guidance_embedder.linear_2"),
        rule("vector_in.fc1", original="vector_in.in_layer", diffusers="time_text_embed.text_embedder.linear_1"),
        rule("vector_in.fc2", original="vector_in.out_layer", diffusers="time_text_embed.text_embedder.linear_2"),
        *_stream("img", "img", "attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0", "attn.norm_q",
                 "attn.norm_k", "norm1.linear", "ff"),
        *_stream("txt", "txt", "attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj", "attn.to_add_out",
                 "attn.norm_added_q", "attn.norm_added_k", "norm1_context.linear", "ff_context"),
        rule(S + "modulation", original=S + "modulation.lin", diffusers=SD + "norm.linear"),
        rule(S + "linear1", "cat", original=S + "linear1",
             diffusers=(SD + "attn.to_q", SD + "attn.to_k", SD + "attn.to_v", SD + "proj_mlp")),
        rule(S + "linear2", original=S + "linear2", diffusers=SD + "proj_out"),
        rule(S + "norm.q.weight", original=S + "norm.query_norm.scale", diffusers=SD + "attn.norm_q.weight"),
        rule(S + "norm.k.weight", original=S + "norm.key_norm.scale", diffusers=SD + "attn.norm_k.weight"),
        # final layer: diffusers' AdaLayerNormContinuous emits (scale, shift)
        rule("final_layer.adaLN", {"diffusers": "swap_halves"}, original="final_layer.adaLN_modulation.1",
             diffusers="norm_out.linear"),
        rule("final_layer.linear", original="final_layer.linear", diffusers="proj_out"),
    ],
    config_keys={
        "diffusers": {"num_layers": "depth", "num_single_layers": "single_depth", "num_attention_heads": "num_heads",
                      "attention_head_dim": "head_dim", "joint_attention_dim": "text_dim",
                      "pooled_projection_dim": "pooled_dim", "guidance_embeds": "guidance_embed",
                      "axes_dims_rope": "rope_axes", "in_channels": "patch_in"},
    },
)
