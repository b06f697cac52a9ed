"""GPU: each family's transformer at its published widths, sporch's forward vs diffusers'.

    python bench/gpu_families.py                          # every family, 4 blocks of each kind, bf16, cuda:0
    python bench/gpu_families.py --families qwen-image sd3 --blocks 8 --no-compile
    python bench/gpu_families.py --cpu-smoke              # 1 block, a tiny grid, float32 on the CPU (code path only)

For each family (Wan and Flux included: every model runs its diffusers class) the preset's Plan on
one GPU of ``--cluster`` gives the diffusers class, its published config, the token grid of a
published resolution and the text length; the block counts (``num_layers``,
``num_single_layers``) are cut to ``--blocks`` so every family fits one GPU and the run fits a
short lease (widths, heads and token counts are the published ones). Weights are random, drawn on
the device (speed does not depend on their values); the inputs are the generic path's own
(``inputs_from_plan``).

Two forwards of the same weights and inputs (bench/gpu_common.py ``compare_forwards``), eager and
then with the blocks compiled:

- ``diffusers``: the model as diffusers ships it (the dtypes ``from_pretrained(torch_dtype=)``
  gives, ``set_attention_backend("native")``: torch's SDPA picks its kernel); compiled with
  diffusers' ``compile_repeated_blocks()`` (``Module.compile`` per block where the class declares no
  repeated blocks);
- ``sporch``: the same weights in the dtypes sporch's ``build_transformer`` gives, with sporch's
  ``SequenceParallel`` hooks over a world of one rank (what a sharded run adds on the critical
  path: the hooks, the routed attention with sporch's kernel choice, the LSE-returning kernel);
  compiled with sporch's ``compile_blocks`` (the routed attention outside the compiled regions).

Columns: median ms per forward (``--repeat`` after ``--warmup``), first-call compile seconds,
and sporch's max abs difference from diffusers' eager output over diffusers' max abs output
(bf16 against bf16: the two run different attention kernels, and Wan's float32 modules differ
where sporch's builder casts them: a ``#`` line says so). Exit 2 (one line on stderr) without a
CUDA device unless ``--cpu-smoke``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.gpu_common import (compare_forwards, device_model, float32_line, kept_in_float32, machine_line, one_gpu_plan, pick_device,  # noqa: E402
                              runtime_keeps_float32, twin, world_of_one)

#: family -> (preset, published workload shape)
CASES = {
    "wan": ("wan2.1-t2v-14b", {"frames": 81, "height": 480, "width": 832}),
    "flux": ("flux.1-dev", {"height": 1024, "width": 1024}),
    "qwen-image": ("qwen-image", {"height": 1328, "width": 1328}),
    "hunyuanvideo": ("hunyuanvideo", {"frames": 61, "height": 544, "width": 960}),
    "sd3": ("sd3.5-large", {"height": 1024, "width": 1024}),
    "cogvideox": ("cogvideox-5b", {"frames": 49, "height": 480, "width": 720}),
    "ltx-video": ("ltx-video-2b", {"frames": 121, "height": 512, "width": 768}),
    "pixart": ("pixart-sigma-xl-2-1024-ms", {"height": 1024, "width": 1024}),
}
SMOKE_SHAPE = {"frames": 9, "height": 128, "width": 128}
#: config keys that count repeated blocks
LAYER_KEYS = ("num_layers", "num_single_layers")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cluster", default="h100x64")
    p.add_argument("--families", nargs="+", choices=sorted(CASES), default=list(CASES))
    p.add_argument("--blocks", type=int, default=4, help="blocks kept of each kind (default 4)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--no-compile", action="store_true", help="eager only")
    p.add_argument("--cpu-smoke", action="store_true", help="1 block, a tiny grid, float32 on the CPU")
    return p.parse_args(argv)


def cut_config(plan, blocks: int) -> tuple[dict, dict]:
    """The plan's published config with each block count cut to ``blocks``, and {key: (published, kept)}."""
    config = dict(plan.model.diffusers_config)
    kept = {k: (int(config[k]), min(int(config[k]), blocks)) for k in LAYER_KEYS if k in config}
    config.update({k: new for k, (_, new) in kept.items()})
    return config, kept


