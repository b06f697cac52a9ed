"""CPU benchmark: one Wan-style DiT block, sequence-sharded on 4 gloo ranks vs one process.

    python bench/dit_cpu.py [--seq 1024 2048 4096] [--hidden 512] [--heads 8] [--repeat 5]

Every configuration runs the same block (self-attention with 3D RoPE through usp_attention,
cross-attention to 64 text tokens, FFN, adaLN) on the same seeded inputs. The single-process
baseline uses one thread, like each rank. Prints median milliseconds per block forward, the
speed-up (single / sharded) and the sharded output's max relative error against the
single-process output. On a machine with fewer than 4 cores the ranks share cores, so the
sharded numbers include that contention (the table prints the core count).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sporch.runtime.model import build_model, tiny_model_dict  # noqa: E402
from sporch.runtime.model.attention import SequenceAttention  # noqa: E402
from sporch.runtime.model.rope import rope_cos_sin  # noqa: E402

TEXT_LEN = 64


def model_dict(hidden: int, heads: int) -> dict:
    return tiny_model_dict("cross", depth=1, hidden=hidden, num_heads=heads, num_kv_heads=heads,
                           head_dim=hidden // heads, ffn_dim=4 * hidden, text_len=TEXT_LEN, text_dim=hidden)


def inputs(hidden: int, seq: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, seq, hidden, generator=g)
    e0 = torch.randn(1, 6, hidden, generator=g) * 0.1
    context = torch.randn(1, TEXT_LEN, hidden, generator=g)
    return x, e0, context


def time_block(block, x, e0, context, rope, attn, warmup: int, repeat: int) -> tuple[list[float], torch.Tensor]:
    times, out = [], None
    with torch.no_grad():
        for i in range(warmup + repeat):
            if attn.ctx is not None:
                import torch.distributed as dist

                dist.barrier(group=attn.ctx.sequence_group)
            t0 = time.perf_counter()
            out = block(x, e0, context, rope, attn)
            if i >= warmup:
                times.append((time.perf_counter() - t0) * 1e3)
    return times, out


def run_single(hidden: int, heads: int, seq: int, warmup: int, repeat: int):
    torch.set_num_threads(1)
    model = build_model(model_dict(hidden, heads), seed=0)
    x, e0, context = inputs(hidden, seq)
    rope = rope_cos_sin(torch.arange(seq), (1, 1, seq), hidden // heads)
    times, out = time_block(model.blocks[0], x, e0, context, rope, SequenceAttention(), warmup, repeat)
    return statistics.median(times), out


def _rank(hidden: int, heads: int, seq: int, ulysses: int, ring: int, warmup: int, repeat: int):
    """Runs on every rank (spawned by sporch.runtime.testing.run_distributed)."""
    from sporch.runtime.parallel import ParallelContext

    ctx = ParallelContext.from_layout(ulysses=ulysses, ring=ring)
    model = build_model(model_dict(hidden, heads), seed=0)
    x, e0, context = inputs(hidden, seq)
    x_local = ctx.shard_sequence(x, dim=1)
    n = x_local.shape[1]
    idx = torch.arange(ctx.sequence_rank * n, (ctx.sequence_rank + 1) * n)
    rope = rope_cos_sin(idx, (1, 1, seq), hidden // heads, seq_len=seq)
    attn = SequenceAttention(ctx=ctx, seq_len=seq)
    times, out = time_block(model.blocks[0], x_local, e0, context, rope, attn, warmup, repeat)
    full = ctx.gather_sequence(out, dim=1, seq_len=seq)
    return {"median_ms": statistics.median(times), "out": full if ctx.rank == 0 else None}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq", type=int, nargs="+", default=[1024, 2048, 4096])
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--layouts", nargs="+", default=["4x1", "2x2"], help="UxR layouts on 4 ranks")
    args = p.parse_args(argv)

    from sporch.runtime.testing import run_distributed

    layouts = [tuple(int(v) for v in s.split("x")) for s in args.layouts]
    print(f"# one Wan-style block, hidden {args.hidden}, {args.heads} heads x {args.hidden // args.heads}, "
          f"ffn {4 * args.hidden}, text {TEXT_LEN} tokens, float32, CPU cores: {os.cpu_count()}, "
          f"median of {args.repeat}")
    header = f"{'seq':>6} {'layout':>12} {'ranks':>5} {'tokens/rank':>11} {'median ms':>10} {'speedup':>8} {'max rel err':>12}"
    print(header)
    print("-" * len(header))
    bad = []
    for seq in args.seq:
        base_ms, ref = run_single(args.hidden, args.heads, seq, args.warmup, args.repeat)
        print(f"{seq:>6} {'1 process':>12} {1:>5} {seq:>11} {base_ms:>10.1f} {1.0:>8.2f} {'-':>12}", flush=True)
        for u, r in layouts:
            res = run_distributed(_rank, u * r, args.hidden, args.heads, seq, u, r, args.warmup, args.repeat,
                                  timeout=600)
            ms = max(x["median_ms"] for x in res)  # the slowest rank bounds the step
            err = float((res[0]["out"] - ref).abs().max() / ref.abs().max())
            print(f"{seq:>6} {f'U={u},R={r}':>12} {u * r:>5} {-(-seq // (u * r)):>11} {ms:>10.1f} "
                  f"{base_ms / ms:>8.2f} {err:>12.2e}", flush=True)
            if not err <= 1e-5:  # float32 sharded vs unsharded, the bound
                bad.append(f"seq {seq} U={u},R={r}: max rel err {err:.3g} > 1e-5")
    for line in bad:
        print(f"FAILED: {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
