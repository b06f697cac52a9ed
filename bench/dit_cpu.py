"""CPU benchmark: one forward of a diffusers transformer, sequence-sharded on 4 gloo ranks by sporch
vs one process.

    python bench/dit_cpu.py [--families wan flux] [--seq 1024 2048 4096] [--hidden 512] [--heads 8]

Each family's diffusers class (``WanTransformer3DModel``: one block, cross-attention to 64 text
tokens; ``FluxTransformer2DModel``: one double-stream + one single-stream block, 64 text tokens in
the joint attention) at ``--hidden`` wide, ``--heads`` heads, FFN 4x, seeded random weights
(``random_diffusers``), runs one forward on the same seeded inputs (the family's ``inputs``):
unsharded in one process, and through sporch's runner (``ShardedTransformer``: the split plan's hooks,
USP attention) on 4 ranks for each ``--layouts`` UxR. Every process uses one thread. Prints the
median milliseconds per forward (the slowest rank's), the speed-up (single / sharded) and the
sharded output's max relative error against the single-process output (bound 1e-5, float32).
``--seq`` counts image/video tokens: Wan's latent grid is (seq/256, 16, 16) patches, Flux's
(1, 32, seq/32). On a machine with fewer than 4 cores the ranks share cores, so the sharded
numbers include that contention (the table prints the core count).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TEXT_LEN = 64
CLASSES = {"wan": "WanTransformer3DModel", "flux": "FluxTransformer2DModel"}


def config(family: str, hidden: int, heads: int) -> dict:
    d = hidden // heads
    if family == "wan":
        return dict(patch_size=(1, 2, 2), num_attention_heads=heads, attention_head_dim=d, in_channels=16,
                    out_channels=16, text_dim=hidden, freq_dim=256, ffn_dim=4 * hidden, num_layers=1,
                    cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6)
    side = (3 * d // 8) // 2 * 2  # RoPE's row and column axes; the rest is the (unused) frame axis
    return dict(patch_size=1, in_channels=64, num_layers=1, num_single_layers=1, attention_head_dim=d,
                num_attention_heads=heads, joint_attention_dim=hidden, pooled_projection_dim=64,
                guidance_embeds=True, axes_dims_rope=(d - 2 * side, side, side))


def grid(family: str, seq: int) -> tuple[int, int, int]:
    if family == "wan":
        if seq % 256:
            raise SystemExit(f"--seq {seq}: Wan's grid is (seq/256, 16, 16); give a multiple of 256")
        return (seq // 256, 16, 16)
    if seq % 32:
        raise SystemExit(f"--seq {seq}: Flux's grid is (1, 32, seq/32); give a multiple of 32")
    return (1, 32, seq // 32)


def build(family: str, hidden: int, heads: int, seq: int):
    from sporch.runtime.models.build import random_diffusers
    from sporch.runtime.models.families import family_module

    conf = config(family, hidden, heads)
    model = random_diffusers(CLASSES[family], conf, seed=0)
    inputs = family_module(family).inputs(conf, batch=1, grid=grid(family, seq), text_len=TEXT_LEN,
                                          generator=torch.Generator().manual_seed(1))
    return model, inputs


def time_forward(forward, warmup: int, repeat: int, barrier=None) -> tuple[list[float], torch.Tensor]:
    times, out = [], None
    with torch.no_grad():
        for i in range(warmup + repeat):
            if barrier is not None:
                barrier()
            t0 = time.perf_counter()
            out = forward()
            if i >= warmup:
                times.append((time.perf_counter() - t0) * 1e3)
    return times, out


def run_single(family: str, hidden: int, heads: int, seq: int, warmup: int, repeat: int):
    torch.set_num_threads(1)
    model, inputs = build(family, hidden, heads, seq)
    times, out = time_forward(lambda: model(**inputs)[0], warmup, repeat)
    return statistics.median(times), out


def _rank(family: str, hidden: int, heads: int, seq: int, ulysses: int, ring: int, warmup: int, repeat: int):
    """Runs on every rank (spawned by sporch.runtime.testing.run_distributed)."""
    import torch.distributed as dist

    from sporch.runtime.models.runner import ShardedTransformer
    from sporch.runtime.parallel import ParallelContext

    ctx = ParallelContext.from_layout(ulysses=ulysses, ring=ring)
    model, inputs = build(family, hidden, heads, seq)
    runner = ShardedTransformer(model, ctx)
    times, out = time_forward(lambda: runner.forward(**inputs), warmup, repeat, barrier=dist.barrier)
    return {"median_ms": statistics.median(times), "out": out if ctx.rank == 0 else None}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--families", nargs="+", choices=sorted(CLASSES), default=["wan", "flux"])
    p.add_argument("--seq", type=int, nargs="+", default=[1024, 2048, 4096])
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--layouts", nargs="+", default=["4x1", "2x2"], help="UxR layouts on 4 ranks")
    args = p.parse_args(argv)

    from sporch.runtime.testing import run_distributed

    layouts = [tuple(int(v) for v in s.split("x")) for s in args.layouts]
    print(f"# one forward of the diffusers class, hidden {args.hidden}, {args.heads} heads x "
          f"{args.hidden // args.heads}, ffn {4 * args.hidden}, text {TEXT_LEN} tokens, float32, one thread per "
          f"process, CPU cores: {os.cpu_count()}, median of {args.repeat}")
    header = (f"{'class':<24} {'seq':>6} {'layout':>12} {'ranks':>5} {'tokens/rank':>11} {'median ms':>10} "
              f"{'speedup':>8} {'max rel err':>12}")
    print(header)
    print("-" * len(header))
    bad = []
    for family in args.families:
        cls = CLASSES[family]
        for seq in args.seq:
            base_ms, ref = run_single(family, args.hidden, args.heads, seq, args.warmup, args.repeat)
            print(f"{cls:<24} {seq:>6} {'1 process':>12} {1:>5} {seq:>11} {base_ms:>10.1f} {1.0:>8.2f} {'-':>12}",
                  flush=True)
            for u, r in layouts:
                res = run_distributed(_rank, u * r, family, args.hidden, args.heads, seq, u, r, args.warmup,
                                      args.repeat, timeout=600)
                ms = max(x["median_ms"] for x in res)  # the slowest rank bounds the step
                err = float((res[0]["out"] - ref).abs().max() / ref.abs().max())
                print(f"{cls:<24} {seq:>6} {f'U={u},R={r}':>12} {u * r:>5} {-(-seq // (u * r)):>11} {ms:>10.1f} "
                      f"{base_ms / ms:>8.2f} {err:>12.2e}", flush=True)
                if not err <= 1e-5:  # float32 sharded vs unsharded, the bound
                    bad.append(f"{family} seq {seq} U={u},R={r}: max rel err {err:.3g} > 1e-5")
    for line in bad:
        print(f"FAILED: {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