def run_case(family, args, device, ctx):
    import torch

    from sporch.runtime.models.workload import inputs_from_plan, kernel_choice

    preset, shape = CASES[family]
    dtype = "float32" if args.cpu_smoke else "bfloat16"
    shape = {k: v for k, v in (SMOKE_SHAPE if args.cpu_smoke else shape).items()
             if k != "frames" or "frames" in CASES[family][1]}
    plan = one_gpu_plan("local" if args.cpu_smoke else args.cluster,
                        {"name": f"families-{family}", "model": {"preset": preset},
                         "workload": {"kind": "benchmark", "dtype": dtype, **shape}})
    cls = plan.model.diffusers_class
    config, kept = cut_config(plan, 1 if args.cpu_smoke else args.blocks)
    keeps = runtime_keeps_float32(cls)
    start = time.perf_counter()
    theirs = device_model(cls, config, device, getattr(torch, dtype))
    ours = twin(theirs, cls, config, getattr(torch, dtype), keep_float32=keeps)
    built_s = time.perf_counter() - start
    inputs = inputs_from_plan(plan, config, device)
    kernel = kernel_choice(plan, ctx, device).kernel
    row = {"family": family, "class": cls, "kernel": kernel, "build_s": built_s, "keeps": keeps,
           "blocks": " + ".join(f"{new}/{old}" for old, new in kept.values()),
           "tokens": int(plan.sequence.seq_len), "text": int(plan.model.text_len or 0),
           "parameters": sum(p.numel() for p in theirs.parameters())}
    row["rows"] = compare_forwards(theirs, ours, inputs, ctx, kernel, device, warmup=args.warmup, repeat=args.repeat,
                                   compile=not args.no_compile, backend="eager" if args.cpu_smoke else "inductor")
    del theirs, ours, inputs
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def fmt(row, mode, key, spec):
    v = row["rows"].get(mode, {}).get(key)
    return format("-", ">" + spec.split(".")[0]) if v is None else format(v, spec)


def main(argv=None) -> int:
    args = parse_args(argv)
    device = pick_device(args.cpu_smoke, "bench/gpu_families.py")
    if args.cpu_smoke:
        args.warmup, args.repeat = 0, 1
    ctx = world_of_one(device)
    print(machine_line(device))
    print(f"# one forward, batch 1, {'float32' if args.cpu_smoke else 'bfloat16'}, published widths, "
          f"blocks cut to {1 if args.cpu_smoke else args.blocks} of each kind; median of {args.repeat} after "
          f"{args.warmup} warm-up; diff = max|sporch - diffusers eager| / max|diffusers eager|")
    header = (f"{'family':<13} {'blocks kept':<13} {'tokens':>7} {'kernel':>8} {'params B':>8} | "
              f"{'diffusers':>9} {'sporch':>8} {'diff':>8} | {'diffusers c':>11} {'(s)':>5} "
              f"{'sporch c':>8} {'(s)':>5} {'diff':>8}")
    print(header + "\n" + "-" * len(header), flush=True)
    for family in args.families:
        try:
            r = run_case(family, args, device, ctx)
        except Exception as exc:  # noqa: BLE001 -- one family's failure must not hide the others' rows
            print(f"{family:<13} failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                  flush=True)
            continue
        if kept_in_float32(r["class"]):
            print(float32_line(r["class"], r["keeps"]))
        print(f"{r['family']:<13} {r['blocks']:<13} {r['tokens'] + r['text']:>7,} {r['kernel']:>8} "
              f"{r['parameters'] / 1e9:>8.2f} | {fmt(r, 'diffusers eager', 'ms', '9.1f')} "
              f"{fmt(r, 'sporch eager', 'ms', '8.1f')} {fmt(r, 'sporch eager', 'diff', '8.1e')} | "
              f"{fmt(r, 'diffusers compiled', 'ms', '11.1f')} {fmt(r, 'diffusers compiled', 'compile_s', '5.1f')} "
              f"{fmt(r, 'sporch compiled', 'ms', '8.1f')} {fmt(r, 'sporch compiled', 'compile_s', '5.1f')} "
              f"{fmt(r, 'sporch compiled', 'diff', '8.1e')}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
