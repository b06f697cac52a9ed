"""Speed levers on one GPU (issue 36): low-bit weights (``model.quant``) and SageAttention
(``workload.attention_precision: lossy``) against bf16 with the exact kernel, on one model run as
sporch runs it: its diffusers class with sporch's hooks.

    python bench/gpu_levers.py                      # Wan2.1-1.3B 832x480x81 (32,760 tokens), bf16, one GPU
    python bench/gpu_levers.py --cpu-smoke          # the code path at a tiny shape on the CPU (no numbers)

Each row builds the plan's diffusers class (``WanTransformer3DModel``; random weights drawn on the
device from one seed, the same in every row: speed does not depend on them; the dtypes sporch's
``build_transformer`` gives), applies the lever as a run does (``quantize_weights`` on the block
linears; the kernel ``run_choice`` picks for the precision, run by sporch's ``SequenceParallel``
hooks over a world of one rank: at world size 1 a run's runner calls the model without them, so
there SageAttention needs a sharded layout), times one forward on the generic path's inputs
(median of ``--repeat`` after ``--warmup``), then runs a ``--steps``-step Euler sample (the
generic path's ``denoise``) from the same noise and compares its final latents with the first
row's (bf16, no quant, exact): PSNR over the reference's range and the largest |difference|. A
lever that cannot run here (float8 below sm89, no sageattention) prints its one-line reason.
"""

from __future__ import annotations

import argparse
import math
import sys

import os

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.gpu_common import (device_model, first, machine_line, median_ms, one_gpu_plan, pick_device,  # noqa: E402
                              runtime_keeps_float32, sporch_hooks, sync, world_of_one)

JOB = {"name": "levers", "model": {"preset": "wan2.1-t2v-1.3b"},
       "workload": {"kind": "inference", "frames": 81, "height": 480, "width": 832, "dtype": "bfloat16"}}
SMOKE = {"name": "levers", "model": {"preset": "tiny"},
         "workload": {"kind": "inference", "frames": 9, "height": 64, "width": 64, "dtype": "float32"}}
#: (row name, model.quant, workload.attention_precision)
ROWS = [("bf16 exact", "none", "exact"), ("int8_weight", "int8_weight", "exact"),
        ("fp8_weight", "fp8_weight", "exact"), ("fp8_dynamic", "fp8_dynamic", "exact"),
        ("sage (lossy)", "none", "lossy"), ("fp8_dynamic + sage", "fp8_dynamic", "lossy")]


def psnr(ref, got) -> float:
    err = float((got.double() - ref.double()).pow(2).mean())
    span = float(ref.max() - ref.min())
    return math.inf if err == 0 else 10 * math.log10(span * span / err)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cluster", default="h100x64")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--cpu-smoke", action="store_true")
    args = ap.parse_args(argv)
    import torch

    from sporch.runtime.attention.select import run_choice
    from sporch.runtime.models.inference import denoise, flow_sigmas, timestep_scale
    from sporch.runtime.models.workload import inputs_from_plan
    from sporch.runtime.models.quant import QuantError, quantize_weights, weight_bytes

    device = pick_device(args.cpu_smoke, "gpu_levers.py")
    job = SMOKE if args.cpu_smoke else JOB
    plan = one_gpu_plan("local" if args.cpu_smoke else args.cluster, job)
    m, grid = plan.model, plan.sequence.grid
    dtype = getattr(torch, plan.workload.dtype)
    config = dict(m.diffusers_config)
    keeps = runtime_keeps_float32(m.diffusers_class)
    inputs = inputs_from_plan(plan, config, device)
    ctx = world_of_one(device)
    loop = dict(scale=timestep_scale(m.family), cfg=False, guidance_scale=1.0,
                out_channels=int(config.get("out_channels") or config["in_channels"]))
    print(machine_line(device))
    print(f"# {m.preset} ({m.diffusers_class}) {'x'.join(map(str, grid))} ({plan.sequence.seq_len:,} tokens), "
          f"{plan.workload.dtype}, {args.steps}-step Euler sample per row for the quality columns")
    print(f"{'row':<20} {'kernel':>10} {'weights GiB':>11} {'ms/step':>9} {'vs ref':>7} {'PSNR dB':>8} {'max diff':>9}")
    ref, ref_ms = None, None
    for name, quant, precision in ROWS:
        # the same weights in every row, drawn on the device (1.3 B in well under a second)
        model = device_model(m.diffusers_class, config, device, dtype, keep_float32=keeps, seed=0)
        try:
            quantize_weights(model, quant, device)
        except QuantError as exc:
            print(f"{name:<20} refused: {exc}", flush=True)
            continue
        choice = run_choice(precision, device, dtype)
        if precision == "lossy" and choice.kernel != "sage":
            print(f"{name:<20} {choice.reason}", flush=True)
            continue
        hooks = sporch_hooks(model, ctx, choice.kernel)

        def forward(**kw):
            with hooks:
                return first(model(**kw))  # noqa: B023 -- called within this row

        with torch.no_grad():
            ms = median_ms(lambda: forward(**inputs), device, args.warmup, args.repeat)
            out = denoise(forward, inputs, flow_sigmas(args.steps, 5.0), **loop)
            sync(device)
        out = out.float().cpu()
        ref, ref_ms = (out, ms) if ref is None else (ref, ref_ms)
        q = psnr(ref, out)
        print(f"{name:<20} {choice.kernel:>10} {weight_bytes(model) / 2**30:>11.3f} {ms:>9.2f} {ref_ms / ms:>6.2f}x "
              f"{q:>8.1f} {float((out - ref).abs().max()):>9.3g}", flush=True)
        model = hooks = None  # this row's weights freed before the next row builds its own
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
