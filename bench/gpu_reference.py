"""GPU benchmark: diffusers' own transformer beside sporch's, same shapes, same process.

    python bench/gpu_reference.py                    # Wan2.1-1.3B 480p x 81 and Flux.1-dev 1024, bf16, cuda:0
    python bench/gpu_reference.py --models wan --no-compile
    python bench/gpu_reference.py --cpu-smoke        # tiny configs on the CPU: checks the code path only

Two tables:

1. speed: diffusers' model class (``WanTransformer3DModel`` / ``FluxTransformer2DModel``) built
   with the published config, random bf16 weights, one forward at the benchmark shape of
   bench/gpu_model.py (batch 1, no CFG): median ms eager, then with diffusers' own regional
   compilation (``compile_repeated_blocks``), its compile time apart, and the peak memory
   of one step (``torch.cuda.max_memory_allocated`` above the weights).
2. accuracy: the published widths at a reduced depth and shape. One random diffusers model
   is saved as a diffusers folder; sporch loads that folder (``model.weights``) and both run in
   bf16 on the same inputs. Each is compared with diffusers in float32 (the reference): max
   absolute error and max relative error (max |out - ref| / max |ref|); sporch's error should
   be of the same order as diffusers' own bf16 error.

Exit status: 0 after printing; 2 (one line on stderr) where there is no CUDA device and
``--cpu-smoke`` was not given.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.gpu_common import machine_line, median_ms, one_gpu_plan, peak_step_mib, pick_device, sync  # noqa: E402

#: The published transformer configs (config.json of the Hugging Face releases).
WAN_1_3B = dict(patch_size=(1, 2, 2), num_attention_heads=12, attention_head_dim=128, in_channels=16,
                out_channels=16, text_dim=4096, freq_dim=256, ffn_dim=8960, num_layers=30, cross_attn_norm=True,
                qk_norm="rms_norm_across_heads", eps=1e-6)
FLUX_DEV = dict(patch_size=1, in_channels=64, num_layers=19, num_single_layers=38, attention_head_dim=128,
                num_attention_heads=24, joint_attention_dim=4096, pooled_projection_dim=768, guidance_embeds=True,
                axes_dims_rope=(16, 56, 56))
TEXT_LEN = 512
GUIDANCE = 3.5

#: name -> (diffusers class, published config, full shape (frames, height, width), reduced
#: depth overrides, reduced shape)
MODELS = {
    "wan": ("WanTransformer3DModel", WAN_1_3B, (81, 480, 832), dict(num_layers=2), (21, 240, 416)),
    "flux": ("FluxTransformer2DModel", FLUX_DEV, (1, 1024, 1024), dict(num_layers=1, num_single_layers=2),
             (1, 512, 512)),
}
SMOKE_CFG = {
    "wan": dict(WAN_1_3B, num_attention_heads=2, attention_head_dim=16, text_dim=24, freq_dim=32, ffn_dim=48),
    "flux": dict(FLUX_DEV, in_channels=16, attention_head_dim=16, num_attention_heads=2, joint_attention_dim=24,
                 pooled_projection_dim=8, axes_dims_rope=(4, 6, 6)),
}
SMOKE_TEXT_LEN = 7


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", choices=sorted(MODELS), default=["wan", "flux"])
    p.add_argument("--no-compile", action="store_true", help="eager only")
    p.add_argument("--no-speed", action="store_true", help="accuracy table only")
    p.add_argument("--no-accuracy", action="store_true", help="speed table only")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--cpu-smoke", action="store_true", help="tiny configs on the CPU (code path check, no numbers)")
    return p.parse_args(argv)


def published(name, smoke):
    cls_name, cfg, shape, reduced, small_shape = MODELS[name]
    if smoke:
        cfg = dict(SMOKE_CFG[name], num_layers=1)
        if name == "flux":
            cfg["num_single_layers"] = 1
        shape = small_shape = (5, 32, 32) if name == "wan" else (1, 32, 32)
    return cls_name, cfg, shape, reduced, small_shape


def randomize(model, seed: int):
    """Every parameter drawn at random (fan-in scaled) on its own device, so no
    zero-initialised layer hides a difference."""
    import torch

    device = next(model.parameters()).device
    g = torch.Generator(device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g, device=device, dtype=torch.float32)
            if p.dim() >= 2:
                p.copy_(r / math.sqrt(p.shape[-1]) * (0.5 if "scale_shift" in name or "norm" in name else 1.0))
            elif name.endswith("weight") or name.endswith("scale"):
                p.copy_(1.0 + 0.1 * r)
            else:
                p.copy_(0.02 * r)
    return model.eval().requires_grad_(False)


def latent_hw(name, shape, cfg):
    """Latent [C, F, H, W] of a (frames, height, width) job: Wan's VAE 4x8x8, Flux's 8x8 (16 channels)."""
    frames, height, width = shape
    if name == "wan":
        return cfg["in_channels"], (frames - 1) // 4 + 1, height // 8, width // 8
    return cfg["in_channels"] // 4, 1, height // 8, width // 8


def make_case(name, cfg, shape, text_len, device, dtype, seed=0):
    """Inputs for diffusers' forward and sporch's, from one generator."""
    import torch

    c, f, h, w = latent_hw(name, shape, cfg)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, c, f, h, w, generator=g)
    text_dim = cfg["text_dim"] if name == "wan" else cfg["joint_attention_dim"]
    text = torch.randn(1, text_len, text_dim, generator=g)
    case = {"x": x, "t": torch.tensor([700.0]), "text": text}
    if name == "flux":
        case["pooled"] = torch.randn(1, cfg["pooled_projection_dim"], generator=g)
    return {k: v.to(device=device, dtype=dtype if v.is_floating_point() and k != "t" else v.dtype)
            for k, v in case.items()}


def diffusers_call(name, model, case):
    """One forward of diffusers' model on ``case`` -> output latents [B, C, F, H, W]."""
    import torch

    from sporch.runtime.model import patchify, unpatchify

    if name == "wan":
        return model(case["x"], case["t"], case["text"], return_dict=False)[0]
    x = case["x"]
    b, c, _, hh, ww = x.shape
    tokens, grid = patchify(x, (1, 2, 2))
    h, w = hh // 2, ww // 2
    img_ids = torch.zeros(h, w, 3, device=x.device)
    img_ids[..., 1] = torch.arange(h, device=x.device)[:, None]
    img_ids[..., 2] = torch.arange(w, device=x.device)[None, :]
    out = model(hidden_states=tokens, encoder_hidden_states=case["text"], pooled_projections=case["pooled"],
                timestep=case["t"].to(x.dtype) / 1000, img_ids=img_ids.reshape(-1, 3),
                txt_ids=torch.zeros(case["text"].shape[1], 3, device=x.device),
                guidance=torch.full((b,), GUIDANCE, device=x.device, dtype=x.dtype), return_dict=False)[0]
    return unpatchify(out, grid, (1, 2, 2), c)


