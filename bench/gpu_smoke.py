"""GPU smoke: the runtime's paths at world size 1 on one CUDA device, and FSDP2-sharded weights
under torch.compile.

    python bench/gpu_smoke.py                 # on cuda:0
    python bench/gpu_smoke.py --cpu-smoke     # the same paths on the CPU (gloo): checks the script

Two tables:

1. launch: ``python -m sporch.runtime.launch`` on a plan of one H100 (h100x64 cut to 1 node x 1
   GPU), started as torchrun starts a rank (RANK, WORLD_SIZE, MASTER_ADDR), for the tiny verify job
   and the tiny generate job with: the plain placement, a first-block step cache, the tiled VAE,
   the text encoder on the CPU, FSDP2-sharded DiT weights. Each row: the result's status, the
   worst error (verify) or the step-cache pattern, seconds.
2. FSDP2 + compile: ``WanTransformer3DModel`` at Wan2.1-1.3B's widths and 4 blocks, bf16, built by
   sporch's ``build_transformer`` twice from one seed: its parameters sharded with FSDP2 over a
   world of 1 (``shard_weights: world``) and whole, each with its blocks compiled
   (``compile_blocks``) and run by the runtime's runner (``ShardedTransformer``) on the generic path's
   inputs for 832x480x81: max relative error and ms per step of each.

Exit status: 0 when every row passed, 1 when one failed, 2 without CUDA (and no --cpu-smoke).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.gpu_common import machine_line, median_ms, one_gpu_plan, pick_device, rel_diff, sync  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: label -> (example job, overrides)
GENERATE = ["workload.frames=1", "workload.output_format=png", "parallel.ulysses=1", "parallel.cfg=1",
            "parallel.ring=1", "workload.steps=4"]
LAUNCHES = {
    "verify": ("tiny.yaml", ["parallel.ulysses=1", "parallel.ring=1", "workload.kind=verify"]),
    "generate": ("tiny-generate.yaml", GENERATE),
    "generate fbcache": ("tiny-generate.yaml", GENERATE + ["workload.cache.method=fbcache",
                                                           "workload.cache.threshold=0.5"]),
    "generate vae tiled": ("tiny-generate.yaml", GENERATE + ["pipeline.vae=tiled"]),
    "generate text cpu": ("tiny-generate.yaml", GENERATE + ["pipeline.text_encoder=cpu"]),
    "generate sharded weights": ("tiny-generate.yaml", GENERATE + ["parallel.shard_weights=world"]),
}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=["launch", "fsdp"], default=None)
    p.add_argument("--launches", nargs="+", choices=[k.replace(" ", "-") for k in LAUNCHES],
                   default=[k.replace(" ", "-") for k in LAUNCHES],
                   help="which launch rows to run, spaces as '-' (default: all)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per launch")
    p.add_argument("--cpu-smoke", action="store_true", help="the same paths on the CPU (gloo)")
    return p.parse_args(argv)


def one_gpu_cluster(tmp: str, cpu: bool) -> str:
    """h100x64's descriptor cut to one node of one GPU (the local CPU descriptor with --cpu-smoke)."""
    import yaml

    src = "local.yaml" if cpu else "h100x64.yaml"
    with open(os.path.join(ROOT, "clusters", src)) as f:
        d = yaml.safe_load(f)
    d.update(name="one-gpu", nodes=1, gpus_per_node=1)
    path = os.path.join(tmp, "one-gpu.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(d, f)
    return path


def launch(label, example, overrides, cluster, tmp, timeout, port):
    run_dir = os.path.join(tmp, label.replace(" ", "-"))
    os.makedirs(run_dir)
    sporch = [sys.executable, "-m", "sporch.orchestrator.cli.main"]
    overrides = overrides + ([f"model.weights={os.path.join(tmp, 'tiny-wan-pipeline')}"]
                             if "generate" in example else [])
    plan = subprocess.run(sporch + ["plan", "--cluster", cluster, os.path.join(ROOT, "examples", example), "--json",
                                    *overrides], capture_output=True, text=True, timeout=60)
    if plan.returncode != 0:
        return label, "plan refused", plan.stderr.strip().splitlines()[-1:] or ["?"], 0.0
    plan_path = os.path.join(run_dir, "plan.json")
    with open(plan_path, "w") as f:
        f.write(plan.stdout)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               PYTHONUNBUFFERED="1")
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "sporch.runtime.launch", "--plan", plan_path,
                               "--output-dir", run_dir], capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return label, f"timed out after {timeout:.0f} s", [], time.perf_counter() - start
    secs = time.perf_counter() - start
    result_path = os.path.join(run_dir, "result.json")
    if proc.returncode != 0 or not os.path.exists(result_path):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return label, f"exit {proc.returncode}", tail, secs
    with open(result_path) as f:
        result = json.load(f)
    metrics = result.get("metrics") or {}
    detail = []
    for key in ("max_abs_err", "max_rel_err", "attention_kernel", "device"):
        if key in metrics:
            detail.append(f"{key}={metrics[key]}")
    cache = result.get("step_cache") or metrics.get("step_cache")
    if cache:
        detail.append(f"step_cache={json.dumps(cache)[:120]}")
    return label, str(result.get("status", "?")), detail, secs


