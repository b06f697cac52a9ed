"""CPU: the generic path (the diffusers class run by sporch) vs sporch's hand-built Wan and Flux.

    python bench/generic_vs_handbuilt.py [--repeat 5] [--threads 1]

One diffusers model per family with random weights is saved to a temporary folder; the hand-built
model loads that folder (model.weights), the generic path runs the diffusers class itself. Both get
the same latents, timestep and text on one process (the same kernels on both: the generic path's
attention is torch's SDPA through diffusers' native backend, the hand-built's sporch's local
kernel). Prints the median step CPU time of each (process time: one thread, so it is the step's
compute, not inflated by other work on a shared machine) and the max abs difference of their outputs (float32).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sporch.orchestrator.config.job_spec import ModelSpec  # noqa: E402
from sporch.orchestrator.plan.resolve import resolve_model  # noqa: E402
from sporch.runtime.model import ShardedDiT, build_model, patchify, unpatchify  # noqa: E402
from sporch.runtime.model.generic import GenericSharded, random_diffusers  # noqa: E402

WAN = dict(patch_size=(1, 2, 2), num_attention_heads=8, attention_head_dim=64, in_channels=16, out_channels=16,
           text_dim=256, freq_dim=256, ffn_dim=2048, num_layers=4, cross_attn_norm=True,
           qk_norm="rms_norm_across_heads", eps=1e-6)
FLUX = dict(patch_size=1, in_channels=64, num_layers=2, num_single_layers=4, attention_head_dim=64,
            num_attention_heads=8, joint_attention_dim=256, pooled_projection_dim=64, guidance_embeds=True,
            axes_dims_rope=(16, 24, 24))
TEXT = 64


def timed(fn, repeat):
    """Median CPU time of the process per call (ms): with one thread it is the step's compute,
    unlike wall time, which other work on a shared machine inflates."""
    fn()
    times = []
    for _ in range(repeat):
        t = time.process_time()
        out = fn()
        times.append((time.process_time() - t) * 1e3)
    return statistics.median(times), out


def hand_built(folder, text_len):
    section = resolve_model(ModelSpec(weights=folder, text_len=text_len))
    return build_model(section.to_dict(), weights=folder)


@torch.no_grad()
def wan(repeat, folder):
    d = random_diffusers("WanTransformer3DModel", WAN, seed=0)
    d.save_pretrained(folder)
    h = hand_built(folder, TEXT)
    g = torch.Generator().manual_seed(1)
    lat = torch.randn(1, 16, 4, 32, 32, generator=g)  # 4 x 16 x 16 = 1024 tokens
    text = torch.randn(1, TEXT, WAN["text_dim"], generator=g)
    t = torch.tensor([600.0])
    runner = ShardedDiT(h, None, grid=(4, 16, 16))
    ms_h, out_h = timed(lambda: runner.forward(lat, t, text), repeat)
    gen = GenericSharded(d, None)
    ms_g, out_g = timed(lambda: gen.forward(hidden_states=lat, timestep=t, encoder_hidden_states=text,
                                            return_dict=False), repeat)
    return ms_h, ms_g, float((out_h - out_g).abs().max()), float(out_g.abs().max())


@torch.no_grad()
def flux(repeat, folder):
    d = random_diffusers("FluxTransformer2DModel", FLUX, seed=0)
    d.save_pretrained(folder)
    h = hand_built(folder, TEXT)
    g = torch.Generator().manual_seed(1)
    lat = torch.randn(1, 16, 1, 64, 64, generator=g)  # 32 x 32 = 1024 tokens, packed 2 x 2
    text = torch.randn(1, TEXT, FLUX["joint_attention_dim"], generator=g)
    pooled = torch.randn(1, FLUX["pooled_projection_dim"], generator=g)
    sigma, guidance = 0.6, 3.5
    runner = ShardedDiT(h, None, grid=(1, 32, 32))
    ms_h, out_h = timed(lambda: runner.forward(lat, sigma * 1000, {"text": text, "pooled": pooled},
                                               guidance_scale=guidance), repeat)
    tokens, grid = patchify(lat, (1, 2, 2))
    ids = torch.zeros(32, 32, 3)
    ids[..., 1] += torch.arange(32)[:, None]
    ids[..., 2] += torch.arange(32)[None, :]
    gen = GenericSharded(d, None)
    ms_g, out = timed(lambda: gen.forward(hidden_states=tokens, encoder_hidden_states=text, pooled_projections=pooled,
                                          timestep=torch.tensor([sigma]), img_ids=ids.reshape(-1, 3),
                                          txt_ids=torch.zeros(TEXT, 3), guidance=torch.tensor([guidance]),
                                          return_dict=False), repeat)
    out_g = unpatchify(out, grid, (1, 2, 2), 16)
    return ms_h, ms_g, float((out_h - out_g).abs().max()), float(out_g.abs().max())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{'family':8s} {'tokens':>6s} {'hand-built ms':>14s} {'generic ms':>11s} {'ratio':>6s} "
          f"{'max abs diff':>13s} {'max |out|':>9s}   (float32, {args.threads} thread(s), CPU ms, median of "
          f"{args.repeat})")
    with tempfile.TemporaryDirectory() as tmp:
        for name, fn in (("wan", wan), ("flux", flux)):
            ms_h, ms_g, diff, scale = fn(args.repeat, os.path.join(tmp, name))
            print(f"{name:8s} {1024:6d} {ms_h:14.1f} {ms_g:11.1f} {ms_g / ms_h:6.2f} {diff:13.2e} {scale:9.2f}")


if __name__ == "__main__":
    main()
