"""Z-Image on the one model path: its forward takes lists (one latent [C, F, H, W] and one caption
[tokens, width] per sample, as ZImagePipeline calls it), a timestep in [0, 1] per sample."""

from __future__ import annotations

import torch

TINY = dict(all_patch_size=(2,), all_f_patch_size=(1,), in_channels=4, dim=32, n_layers=2, n_refiner_layers=1,
            n_heads=4, n_kv_heads=4, norm_eps=1e-5, qk_norm=True, cap_feat_dim=16, rope_theta=256.0, t_scale=1000.0,
            axes_dims=[2, 2, 4], axes_lens=[128, 32, 32])

#: forward arguments with one row per sample (CFG parallel splits the doubled batch by them: the lists too)
BATCHED = ("x", "t", "cap_feats")


def inputs(config, *, batch, grid, text_len, generator, dtype=torch.float32):
    f, h, w = grid
    p = list(config.get("all_patch_size", [2]))[0]
    pf = list(config.get("all_f_patch_size", [1]))[0]
    c = config["in_channels"]
    return dict(x=[torch.randn(c, f * pf, h * p, w * p, generator=generator).to(dtype) for _ in range(batch)],
                t=torch.rand(batch, generator=generator).to(dtype),
                cap_feats=[torch.randn(text_len, config["cap_feat_dim"], generator=generator).to(dtype)
                           for _ in range(batch)],
                return_dict=False)


#: the loop's timestep is the sigma itself (ZImagePipeline passes the class ``1 - sigma``: :func:`sampling`)
TIMESTEP_SCALE = 1.0


def sampling(inputs, forward):
    """The flow-matching loop's call (runtime/models/inference.py ``denoise``: latents as
    ``hidden_states`` [B, C, F, H, W], ``timestep`` the sigma) made as ZImagePipeline makes it: one
    latent per sample in ``x``, the class's time ``t = 1 - sigma``, its prediction negated (the class
    predicts ``x0 - noise``)."""
    rest = {k: v for k, v in inputs.items() if k not in ("x", "t")}
    loop_inputs = {**rest, "hidden_states": torch.stack(list(inputs["x"])), "timestep": inputs["t"]}

    def call(hidden_states, timestep, **kw):
        out = forward(**kw, x=list(hidden_states.unbind(0)), t=1.0 - timestep)
        return -(torch.stack(list(out)) if isinstance(out, (list, tuple)) else out)

    return loop_inputs, call