def build_diffusers(cls_name, cfg, device, dtype, seed):
    """diffusers' model built on ``device`` in ``dtype`` (a 12 B model never exists in float32),
    random weights, and the modules diffusers keeps in float32 when it loads a checkpoint in
    ``dtype`` (``_keep_in_fp32_modules``, as ``from_pretrained(torch_dtype=...)`` does) cast back."""
    import diffusers
    import torch

    cls = getattr(diffusers, cls_name)
    prev = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = cls(**cfg)
    finally:
        torch.set_default_dtype(prev)
    randomize(model, seed)
    keep = getattr(cls, "_keep_in_fp32_modules", None) or []
    for name, module in model.named_modules():
        if any(k in name.split(".") for k in keep):
            module.float()
    return model


def speed(name, args, device, dtype):
    import torch

    cls_name, cfg, shape, _, _ = published(name, args.cpu_smoke)
    text_len = SMOKE_TEXT_LEN if args.cpu_smoke else TEXT_LEN
    model = build_diffusers(cls_name, cfg, device, dtype, seed=0)
    case = make_case(name, cfg, shape, text_len, device, dtype)
    params = sum(p.numel() for p in model.parameters())
    rows = []
    with torch.no_grad():
        step = lambda: diffusers_call(name, model, case)  # noqa: E731
        ms = median_ms(step, device, args.warmup, args.repeat)
        rows.append(("eager", ms, None, peak_step_mib(step, device)))
        if not args.no_compile:
            model.compile_repeated_blocks(fullgraph=True, backend="eager" if args.cpu_smoke else "inductor")
            sync(device)
            start = time.perf_counter()
            step()
            sync(device)
            first = time.perf_counter() - start
            ms = median_ms(step, device, args.warmup, args.repeat)
            rows.append(("compile_repeated_blocks", ms, max(0.0, first - ms / 1e3), peak_step_mib(step, device)))
    label = f"diffusers {cls_name} {'x'.join(map(str, shape))}"
    print(f"# {label}: {params / 1e9:.3f} B parameters, weights {torch.cuda.memory_allocated(device) / 2**30:.2f} GiB"
          if device.type == "cuda" else f"# {label}: {params / 1e9:.3f} B parameters")
    for mode, ms, compile_s, peak in rows:
        comp = f"{compile_s:.1f}" if compile_s is not None else "-"
        pk = f"{peak:,.0f}" if peak is not None else "-"
        print(f"{name:<6} {mode:<26} {ms:>9.1f} {comp:>10} {pk:>14}", flush=True)
    del model, case
    if device.type == "cuda":
        torch.cuda.empty_cache()


