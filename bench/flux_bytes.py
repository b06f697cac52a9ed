"""CPU: bytes each aten op reads + writes in one bf16 forward of sporch's Flux (or Wan) and of
diffusers' FluxTransformer2DModel (WanTransformer3DModel), same weights, same inputs.

    python bench/flux_bytes.py                       # Flux.1-dev widths, 1 double + 1 single block,
                                                     # 16x16 image + 64 text tokens
    python bench/flux_bytes.py --double 2 --single 2 --grid 32 32 --text-len 128
    python bench/flux_bytes.py --tiny                # the test's width (hidden 64, 4 heads of 16)
    python bench/flux_bytes.py --model wan           # Wan2.1-1.3B widths, 1 block, 2x16x16 video + 64 text tokens

One random diffusers model (tests/runtime/model/published.py) is saved in bf16 to a temporary
folder; diffusers (``from_pretrained(torch_dtype=bf16)``) and sporch load that folder. Each runs one forward under the byte counter of
tests/runtime/model/bytes_moved.py (a TorchDispatchMode): per op kind, the bytes of its tensor
inputs and outputs (views move nothing; parameter reads are counted apart). The table is sorted
by how many more MB sporch moves than diffusers; below it the totals, the float32 outputs
written (float32 intermediates of a bf16 model) and the weights read. A stand-in for GPU memory
traffic: it says where the bytes go, not how long a GPU takes (no timings here).

Then both bf16 outputs against diffusers in float32 on the same (bf16) weights and inputs:
max abs error and max |out - ref| / max |ref|. The timestep (sigma 0.5) and guidance (4.0) are
chosen so that ``sigma * 1000`` and ``guidance * 1000`` are exact in bf16: diffusers rounds
them to the model dtype, which at other values moves its bf16 output far from its float32 one.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sporch.runtime.model.verify import compare  # noqa: E402
from tests.runtime.model.bytes_moved import flux_counts, table, wan_counts  # noqa: E402
from tests.runtime.model.published import FLUX_TINY, WAN_TINY  # noqa: E402

#: Flux.1-dev's transformer config (config.json of the Hugging Face release).
FLUX_DEV = dict(patch_size=1, in_channels=64, num_layers=19, num_single_layers=38, attention_head_dim=128,
                num_attention_heads=24, joint_attention_dim=4096, pooled_projection_dim=768, guidance_embeds=True,
                axes_dims_rope=(16, 56, 56))
#: Wan2.1-T2V-1.3B's transformer config.
WAN_1_3B = dict(patch_size=(1, 2, 2), num_attention_heads=12, attention_head_dim=128, in_channels=16,
                out_channels=16, text_dim=4096, freq_dim=256, ffn_dim=8960, num_layers=30, cross_attn_norm=True,
                qk_norm="rms_norm_across_heads", eps=1e-6)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=("flux", "wan"), default="flux")
    ap.add_argument("--double", type=int, default=1, help="Flux: double-stream blocks; Wan: blocks (default 1)")
    ap.add_argument("--single", type=int, default=1, help="Flux: single-stream blocks (default 1)")
    ap.add_argument("--grid", type=int, nargs="+", default=None, metavar="N",
                    help="token grid: Flux H W (16 16), Wan F H W (2 16 16)")
    ap.add_argument("--text-len", type=int, default=64)
    ap.add_argument("--tiny", action="store_true", help="the tests' tiny widths instead of the published ones")
    ap.add_argument("--no-accuracy", action="store_true", help="skip the float32 reference forward")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    flux = args.model == "flux"
    grid = tuple(args.grid or ((16, 16) if flux else (2, 16, 16)))
    if len(grid) != (2 if flux else 3):
        ap.error(f"--grid takes {'H W' if flux else 'F H W'} for {args.model}")
    if flux:
        cfg = dict(FLUX_TINY if args.tiny else FLUX_DEV, num_layers=args.double, num_single_layers=args.single)
        blocks = f"{args.double} double + {args.single} single blocks"
    else:
        cfg = dict(WAN_TINY if args.tiny else WAN_1_3B, num_layers=args.double)
        blocks = f"{args.double} blocks"
    width = cfg["num_attention_heads"] * cfg["attention_head_dim"]
    print(f"# {args.model} hidden {width} ({cfg['num_attention_heads']} heads x {cfg['attention_head_dim']}), "
          f"{blocks}, {math.prod(grid)} image + {args.text_len} text tokens, "
          f"bf16, one forward, CPU (torch {torch.__version__})")
    with tempfile.TemporaryDirectory(prefix="sporch-flux-bytes-") as tmp:
        if flux:
            res = flux_counts(cfg, tmp, grid=grid, text_len=args.text_len, sigma=0.5, guidance=4.0,
                              reference=not args.no_accuracy)
        else:
            res = wan_counts(cfg, tmp, grid=grid, text_len=args.text_len, timestep=500.0,
                             reference=not args.no_accuracy)
    print(table(res.sporch, res.diffusers))
    if res.reference is not None:
        for name, out in (("sporch", res.sporch_out), ("diffusers", res.diffusers_out)):
            e = compare(out.float(), res.reference)
            print(f"{name:<10} bf16 vs diffusers float32: max abs err {e['max_abs_err']:.3e}, "
                  f"max rel err {e['max_rel_err']:.3e} (max |ref| {e['ref_max_abs']:.3f})")
        e = compare(res.sporch_out.float(), res.diffusers_out.float())
        print(f"sporch bf16 vs diffusers bf16: max abs diff {e['max_abs_err']:.3e}, rel {e['max_rel_err']:.3e}")
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
