"""GPU benchmark: one bf16 forward of Wan2.1-1.3B and Flux.1-dev, eager vs regionally compiled.

    python bench/gpu_model.py                       # both models, issue 13's shapes, on cuda:0
    python bench/gpu_model.py --models wan
    python bench/gpu_model.py --cpu-smoke           # tiny model on the CPU: checks the code path only

Each model runs from a Plan (sporch.orchestrator.plan.planner.make_plan) of its job on one GPU of
``--cluster``: Wan2.1-T2V-1.3B at 832x480, 81 frames (32,760 tokens) and Flux.1-dev at
1024x1024 (4,096 image + 512 text tokens), batch 1, no CFG, random weights (the speed does not
depend on their values), unsharded (world size 1). One step = one model forward
(``ShardedDiT.velocity``). Attention runs the kernel ``sporch.runtime.attention.select`` picks (torch's
SDPA is held to it). Columns: median ms per step, TFLOP/s and % of the cluster's peak from
the plan's FLOP estimate (``plan.estimates.compute.flops_per_step_per_rank``), the first compiled
call's extra time (compile time, reported apart from step time), and issue 13's goal.

Exit status: 0 after printing; 2 (one line on stderr) where there is no CUDA device and
``--cpu-smoke`` was not given.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.gpu_common import (device_model, machine_line, median_ms, one_gpu_plan, peak_step_mib, pick_device, profile_top,  # noqa: E402
                               sdpa_scope, sync)  # noqa: E402

#: name -> (job, issue 13's goal in ms per step)
MODELS = {
    "wan": ({"name": "wan2.1-1.3b-480p", "model": {"preset": "wan2.1-t2v-1.3b"},
             "workload": {"kind": "benchmark", "frames": 81, "height": 480, "width": 832}}, 460.0),
    "flux": ({"name": "flux.1-dev-1024", "model": {"preset": "flux.1-dev"},
              "workload": {"kind": "benchmark", "frames": 1, "height": 1024, "width": 1024}}, 150.0),
}
SMOKE = {"smoke": ({"name": "tiny-smoke", "model": {"preset": "tiny"},
                    "workload": {"kind": "benchmark", "frames": 5, "height": 64, "width": 64}}, None)}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cluster", default="h100x64", help="cluster whose GPU this is (peak TFLOP/s)")
    p.add_argument("--models", nargs="+", choices=sorted(MODELS), default=sorted(MODELS, reverse=True))
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    p.add_argument("--compile-mode", default=None, help="torch.compile mode, e.g. max-autotune-no-cudagraphs")
    p.add_argument("--no-compile", action="store_true", help="eager only")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--init", choices=["device", "seeded"], default="device",
                   help="random weights drawn on the device (fast; speed does not depend on the values) or "
                        "sporch's seeded per-parameter values")
    p.add_argument("--profile", action="store_true",
                   help="after the timings, torch.profiler's top ops of one step (compiled if compiled)")
    p.add_argument("--cpu-smoke", action="store_true",
                   help="tiny model on the CPU, Dynamo without code generation (code path check, no numbers)")
    return p.parse_args(argv)


def run_model(name, job, goal, args, device, dtype_name):
    import torch

    from sporch.runtime.attention.select import selected_kernel
    from sporch.runtime.compile import compile_blocks, time_first_call
    from sporch.runtime.model import ShardedDiT, build_model, make_inputs

    job = {**job, "workload": {**job["workload"], "dtype": dtype_name}}
    plan = one_gpu_plan("local" if args.cpu_smoke else args.cluster, job)
    grid = plan.sequence.grid
    if args.init == "device":  # random values drawn on the device: a 12 B model builds in seconds
        model = device_model(plan.model, device, getattr(torch, dtype_name))
    else:  # sporch's seeded per-parameter values (drawn on the host: minutes for 12 B parameters)
        model = build_model(plan.model, seed=0, dtype=getattr(torch, dtype_name), device=device)
    inputs = make_inputs(model, grid, 1, 0, None)
    runner = ShardedDiT(model, None, grid=grid)
    x = runner.shard_latents(inputs.noise)
    kernel = selected_kernel(device, dtype_name)

    def step():
        with sdpa_scope(kernel):
            return runner.velocity(x, 500.0, inputs.cond)

    flops = float(plan.estimates.compute.flops_per_step_per_rank)
    peak = float(plan.cluster.gpu.bf16_tflops)
    tokens = int(plan.sequence.seq_len) + (int(plan.model.text_len) if plan.model.attention == "joint" else 0)
    rows = []
    profile = None
    with torch.no_grad():
        ms = median_ms(step, device, args.warmup, args.repeat)
        rows.append(("eager", ms, None, peak_step_mib(step, device)))
        if not args.no_compile:
            info = compile_blocks(model, backend="eager" if args.cpu_smoke else "inductor", mode=args.compile_mode)
            time_first_call(info, step, lambda: sync(device))
            ms = median_ms(step, device, args.warmup, args.repeat)
            rec = info.record(ms / 1e3)
            rows.append((f"compiled ({info.blocks} blocks)", ms, rec["compile_s"], peak_step_mib(step, device)))
        profile = profile_top(step, device) if args.profile else None
    print(f"# {plan.model.preset}: {model.num_parameters() / 1e9:.2f} B parameters built, "
          f"{flops / 1e12:.1f} TFLOP per step (plan estimate)")
    label = f"{plan.model.preset} {'x'.join(map(str, grid))}"
    for mode, ms, compile_s, peak_mib in rows:
        tf = flops / (ms * 1e-3) / 1e12
        comp = f"{compile_s:.1f}" if compile_s is not None else "-"
        goal_txt = f"<= {goal:.0f}" if goal else "-"
        pk = f"{peak_mib:,.0f}" if peak_mib is not None else "-"
        print(f"{label:<32} {tokens:>7,} {kernel:>10} {mode:<22} {ms:>9.1f} {tf:>8.1f} {100 * tf / peak:>6.1f}% "
              f"{comp:>10} {goal_txt:>8} {pk:>9}", flush=True)
    if args.profile and not args.no_compile:
        print(f"# profile of one step, {label}:\n{profile}", flush=True)
    del model, runner, x, inputs
    if device.type == "cuda":
        torch.cuda.empty_cache()


def main(argv=None) -> int:
    args = parse_args(argv)
    device = pick_device(args.cpu_smoke, "bench/gpu_model.py")
    models = SMOKE if args.cpu_smoke else {m: MODELS[m] for m in args.models}
    dtype = "float32" if args.cpu_smoke else args.dtype
    if args.cpu_smoke:
        args.warmup, args.repeat = 1, 2
    print(machine_line(device))
    print(f"# one forward, batch 1, no CFG, {dtype}, world size 1; median of {args.repeat} after {args.warmup} "
          f"warm-up; peak from cluster {args.cluster if not args.cpu_smoke else 'local'}")
    header = (f"{'model':<32} {'tokens':>7} {'attention':>10} {'mode':<22} {'ms/step':>9} {'TFLOP/s':>8} "
              f"{'% peak':>7} {'compile s':>10} {'goal ms':>8} {'peak MiB':>9}")
    print(header + "\n" + "-" * len(header))
    for name, (job, goal) in models.items():
        run_model(name, job, goal, args, device, dtype)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
