"""GPU benchmark: one bf16 forward of Wan2.1-1.3B and Flux.1-dev through diffusers' class and
through the same class as sporch runs it, eager and compiled, in one process.

    python bench/gpu_model.py                       # both models, issue 13's shapes, on cuda:0
    python bench/gpu_model.py --models wan --profile
    python bench/gpu_model.py --cpu-smoke           # the tiny and tiny-flux presets on the CPU: the code path only

Each model runs from a Plan (sporch.orchestrator.plan.planner.make_plan) of its job on one GPU of
``--cluster``: Wan2.1-T2V-1.3B at 832x480, 81 frames (32,760 tokens) and Flux.1-dev at 1024x1024
(4,096 image + 512 text tokens), batch 1, no CFG, random weights drawn on the device (the speed
does not depend on their values), the generic path's inputs (``inputs_from_plan``). The plan's
diffusers class (``WanTransformer3DModel`` / ``FluxTransformer2DModel``) is built once; four rows:

- ``diffusers eager`` / ``diffusers compiled``: the model as diffusers ships it (parameters in the
  dtypes ``from_pretrained(torch_dtype=)`` gives, its ``native`` attention backend: torch's SDPA
  picks the kernel), compiled with diffusers' ``compile_repeated_blocks``;
- ``sporch eager`` / ``sporch compiled``: the same weights in the dtypes sporch's
  ``build_transformer`` gives (the header says whether it keeps diffusers' float32 modules), with
  sporch's ``SequenceParallel`` hooks over a world of one rank (the routed attention with the
  kernel ``sporch.runtime.attention.select`` picks: what a sharded run adds on the critical path),
  compiled with sporch's ``compile_blocks`` (``workload.compile``).

Columns: median ms per step, TFLOP/s and % of the cluster's peak from the plan's FLOP estimate
(``plan.estimates.compute.flops_per_step_per_rank``), the first compiled call's extra time, one
step's peak memory above the weights, the difference from diffusers' eager output (max abs / max
abs), and the goals: issue 13's ms per step, and issue 50's 0.9x diffusers' compiled step for
sporch's compiled row. At world size 1 a run's runner calls the model without the hooks
(``ShardedTransformer``), so the sporch rows are what sharding adds, measured on one GPU.

Exit status: 0 after printing; 2 (one line on stderr) where there is no CUDA device and
``--cpu-smoke`` was not given.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.gpu_common import (MODES, compare_forwards, device_model, float32_line, machine_line, one_gpu_plan,  # noqa: E402
                              pick_device, profile_top, runtime_keeps_float32, twin, world_of_one)

#: name -> (job, issue 13's goal in ms per step)
MODELS = {
    "wan": ({"name": "wan2.1-1.3b-480p", "model": {"preset": "wan2.1-t2v-1.3b"},
             "workload": {"kind": "benchmark", "frames": 81, "height": 480, "width": 832}}, 460.0),
    "flux": ({"name": "flux.1-dev-1024", "model": {"preset": "flux.1-dev"},
              "workload": {"kind": "benchmark", "frames": 1, "height": 1024, "width": 1024}}, 150.0),
}
SMOKE = {"wan": ({"name": "tiny-smoke", "model": {"preset": "tiny"},
                  "workload": {"kind": "benchmark", "frames": 5, "height": 32, "width": 32}}, None),
         "flux": ({"name": "tiny-flux-smoke", "model": {"preset": "tiny-flux"},
                   "workload": {"kind": "benchmark", "frames": 1, "height": 32, "width": 32}}, None)}
#: issue 50's goal: sporch's compiled step at most this share of diffusers' compiled step
GOAL_VS_DIFFUSERS = 0.9


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cluster", default="h100x64", help="cluster whose GPU this is (peak TFLOP/s)")
    p.add_argument("--models", nargs="+", choices=sorted(MODELS), default=sorted(MODELS, reverse=True))
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    p.add_argument("--compile-mode", default=None, help="torch.compile mode, e.g. max-autotune-no-cudagraphs")
    p.add_argument("--no-compile", action="store_true", help="eager only")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--profile", action="store_true",
                   help="torch.profiler's top ops of one step of diffusers' and of sporch's (compiled if compiled)")
    p.add_argument("--cpu-smoke", action="store_true",
                   help="tiny presets on the CPU, Dynamo without code generation (code path check, no numbers)")
    return p.parse_args(argv)


def run_model(job, goal, args, device, ctx, dtype_name):
    import torch

    from sporch.runtime.models.workload import inputs_from_plan, kernel_choice

    job = {**job, "workload": {**job["workload"], "dtype": dtype_name}}
    plan = one_gpu_plan("local" if args.cpu_smoke else args.cluster, job)
    m, grid = plan.model, plan.sequence.grid
    config, dtype = dict(m.diffusers_config), getattr(torch, dtype_name)
    keeps = runtime_keeps_float32(m.diffusers_class)
    theirs = device_model(m.diffusers_class, config, device, dtype)  # as from_pretrained(torch_dtype=) places it
    # the same weights, sporch's dtypes; its own module tree, so hooks and compiled blocks stay apart
    ours = twin(theirs, m.diffusers_class, config, dtype, keep_float32=keeps)
    inputs = inputs_from_plan(plan, config, device)
    kernel = kernel_choice(plan, ctx, device).kernel
    rows = compare_forwards(theirs, ours, inputs, ctx, kernel, device, warmup=args.warmup, repeat=args.repeat,
                            compile=not args.no_compile, backend="eager" if args.cpu_smoke else "inductor",
                            mode=args.compile_mode,
                            profile=(lambda step: profile_top(step, device)) if args.profile else None)
    flops = float(plan.estimates.compute.flops_per_step_per_rank)
    peak = float(plan.cluster.gpu.bf16_tflops)
    tokens = int(plan.sequence.seq_len) + (int(m.text_len) if m.attention == "joint" else 0)
    params = sum(p.numel() for p in theirs.parameters())
    print(f"# {m.preset}: {m.diffusers_class}, {params / 1e9:.2f} B parameters, {flops / 1e12:.1f} TFLOP per step "
          f"(plan estimate); sporch's attention kernel {kernel}")
    print(float32_line(m.diffusers_class, keeps))
    label = f"{m.preset} {'x'.join(map(str, grid))}"
    compiled = rows.get("diffusers compiled", {}).get("ms")
    for mode in MODES:
        r = rows.get(mode)
        if r is None:
            continue
        tf = flops / (r["ms"] * 1e-3) / 1e12
        comp = f"{r['compile_s']:.1f}" if r["compile_s"] is not None else "-"
        goals = []
        if goal and mode.startswith("sporch"):
            goals.append(f"<= {goal:.0f}")
        if compiled and mode == "sporch compiled":
            goals.append(f"<= {GOAL_VS_DIFFUSERS * compiled:.0f}")
        pk = f"{r['peak_mib']:,.0f}" if r["peak_mib"] is not None else "-"
        name = mode if mode != "sporch compiled" else r["how"].replace("compile_blocks", "sporch compiled")
        print(f"{label:<28} {tokens:>7,} {name:<28} {r['ms']:>9.1f} {tf:>8.1f} {100 * tf / peak:>6.1f}% "
              f"{comp:>9} {pk:>9} {r['diff']:>8.1e} {', '.join(goals) or '-':>12}", flush=True)
    if args.profile:  # the compiled steps where compiled: what sporch adds is what its table has beyond diffusers'
        for mode in MODES[2:] if not args.no_compile else MODES[:2]:
            print(f"# profile of one step, {label}, {mode}:\n{rows[mode]['profile']}", flush=True)


def main(argv=None) -> int:
    args = parse_args(argv)
    device = pick_device(args.cpu_smoke, "bench/gpu_model.py")
    models = SMOKE if args.cpu_smoke else MODELS
    dtype = "float32" if args.cpu_smoke else args.dtype
    if args.cpu_smoke:
        args.warmup, args.repeat = 1, 2
    ctx = world_of_one(device)
    print(machine_line(device))
    print(f"# one forward, batch 1, no CFG, {dtype}, world size 1; median of {args.repeat} after {args.warmup} "
          f"warm-up; peak from cluster {args.cluster if not args.cpu_smoke else 'local'}; diff = max|out - "
          f"diffusers eager| / max|diffusers eager|")
    header = (f"{'model':<28} {'tokens':>7} {'mode':<28} {'ms/step':>9} {'TFLOP/s':>8} {'% peak':>7} "
              f"{'compile s':>9} {'peak MiB':>9} {'diff':>8} {'goal ms':>12}")
    print(header + "\n" + "-" * len(header))
    for name in args.models:
        job, goal = models[name]
        run_model(job, goal, args, device, ctx, dtype)
        if device.type == "cuda":  # the model's tensors went with run_model's frame
            import torch

            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