def launches(args) -> bool:
    ok = True
    with tempfile.TemporaryDirectory(prefix="sporch-gpu-smoke-") as tmp:
        cluster = one_gpu_cluster(tmp, args.cpu_smoke)
        print(f"{'path':<26} {'status':<14} {'s':>6}  detail")
        for i, (label, (example, overrides)) in enumerate(LAUNCHES.items()):
            if label.replace(" ", "-") not in args.launches:
                continue
            label, status, detail, secs = launch(label, example, overrides, cluster, tmp, args.timeout, 29600 + i)
            ok &= status == "completed"
            print(f"{label:<26} {status:<14} {secs:>6.1f}  {'; '.join(detail)}", flush=True)
    return ok


def fsdp_compile(args, device) -> bool:
    """FSDP2-sharded parameters (world of 1) with compiled blocks vs the plain compiled model."""
    import torch
    import torch.distributed as dist

    from sporch.runtime.compile import compile_blocks
    from sporch.runtime.models.runner import ShardedTransformer
    from sporch.runtime.models.placed import build_transformer
    from sporch.runtime.models.workload import inputs_from_plan
    from sporch.runtime.parallel import ParallelContext

    if args.cpu_smoke:
        job = {"name": "fsdp-smoke", "model": {"preset": "tiny"},
               "workload": {"kind": "benchmark", "frames": 5, "height": 32, "width": 32, "dtype": "float32"}}
    else:
        job = {"name": "fsdp", "model": {"preset": "wan2.1-t2v-1.3b"},
               "workload": {"kind": "benchmark", "frames": 81, "height": 480, "width": 832, "dtype": "bfloat16"}}
    plan = one_gpu_plan("local" if args.cpu_smoke else "h100x64", job)
    config = {**dict(plan.model.diffusers_config), "num_layers": 2 if args.cpu_smoke else 4}
    dtype = getattr(torch, plan.workload.dtype)
    backend = "gloo" if args.cpu_smoke else "nccl"
    with tempfile.TemporaryDirectory(prefix="sporch-fsdp-") as tmp:
        dist.init_process_group(backend, init_method=f"file://{tmp}/rendezvous", rank=0, world_size=1,
                                **({} if args.cpu_smoke else {"device_id": device}))
        try:
            ctx = ParallelContext.from_layout(device=device)
            inputs = inputs_from_plan(plan, config, device)
            rows = []
            outs = {}
            for name, mode in (("plain", "none"), ("fsdp2", "world")):
                model = build_transformer(weights=None, class_name=plan.model.diffusers_class, config=config, ctx=ctx,
                                          shard_weights=mode, seed=0, dtype=dtype, device=device)
                info = compile_blocks(model, backend="eager" if args.cpu_smoke else "inductor")
                runner = ShardedTransformer(model, ctx)
                step = lambda: runner.forward(**inputs)  # noqa: E731
                with torch.no_grad():
                    start = time.perf_counter()
                    outs[name] = step().float()
                    sync(device)
                    first = time.perf_counter() - start
                    ms = median_ms(step, device, 1, 3)
                rows.append((name, info.blocks, ms, first - ms / 1e3))
                model = runner = None  # the next build starts from free memory
            err = rel_diff(outs["fsdp2"], outs["plain"])
            ctx.close()
        finally:
            dist.destroy_process_group()
    tol = 1e-5 if args.cpu_smoke else 2e-2
    ok = err <= tol
    print(f"# {plan.model.diffusers_class}, {config['num_layers']} blocks at {plan.model.preset}'s widths, "
          f"{'x'.join(map(str, plan.sequence.grid))} tokens, {plan.workload.dtype}")
    print(f"{'model':<8} {'compiled blocks':>15} {'ms/step':>9} {'first call extra s':>19}")
    for name, blocks, ms, extra in rows:
        print(f"{name:<8} {blocks:>15} {ms:>9.1f} {extra:>19.1f}")
    print(f"fsdp2 vs plain, both compiled: max_rel_err {err:.3e} (tolerance {tol:g}) -> "
          f"{'ok' if ok else 'FAILED'}", flush=True)
    return ok


def main(argv=None) -> int:
    args = parse_args(argv)
    device = pick_device(args.cpu_smoke, "bench/gpu_smoke.py")
    print(machine_line(device))
    ok = True
    if args.only in (None, "launch"):
        print("# launch: python -m sporch.runtime.launch on a plan of one GPU, world size 1")
        ok &= launches(args)
    if args.only in (None, "fsdp"):
        print("# FSDP2-sharded weights under torch.compile, world size 1")
        ok &= fsdp_compile(args, device)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