def accuracy(name, args, device, dtype):
    """sporch (loaded from the diffusers folder) and diffusers, both in ``dtype``, against
    diffusers in float32, at the published widths and a reduced depth and shape."""
    import torch

    from sporch.runtime.model import ShardedDiT, build_model
    from sporch.runtime.model.verify import compare

    cls_name, cfg, _, reduced, shape = published(name, args.cpu_smoke)
    cfg = {**cfg, **(reduced if not args.cpu_smoke else {})}
    text_len = SMOKE_TEXT_LEN if args.cpu_smoke else TEXT_LEN
    with tempfile.TemporaryDirectory(prefix="sporch-gpu-ref-") as tmp:
        ref_model = build_diffusers(cls_name, cfg, device, torch.float32, seed=1)
        ref_model.save_pretrained(os.path.join(tmp, "transformer"))
        case32 = make_case(name, cfg, shape, text_len, device, torch.float32, seed=2)
        with torch.no_grad():
            ref = diffusers_call(name, ref_model, case32).float()
        import diffusers

        low = getattr(diffusers, cls_name).from_pretrained(os.path.join(tmp, "transformer"), torch_dtype=dtype).to(device)
        case = {k: (v.to(dtype) if v.is_floating_point() and k != "t" else v) for k, v in case32.items()}
        with torch.no_grad():
            theirs = diffusers_call(name, low, case).float()
        del low, ref_model
        frames, height, width = shape
        job = {"name": f"ref-{name}", "model": {"weights": tmp, "text_len": text_len},
               "workload": {"kind": "benchmark", "frames": frames, "height": height, "width": width,
                            "dtype": "float32"}}
        plan = one_gpu_plan("local", job)
        model = build_model(plan.model.to_dict(), weights=tmp, dtype=dtype, device=device)
        runner = ShardedDiT(model, None, grid=plan.sequence.grid)
        cond = case["text"] if name == "wan" else {"text": case["text"], "pooled": case["pooled"]}
        with torch.no_grad():
            ours = runner.forward(case["x"], case["t"], cond, guidance_scale=GUIDANCE if name == "flux" else 1.0)
        del model, runner
    e_ours, e_theirs = compare(ours.float(), ref), compare(theirs, ref)
    tokens = math.prod(plan.sequence.grid)
    print(f"{name:<6} {cfg['num_layers']:>2}+{cfg.get('num_single_layers', 0):<2} {tokens:>7,} "
          f"{e_ours['max_abs_err']:>12.3e} {e_ours['max_rel_err']:>12.3e} "
          f"{e_theirs['max_abs_err']:>12.3e} {e_theirs['max_rel_err']:>12.3e} {e_ours['ref_max_abs']:>9.3f}", flush=True)
    if device.type == "cuda":
        torch.cuda.empty_cache()


def main(argv=None) -> int:
    args = parse_args(argv)
    device = pick_device(args.cpu_smoke, "bench/gpu_reference.py")
    import torch

    dtype = torch.float32 if args.cpu_smoke else torch.bfloat16
    if args.cpu_smoke:
        args.warmup, args.repeat = 1, 2
    print(machine_line(device))
    if not args.no_speed:
        print(f"# speed: diffusers' transformer, one forward, batch 1, {dtype}, median of {args.repeat} after "
              f"{args.warmup} warm-up; peak MiB = one step's peak allocation above the weights")
        header = f"{'model':<6} {'mode':<26} {'ms/step':>9} {'compile s':>10} {'peak MiB':>14}"
        print(header + "\n" + "-" * len(header))
        for name in args.models:
            speed(name, args, device, dtype)
    if not args.no_accuracy:
        print(f"# accuracy: {dtype} vs diffusers float32 at the published widths, reduced depth and shape; "
              f"rel = max |out - ref| / max |ref|")
        header = (f"{'model':<6} {'blocks':<5} {'tokens':>7} {'sporch abs':>12} {'sporch rel':>12} "
                  f"{'diffusers abs':>12} {'diffusers rel':>12} {'max |ref|':>9}")
        print(header + "\n" + "-" * len(header))
        for name in args.models:
            accuracy(name, args, device, dtype)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
