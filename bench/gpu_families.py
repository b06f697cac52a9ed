"""GPU: each generic family's transformer at its published widths, sporch's forward vs diffusers'.

    python bench/gpu_families.py                          # every family, 4 blocks of each kind, bf16, cuda:0
    python bench/gpu_families.py --families qwen-image sd3 --blocks 8 --no-compile
    python bench/gpu_families.py --cpu-smoke              # 1 block, a tiny grid, float32 on the CPU (code path only)

For each family the preset's Plan on one GPU of ``--cluster`` gives the diffusers class, its
published config, the token grid of a published resolution and the text length; the block
counts (``num_layers``, ``num_single_layers``) are cut to ``--blocks`` so every family fits one
GPU and the run fits a short lease (widths, heads and token counts are the published ones).
Weights are random, drawn on the device (speed does not depend on their values); the inputs are
the generic path's own (``inputs_from_plan``).

Two forwards of the same model and inputs, eager and then with the blocks compiled:

- ``diffusers``: the model called as diffusers ships it (``set_attention_backend("native")``:
  torch's SDPA picks its kernel); compiled with diffusers' ``compile_repeated_blocks()``;
- ``sporch``: the same call with sporch's ``SequenceParallel`` hooks attached over a world of
  one rank (what a sharded run adds on the critical path: the hooks, the routed attention
  with sporch's kernel choice, the LSE-returning kernel); compiled with sporch's
  ``compile_blocks`` (the routed attention outside the compiled regions).

Columns: median ms per forward (``--repeat`` after ``--warmup``), first-call compile seconds,
and sporch's max abs difference from diffusers' eager output over diffusers' max abs output
(bf16 against bf16: the two run different attention kernels). Exit 2 (one line on stderr)
without a CUDA device unless ``--cpu-smoke``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.gpu_common import fill_random, machine_line, median_ms, one_gpu_plan, pick_device, sync, world_of_one  # noqa: E402

#: family -> (preset, published workload shape)
CASES = {
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


def build(plan, blocks: int, device, dtype):
    """The plan's diffusers class from its published config with each block count cut to ``blocks``."""
    import torch

    from sporch.runtime.model.generic.build import diffusers_class, prepare_model

    config = dict(plan.model.diffusers_config)
    kept = {k: (config[k], min(int(config[k]), blocks)) for k in LAYER_KEYS if k in config}
    config.update({k: new for k, (_, new) in kept.items()})
    cls = diffusers_class(plan.model.diffusers_class)
    with torch.device(device):  # built in place (some classes compute tensors at init that meta would lose)
        model = cls.from_config(config)
    return prepare_model(fill_random(model).to(dtype)), config, kept


def diffusers_compile(model, backend: str) -> str:
    """diffusers' regional compile: ``compile_repeated_blocks``, or where the class declares no
    ``_repeated_blocks`` (SD3, CogVideoX, PixArt in diffusers 0.42) the same call by hand on each
    block of its block lists (``Module.compile`` with torch.compile's defaults)."""
    from sporch.runtime.model.base import block_lists

    if getattr(model, "_repeated_blocks", None):
        model.compile_repeated_blocks(backend=backend)
        return "compile_repeated_blocks"
    for _, blocks in block_lists(model):
        for block in blocks:
            block.compile(backend=backend)
    return "Module.compile per block"


def run_case(family, args, device, ctx):
    import torch

    from sporch.orchestrator.models.families import require_family
    from sporch.runtime.compile import compile_blocks
    from sporch.runtime.model.generic.plans import split_plan
    from sporch.runtime.model.generic.sequence_parallel import SequenceParallel
    from sporch.runtime.model.generic.workload import inputs_from_plan, kernel_choice

    preset, shape = CASES[family]
    dtype = "float32" if args.cpu_smoke else "bfloat16"
    shape = {k: v for k, v in (SMOKE_SHAPE if args.cpu_smoke else shape).items()
             if k != "frames" or "frames" in CASES[family][1]}
    plan = one_gpu_plan("local" if args.cpu_smoke else args.cluster,
                        {"name": f"families-{family}", "model": {"preset": preset},
                         "workload": {"kind": "benchmark", "dtype": dtype, **shape}})
    start = time.perf_counter()
    model, config, kept = build(plan, 1 if args.cpu_smoke else args.blocks, device, getattr(torch, dtype))
    built_s = time.perf_counter() - start
    inputs = inputs_from_plan(plan, config, device)
    kernel = kernel_choice(plan, ctx, device).kernel
    rec = require_family(plan.model.diffusers_class)
    hooks = SequenceParallel(model, ctx, split_plan(type(model)), local_attention=rec.local_attention,
                             backend=kernel)

    def first(out):
        return out[0] if isinstance(out, (tuple, list)) else getattr(out, "sample", out)

    def diffusers_step():
        return first(model(**inputs))

    def sporch_step():
        with hooks:
            return first(model(**inputs))

    def timed_first(step):
        sync(device)
        t = time.perf_counter()
        out = step()
        sync(device)
        return out, time.perf_counter() - t

    def rel(got, ref):
        return float((got.float() - ref.float()).abs().max()) / max(float(ref.float().abs().max()), 1e-30)

    row = {"family": family, "class": plan.model.diffusers_class, "kernel": kernel, "build_s": built_s,
           "blocks": " + ".join(f"{new}/{old}" for old, new in kept.values()),
           "tokens": int(plan.sequence.seq_len), "text": int(plan.model.text_len or 0),
           "parameters": sum(p.numel() for p in model.parameters())}
    with torch.no_grad():
        ref = diffusers_step()
        row["eager_diffusers_ms"] = median_ms(diffusers_step, device, args.warmup, args.repeat)
        got = sporch_step()
        row["eager_sporch_ms"] = median_ms(sporch_step, device, args.warmup, args.repeat)
        row["eager_rel_diff"] = rel(got, ref)
        if not args.no_compile:
            backend = "eager" if args.cpu_smoke else "inductor"
            row["diffusers_compile"] = diffusers_compile(model, backend)
            _, row["compile_diffusers_s"] = timed_first(diffusers_step)
            row["compiled_diffusers_ms"] = median_ms(diffusers_step, device, args.warmup, args.repeat)
            torch._dynamo.reset()
            for _, mod in model.named_modules():  # back to the plain blocks before sporch compiles them
                mod._compiled_call_impl = None
            compile_blocks(model, backend=backend, swap_attention=False)
            got, row["compile_sporch_s"] = timed_first(sporch_step)
            row["compiled_sporch_ms"] = median_ms(sporch_step, device, args.warmup, args.repeat)
            row["compiled_rel_diff"] = rel(got, ref)
            torch._dynamo.reset()
    del model, inputs, ref, got
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def fmt(row, key, spec):
    v = row.get(key)
    return "-" if v is None else format(v, spec)


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
        print(f"{r['family']:<13} {r['blocks']:<13} {r['tokens'] + r['text']:>7,} {r['kernel']:>8} "
              f"{r['parameters'] / 1e9:>8.2f} | {fmt(r, 'eager_diffusers_ms', '9.1f')} "
              f"{fmt(r, 'eager_sporch_ms', '8.1f')} {fmt(r, 'eager_rel_diff', '8.1e')} | "
              f"{fmt(r, 'compiled_diffusers_ms', '11.1f')} {fmt(r, 'compile_diffusers_s', '5.1f')} "
              f"{fmt(r, 'compiled_sporch_ms', '8.1f')} {fmt(r, 'compile_sporch_s', '5.1f')} "
              f"{fmt(r, 'compiled_rel_diff', '8.1e')}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
