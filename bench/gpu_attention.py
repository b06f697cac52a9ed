"""GPU benchmark: every usable attention kernel at a Plan's shape, and ring attention on one GPU.

    python bench/gpu_attention.py --heads 24            # issue 13's shape: S=32,760, H=24, D=128, bf16
    python bench/gpu_attention.py --preset flux.1-dev --height 1024 --width 1024 --frames 1
    python bench/gpu_attention.py --cpu-smoke           # tiny shape on the CPU: checks the code path only

The shape comes from a Plan (sporch.orchestrator.plan.planner.make_plan) of the job on one GPU of
``--cluster``: S = the plan's sequence length, H = the model's heads (``--heads`` overrides),
D = its head dim, batch 1, non-causal. Two tables:

1. kernels: each usable kernel (sporch.runtime.attention.select, preferred first, the selected one
   marked ``*``): max error against the float32 ``math`` kernel at S <= 1024, then median ms and
   TFLOP/s (4 * B * H * S^2 * D per call) at the full shape. ``math`` is skipped where its
   S x S scores would not fit.
2. ring on one GPU: K/V cut in R blocks, the kernel per block and the in-place LSE merge
   (eager and fused), against one full call: ratio = ring ms / full ms (issue 13's goal:
   R=4 <= 1.05, R=8 <= 1.10), and the merge's own ms per block. ``--cpu-smoke`` runs the
   eager merge only (compiling the fused one on a CPU takes longer than the smoke run).

Exit status: 0 after printing; 2 (one line on stderr) where there is no CUDA device and
``--cpu-smoke`` was not given.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.gpu_common import machine_line, median_ms, one_gpu_plan, pick_device  # noqa: E402

CHECK_SEQ = 1024
MATH_LIMIT_BYTES = 8 << 30


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cluster", default="h100x64", help="cluster whose GPU this is (peak TFLOP/s)")
    p.add_argument("--preset", default="wan2.1-t2v-1.3b")
    p.add_argument("--frames", type=int, default=81)
    p.add_argument("--height", type=int, default=480)
    p.add_argument("--width", type=int, default=832)
    p.add_argument("--heads", type=int, default=None, help="override the model's head count")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    p.add_argument("--rings", type=int, nargs="+", default=[1, 4, 8])
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--cpu-smoke", action="store_true", help="tiny shape on the CPU (code path check, no numbers)")
    return p.parse_args(argv)


def shape_from_plan(args):
    if args.cpu_smoke:
        job = {"name": "gpu-attention-smoke", "model": {"preset": "tiny"},
               "workload": {"kind": "benchmark", "seq_len": 192, "dtype": args.dtype}}
        plan = one_gpu_plan("local", job)
    else:
        job = {"name": "gpu-attention", "model": {"preset": args.preset},
               "workload": {"kind": "benchmark", "frames": args.frames, "height": args.height,
                            "width": args.width, "dtype": args.dtype}}
        plan = one_gpu_plan(args.cluster, job)
    heads = args.heads or plan.model.num_heads
    return plan, int(plan.sequence.seq_len), int(heads), int(plan.model.head_dim)


def main(argv=None) -> int:
    args = parse_args(argv)
    device = pick_device(args.cpu_smoke, "bench/gpu_attention.py")
    if args.cpu_smoke:
        args.warmup, args.repeat, args.rings = 1, 2, [1, 2, 4]

    import torch

    from sporch.runtime.attention.kernels import KERNELS, attention_block
    from sporch.runtime.attention.select import choose_kernel, probe, rank_kernels
    from sporch.runtime.attention.utils import merge_block, resolve_merge

    plan, S, H, D = shape_from_plan(args)
    dtype = getattr(torch, args.dtype)
    facts = probe(device, dtype)
    kernels, chosen = rank_kernels(facts), choose_kernel(facts)
    scale = D ** -0.5
    flops = 4.0 * H * S * S * D

    print(machine_line(device))
    print(f"# plan: {plan.model.preset} {plan.sequence.grid} -> S={S:,}, H={H}, D={D}, B=1, "
          f"{args.dtype}, non-causal; peak {plan.cluster.gpu.bf16_tflops} TFLOP/s "
          f"({plan.cluster.name}); median of {args.repeat}")
    print(f"# usable kernels, preferred first: {', '.join(kernels)}; selected: {chosen}")

    g = torch.Generator(device=device).manual_seed(0)

    def rand(s):
        return torch.randn(1, H, s, D, generator=g, device=device, dtype=dtype)

    # 1. kernels
    n = min(S, CHECK_SEQ)
    cq, ck, cv = rand(n), rand(n), rand(n)
    ref, _ = attention_block(cq, ck, cv, scale=scale, backend="math")
    q, k, v = rand(S), rand(S), rand(S)
    header = f"{'kernel':<16} {'max err (S<=1024)':>18} {'ms':>10} {'TFLOP/s':>9} {'% peak':>7}"
    print("\n" + header + "\n" + "-" * len(header))
    peak = float(plan.cluster.gpu.bf16_tflops)
    timed: dict[str, float] = {}
    for name in kernels:
        kernel = KERNELS[name]
        err = float((kernel(cq, ck, cv, scale, False)[0].float() - ref).abs().max())
        mark = "*" if name == chosen else " "
        if name == "math" and H * S * S * 4 > MATH_LIMIT_BYTES:
            print(f"{name + mark:<16} {err:>18.2e} {'skipped: S x S scores do not fit':>28}")
            continue
        ms = median_ms(lambda: kernel(q, k, v, scale, False), device, args.warmup, args.repeat)
        timed[name] = ms
        tf = flops / (ms * 1e-3) / 1e12
        print(f"{name + mark:<16} {err:>18.2e} {ms:>10.2f} {tf:>9.1f} {100 * tf / peak:>6.1f}%", flush=True)

    # 2. ring on one GPU: kernel per K/V block + merge, vs one full call
    ring_kernels = [chosen] + [x for x in ("cuda_flash",) if x in timed and x != chosen]
    header = f"{'kernel':<16} {'merge':>6} {'R':>3} {'ring ms':>9} {'full ms':>9} {'ratio':>6} {'merge ms/block':>15}"
    print("\n" + header + "\n" + "-" * len(header))
    for name in ring_kernels:
        kernel = KERNELS[name]
        full = timed.get(name) or median_ms(lambda: kernel(q, k, v, scale, False), device, args.warmup, args.repeat)
        for mode in ("eager",) if args.cpu_smoke else ("eager", "fused"):  # compiling on CPU: slow
            merge = resolve_merge(mode, device)
            for R in args.rings:
                if R == 1 and mode == "fused":
                    continue  # nothing to merge
                kb, vb = k.tensor_split(R, dim=2), v.tensor_split(R, dim=2)

                def ring():
                    out = lse = None
                    for i in range(R):
                        bo, bl = kernel(q, kb[i], vb[i], scale, False)
                        out, lse = merge_block(out, lse, bo, bl, merge)
                    return out

                ms = median_ms(ring, device, args.warmup, args.repeat)
                if R > 1:
                    blocks = [kernel(q, kb[i], vb[i], scale, False) for i in range(R)]
                    acc = merge_block(None, None, *blocks[0])

                    def merges():
                        for bo, bl in blocks[1:]:
                            merge(acc[0], acc[1], bo, bl)

                    merge_ms = median_ms(merges, device, args.warmup, args.repeat) / (R - 1)
                    merge_txt = f"{merge_ms:.3f}"
                else:
                    merge_txt = "-"
                print(f"{name:<16} {mode:>6} {R:>3} {ms:>9.2f} {full:>9.2f} {ms / full:>6.2f} {merge_txt:>15}",
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
