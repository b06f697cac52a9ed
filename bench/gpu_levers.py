"""Speed levers on one GPU (issue 36): low-bit weights (``model.quant``) and SageAttention
(``workload.attention_precision: lossy``) against bf16 with the exact kernel, on one model.

    python bench/gpu_levers.py                      # Wan2.1-1.3B 832x480x81 (32,760 tokens), bf16, one GPU
    python bench/gpu_levers.py --cpu-smoke          # the code path at a tiny shape on the CPU (no numbers)

Each row builds the model (random weights drawn on the device from one seed, the same in every
row: speed does not depend on them), applies
the lever, times ``ShardedDiT.velocity`` (median of ``--repeat`` after ``--warmup``), then runs a
``--steps``-step Euler sample from the same noise and compares its final latents with the first
row's (bf16, no quant, exact): PSNR over the reference's range and the largest |difference|. A
lever that cannot run here (float8 below sm89, no sageattention) prints its one-line reason.
"""

from __future__ import annotations

import argparse
import math
import sys

from gpu_common import device_model, machine_line, median_ms, one_gpu_plan, pick_device, sync

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
    from sporch.runtime.model import ShardedDiT, euler_sample, flow_sigmas, make_inputs
    from sporch.runtime.model.layers import NUM_TRAIN_TIMESTEPS
    from sporch.runtime.model.quant import QuantError, quantize_weights, weight_bytes

    device = pick_device(args.cpu_smoke, "gpu_levers.py")
    job = SMOKE if args.cpu_smoke else JOB
    plan = one_gpu_plan("local" if args.cpu_smoke else args.cluster, job)
    dtype = getattr(torch, plan.workload.dtype)
    grid = plan.sequence.grid
    print(machine_line(device))
    print(f"# {plan.model.preset} {'x'.join(map(str, grid))} ({plan.sequence.seq_len:,} tokens), "
          f"{plan.workload.dtype}, {args.steps}-step Euler sample per row for the quality columns")
    print(f"{'row':<20} {'kernel':>10} {'weights GiB':>11} {'ms/step':>9} {'vs ref':>7} {'PSNR dB':>8} {'max diff':>9}")
    ref, ref_ms = None, None
    for name, quant, precision in ROWS:
        torch.manual_seed(0)  # the same weights in every row, drawn on the device (1.3 B in well under a second)
        model = device_model(plan.model, device, dtype)
        try:
            quantize_weights(model, quant, device)
        except QuantError as exc:
            print(f"{name:<20} refused: {exc}", flush=True)
            continue
        choice = run_choice(precision, device, dtype)
        if precision == "lossy" and choice.kernel != "sage":
            print(f"{name:<20} {choice.reason}", flush=True)
            continue
        runner = ShardedDiT(model, None, grid=grid, backend=choice.kernel)
        inputs = make_inputs(model, grid, 1, 0, None)
        x = runner.shard_latents(inputs.noise)
        with torch.no_grad():
            ms = median_ms(lambda: runner.velocity(x, 500.0, inputs.cond), device, args.warmup, args.repeat)

            def velocity(z, sigma):
                return runner.velocity(z, sigma * NUM_TRAIN_TIMESTEPS, inputs.cond)

            out = euler_sample(velocity, runner.shard_latents(inputs.noise).float(), flow_sigmas(args.steps, 5.0))
            sync(device)
        out = out.float().cpu()
        ref, ref_ms = (out, ms) if ref is None else (ref, ref_ms)
        q = psnr(ref, out)
        print(f"{name:<20} {choice.kernel:>10} {weight_bytes(model) / 2**30:>11.3f} {ms:>9.2f} {ref_ms / ms:>6.2f}x "
              f"{q:>8.1f} {float((out - ref).abs().max()):>9.3g}", flush=True)
        del model, runner, x, inputs
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
