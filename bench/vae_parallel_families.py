"""The row-parallel VAE decode on every generic family's tiny VAE (docs/generate.md, "Generic
families": ``pipeline.vae: parallel``): max abs error against one process's ``vae.decode`` of the
whole latent, float32, on 2 and 4 gloo CPU ranks, latents of 6 and 7 rows (7 over 4 ranks: bands of
2, 2, 2, 1), through ``decode_rows(parallelize_decoder(vae))`` and through ``row_parallel_vae``
(what the generic generate hands its pipeline); beside it each float32 decode's distance from a
float64 decode of the same VAE.

    python bench/vae_parallel_families.py                          # the five generic families
    python bench/vae_parallel_families.py --families hunyuanvideo --ranks 2 --rows 9
"""

from __future__ import annotations

import argparse
import copy

import torch

#: each family's latent (None: the rows), as its pipeline hands it to vae.decode
SHAPES = {"sd3": (1, 4, None, 8), "qwen-image": (1, 4, 1, None, 8), "cogvideox": (1, 4, 3, None, 8),
          "ltx-video": (1, 8, 2, None, 3), "hunyuanvideo": (1, 4, 3, None, 8)}


def tiny_vae(family: str) -> torch.nn.Module:
    from sporch.runtime.models.families import family_module

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return family_module(family).tiny_pipeline(0).vae.float().eval()


def _decode(vae, z):
    return vae.decode(z, return_dict=False)[0]


@torch.no_grad()
def work(family: str, rows: int, vae) -> dict:
    from sporch.runtime.pipelines.vae_parallel.decode import decode_rows, row_parallel_vae
    from sporch.runtime.pipelines.vae_parallel.surgery import parallelize_decoder

    z = torch.randn(tuple(rows if s is None else s for s in SHAPES[family]), generator=torch.Generator().manual_seed(2))
    whole = _decode(vae, z)
    rows_out = decode_rows(parallelize_decoder(vae, None), z, None, _decode)
    pipe_out = _decode(row_parallel_vae(vae, None), z)
    exact = _decode(copy.deepcopy(vae).double(), z.double())
    return {"decode_rows": (rows_out - whole).abs().max().item(), "row_parallel_vae": (pipe_out - whole).abs().max().item(),
            "single_vs_f64": (whole.double() - exact).abs().max().item(),
            "parallel_vs_f64": (rows_out.double() - exact).abs().max().item(), "max_abs_output": whole.abs().max().item()}


def main() -> None:
    from sporch.runtime.testing import run_distributed

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--ranks", nargs="+", type=int, default=[2, 4])
    ap.add_argument("--rows", nargs="+", type=int, default=[6, 7])
    args = ap.parse_args()
    print("family        ranks rows  decode_rows  row_parallel_vae  single-vs-f64  parallel-vs-f64  max|out|")
    for family in args.families:
        vae = tiny_vae(family)
        for n in args.ranks:
            for rows in args.rows:
                res = run_distributed(work, n, family, rows, vae, timeout=600)
                worst = {k: max(r[k] for r in res) for k in res[0]}
                print(f"{family:13s} {n:5d} {rows:4d}  {worst['decode_rows']:11.3g}  {worst['row_parallel_vae']:16.3g}  "
                      f"{worst['single_vs_f64']:13.3g}  {worst['parallel_vs_f64']:15.3g}  {worst['max_abs_output']:8.3g}",
                      flush=True)


if __name__ == "__main__":
    main()
