"""GPU accuracy: sporch's bf16 forward of a diffusers checkpoint beside diffusers' own, both against
diffusers in float32, same weights, same inputs, same process.

    python bench/gpu_reference.py                    # Wan2.1-1.3B and Flux.1-dev widths, reduced depth, bf16, cuda:0
    python bench/gpu_reference.py --models wan
    python bench/gpu_reference.py --cpu-smoke        # the tiny and tiny-flux presets on the CPU: the code path only

For each model, the preset's diffusers class (``WanTransformer3DModel`` / ``FluxTransformer2DModel``)
at its published widths and a reduced depth (Wan 2 blocks, Flux 1 + 2) with random float32 weights
(drawn on the device) is saved as a diffusers folder. Three models read that folder:

- the reference: diffusers' ``from_pretrained`` in float32;
- diffusers bf16: ``from_pretrained(torch_dtype=bfloat16)`` (the modules the class keeps in float32
  stay float32), called as diffusers ships it;
- sporch bf16: sporch's ``build_transformer(weights=folder)`` (what a run loads), with sporch's
  ``SequenceParallel`` hooks over a world of one rank (the routed attention, sporch's kernel).

All three run the generic path's inputs (``inputs_from_plan``) for the reduced shape; the latents
and text are bf16 for the bf16 runs, the timestep (and Flux's guidance and position ids) float32
for all. Columns: max absolute error and max relative error (max |out - ref| / max |ref|) of
each bf16 run, and sporch's distance from diffusers' bf16 output. sporch's error should be of the
same order as diffusers' own bf16 error; the ``#`` line says whether sporch's loader kept the
float32 modules. The speed of the same classes: bench/gpu_model.py.

Exit status: 0 after printing; 2 (one line on stderr) where there is no CUDA device and
``--cpu-smoke`` was not given.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.gpu_common import (device_model, first, kept_in_float32, machine_line, one_gpu_plan, pick_device,  # noqa: E402
                              rel_diff, sporch_hooks, stays_float32, world_of_one)

#: name -> (preset, reduced block counts, reduced shape)
MODELS = {
    "wan": ("wan2.1-t2v-1.3b", dict(num_layers=2), {"frames": 21, "height": 240, "width": 416}),
    "flux": ("flux.1-dev", dict(num_layers=1, num_single_layers=2), {"frames": 1, "height": 512, "width": 512}),
}
SMOKE = {
    "wan": ("tiny", dict(num_layers=1), {"frames": 5, "height": 32, "width": 32}),
    "flux": ("tiny-flux", dict(num_layers=1, num_single_layers=1), {"frames": 1, "height": 32, "width": 32}),
}
#: inputs that carry activations (bf16 in a bf16 run); the rest (timestep, guidance, ids) stay float32
STATES = ("hidden_states", "encoder_hidden_states", "pooled_projections", "encoder_hidden_states_image")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cluster", default="h100x64")
    p.add_argument("--models", nargs="+", choices=sorted(MODELS), default=["wan", "flux"])
    p.add_argument("--cpu-smoke", action="store_true", help="tiny presets on the CPU (code path check, no numbers)")
    return p.parse_args(argv)


def accuracy(name, args, device, dtype, ctx):
    """(label, blocks, tokens, sporch abs, sporch rel, diffusers abs, diffusers rel, max |ref|,
    sporch vs diffusers bf16, sporch kept the float32 modules)."""
    import diffusers
    import torch

    from sporch.runtime.models.placed import build_transformer
    from sporch.runtime.models.workload import inputs_from_plan, kernel_choice

    preset, reduced, shape = (SMOKE if args.cpu_smoke else MODELS)[name]
    plan = one_gpu_plan("local" if args.cpu_smoke else args.cluster,
                        {"name": f"ref-{name}", "model": {"preset": preset},
                         "workload": {"kind": "benchmark", "dtype": "float32", **shape}})
    cls = plan.model.diffusers_class
    config = {**dict(plan.model.diffusers_config), **reduced}
    inputs32 = inputs_from_plan(plan, config, device)
    low = {k: (v.to(dtype) if k in STATES else v) for k, v in inputs32.items()}
    kernel = kernel_choice(plan, ctx, device).kernel
    with tempfile.TemporaryDirectory(prefix="sporch-gpu-ref-") as tmp:
        folder = os.path.join(tmp, "transformer")
        device_model(cls, config, device, torch.float32, seed=1).save_pretrained(folder)
        with torch.no_grad():
            ref_model = getattr(diffusers, cls).from_pretrained(folder, torch_dtype=torch.float32).to(device)
            ref = first(ref_model(**inputs32)).float()
            del ref_model
            theirs_model = getattr(diffusers, cls).from_pretrained(folder, torch_dtype=dtype).to(device)
            theirs = first(theirs_model(**low)).float()
            del theirs_model
            ours_model = build_transformer(weights=folder, class_name=cls, config=None, ctx=None, dtype=dtype,
                                           device=device)
            keep = kept_in_float32(cls)
            kept = all(p.dtype == torch.float32 for n, p in ours_model.named_parameters() if stays_float32(n, keep))
            with sporch_hooks(ours_model, ctx, kernel):
                ours = first(ours_model(**low)).float()
            del ours_model
    scale = float(ref.abs().max())
    e_ours, e_theirs = float((ours - ref).abs().max()), float((theirs - ref).abs().max())
    blocks = f"{config['num_layers']}+{config.get('num_single_layers', 0)}"
    tokens = math.prod(plan.sequence.grid) + (int(plan.model.text_len) if plan.model.attention == "joint" else 0)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return (name, blocks, tokens, e_ours, e_ours / scale, e_theirs, e_theirs / scale, scale, rel_diff(ours, theirs),
            kept if keep else None)


def main(argv=None) -> int:
    args = parse_args(argv)
    device = pick_device(args.cpu_smoke, "bench/gpu_reference.py")
    import torch

    dtype = torch.bfloat16
    ctx = world_of_one(device)
    print(machine_line(device))
    print(f"# accuracy: {dtype} vs diffusers float32 at the published widths, reduced depth and shape; "
          f"rel = max |out - ref| / max |ref|; vs diffusers = max |sporch - diffusers bf16| / max |diffusers bf16|")
    header = (f"{'model':<6} {'blocks':<6} {'tokens':>7} {'sporch abs':>11} {'sporch rel':>11} "
              f"{'diffusers abs':>13} {'diffusers rel':>13} {'max |ref|':>9} {'vs diffusers':>12}")
    print(header + "\n" + "-" * len(header))
    notes = []
    for name in args.models:
        n, blocks, tokens, ea, er, da, dr, scale, vs, kept = accuracy(name, args, device, dtype, ctx)
        print(f"{n:<6} {blocks:<6} {tokens:>7,} {ea:>11.3e} {er:>11.3e} {da:>13.3e} {dr:>13.3e} {scale:>9.3f} "
              f"{vs:>12.3e}", flush=True)
        if kept is not None:
            notes.append(f"# {n}: sporch's build_transformer {'kept' if kept else 'cast'} the modules diffusers keeps "
                         f"in float32 ({'float32' if kept else str(dtype).removeprefix('torch.')})")
    for line in notes:
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
