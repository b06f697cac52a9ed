"""Host memory of loading an original-release checkpoint (about 1.1-1.4 GB in bfloat16), whole and
sharded over 2 gloo ranks: diffusers' converter run on the weights, and the one path's loader
(diffusers' converter run on row labels, each rank copying its rows).

    python bench/loader_memory.py [--model wan flux] [--folder DIR] [--loaders ...] [--wan-blocks N]

Checkpoints, written once (``--folder``, default a temporary folder removed after): a Wan2.1-1.3B
wide model (1536 wide, 12 heads, ffn 8960) of 12 blocks in Wan-Video's names with its config.json,
and a Flux.1-wide model (3072 wide, 24 heads) of 1 double + 2 single blocks in Black Forest Labs'
names, one file (diffusers' converter cuts its linear1 at exactly this width: no padding).
``--wan-blocks 1`` writes a Wan of one block (about 0.1 GB), a quick run of the code; Flux has no
smaller form here (the converter needs a double block, and the ``converter on weights`` loader a
3072-wide model).

Each loader runs in fresh processes (``run_distributed``: 1 rank, or 2 ranks with
``parallel.shard_weights=world``), loading in bfloat16 on the CPU; a thread samples
``/proc/self/status`` every millisecond. Printed per loader and layout, the worst rank:

* ``anon``: peak anonymous memory added by the load (the parameters, and any copy the load makes);
* ``file``: peak file-backed pages mapped (the checkpoint's pages read; the page cache, shared by
  the ranks of a node, not a copy);
* ``rss``: peak resident set added (``VmHWM`` minus the resident set before loading);
* ``held``: the parameter bytes the rank holds after the load (its shard);
* ``s``: wall seconds of the load.

Loaders: ``converter on weights``: the memory-mapped state dict given to diffusers' converter
as is, then each rank copying its rows from the converted tensors (what feeding the converter
directly costs: Flux's converter copies every q, k, v and MLP cut); ``one path``:
``generic.build.load_diffusers`` / ``generic.placed.load_sharded``. The hand-built loader
(``build_model`` / ``build_sharded`` with ``weights``, main's before the one path) was retired with the
hand-built stack; its last figures stay in docs/model.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WAN = dict(patch_size=(1, 2, 2), num_attention_heads=12, attention_head_dim=128, in_channels=16, out_channels=16,
           text_dim=4096, freq_dim=256, ffn_dim=8960, num_layers=12, cross_attn_norm=True,
           qk_norm="rms_norm_across_heads", eps=1e-6)
FLUX = dict(patch_size=1, in_channels=64, num_layers=1, num_single_layers=2, attention_head_dim=128,
            num_attention_heads=24, joint_attention_dim=4096, pooled_projection_dim=768, guidance_embeds=True,
            axes_dims_rope=(16, 56, 56))
LOADERS = ("converter on weights", "one path")
MIB = 1024 ** 2


def write_checkpoint(family: str, root: Path, wan_blocks: int = WAN["num_layers"]) -> Path:
    """The original-format checkpoint of ``family`` under ``root`` (random bf16 weights), once."""
    import json

    import torch
    from accelerate import init_empty_weights
    from safetensors.torch import save_file

    from tests.runtime.models.published import WAN_TO_ORIGINAL, flux_to_original, original_wan_config, to_original

    import diffusers

    folder = root / (family if family == "flux" or wan_blocks == WAN["num_layers"] else f"wan-{wan_blocks}")
    target = folder / ("diffusion_pytorch_model.safetensors" if family == "wan" else "flux1-wide.safetensors")
    if target.exists():
        return target if family == "flux" else folder
    cfg = dict(WAN, num_layers=wan_blocks) if family == "wan" else FLUX
    with init_empty_weights():
        model = getattr(diffusers, "WanTransformer3DModel" if family == "wan" else "FluxTransformer2DModel")(**cfg)
    shapes = {k: torch.empty(v.shape, device="meta") for k, v in model.state_dict().items()}
    names = to_original(shapes, WAN_TO_ORIGINAL) if family == "wan" else flux_to_original(shapes, cfg)
    g = torch.Generator().manual_seed(0)
    state = {k: (torch.randn(v.shape, generator=g) * 0.02).to(torch.bfloat16) for k, v in names.items()}
    folder.mkdir(parents=True, exist_ok=True)
    save_file(state, str(target))
    if family == "wan":
        (folder / "config.json").write_text(json.dumps({**original_wan_config(cfg), "text_dim": cfg["text_dim"], "patch_size": list(cfg["patch_size"])}))
        return folder
    return target


class Sampler:
    """Peak RssAnon / RssFile of this process, sampled every millisecond on a thread."""

    def __init__(self):
        self.peak = {"RssAnon": 0, "RssFile": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def status() -> dict[str, int]:
        out = {}
        with open("/proc/self/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("RssAnon", "RssFile", "VmRSS", "VmHWM"):
                    out[key] = int(rest.split()[0]) * 1024
        return out

    def _run(self):
        while not self._stop.is_set():
            now = self.status()
            for k in self.peak:
                self.peak[k] = max(self.peak[k], now[k])
            time.sleep(0.001)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def _converter_on_weights(path, ctx, mode, dtype):
    """diffusers' converter given the mapped weights as they are, then each rank its rows."""
    import torch
    from diffusers.loaders import single_file_utils

    from sporch.runtime.models.build import allocate, diffusers_class, meta_model
    from sporch.runtime.models.checkpoint import open_weights
    from sporch.runtime.models.mapped import MappedCheckpoint
    from sporch.runtime.models.shard_weights import shard_mesh, shard_model
    from sporch.runtime.models.shards import local_rows

    ckpt, fmt = open_weights(path)
    model = meta_model(diffusers_class(fmt.class_name), fmt.config, dtype)
    if ctx is not None:
        shard_model(model, shard_mesh(ctx, mode, torch.device("cpu")), forward_method=None)
    model = allocate(model, torch.device("cpu"))
    with MappedCheckpoint(ckpt) as mapped:
        converted = getattr(single_file_utils, fmt.original.converter)(mapped.state_dict())
        with torch.no_grad():
            for name, param in model.state_dict().items():
                local, rows = local_rows(param)
                value = converted.pop(name)
                local.copy_(value if rows is None else value[rows])
    return model


def _import_all() -> None:
    import diffusers  # noqa: F401
    from diffusers.loaders import single_file_utils  # noqa: F401

    from sporch.runtime.models import build, checkpoint, mapped, original, placed  # noqa: F401
    from sporch.runtime.models.shard_weights import shard_model  # noqa: F401

    for cls in ("WanTransformer3DModel", "FluxTransformer2DModel"):  # diffusers imports its classes lazily
        getattr(diffusers, cls)


def _measure(family, path, loader, sharded):
    import gc

    import torch
    from torch.distributed.tensor import DTensor

    from sporch.runtime.parallel import ParallelContext

    torch.set_num_threads(1)
    _import_all()  # every loader's modules imported before the baseline: only the load is measured
    ranks = torch.distributed.get_world_size()
    ctx = ParallelContext.from_layout(ulysses=ranks) if sharded else None
    dtype = torch.bfloat16
    gc.collect()
    before = Sampler.status()
    start = time.perf_counter()
    with Sampler() as sampler:
        if loader == "converter on weights":
            model = _converter_on_weights(path, ctx, "world", dtype)
        else:
            from sporch.runtime.models.build import load_diffusers
            from sporch.runtime.models.placed import load_sharded

            model = load_sharded(str(path), ctx, "world", dtype=dtype) if sharded else load_diffusers(str(path), dtype=dtype)
    seconds = time.perf_counter() - start
    after = Sampler.status()
    held = sum((p.to_local() if isinstance(p, DTensor) else p).numel() * p.element_size() for p in model.parameters())
    if ctx is not None:
        ctx.close()
    return {"anon": sampler.peak["RssAnon"] - before["RssAnon"], "file": sampler.peak["RssFile"] - before["RssFile"],
            "rss": after["VmHWM"] - before["VmRSS"], "held": held, "s": seconds}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", nargs="+", default=["wan", "flux"], choices=["wan", "flux"])
    p.add_argument("--folder", help="where the checkpoints are written (kept); default: a temporary folder")
    p.add_argument("--loaders", nargs="+", default=list(LOADERS), choices=LOADERS)
    p.add_argument("--wan-blocks", type=int, default=WAN["num_layers"],
                   help="the Wan's blocks (default 12, 1.09 GiB; 1: about 0.1 GiB, a quick run)")
    args = p.parse_args()
    from sporch.runtime.testing import run_distributed

    tmp = None if args.folder else tempfile.TemporaryDirectory()
    root = Path(args.folder or tmp.name)
    try:
        print(f"{'model':<6} {'GiB':>5} {'loader':<22} {'ranks':>5} {'anon MiB':>9} {'file MiB':>9} {'rss MiB':>8} "
              f"{'held MiB':>9} {'s':>6}")
        for family in args.model:
            path = write_checkpoint(family, root, args.wan_blocks)
            size = sum(f.stat().st_size for f in (path.glob("*.safetensors") if path.is_dir() else [path]))
            for loader in args.loaders:
                for ranks in (1, 2):
                    res = run_distributed(_measure, ranks, family, path, loader, ranks > 1, timeout=1800, threads=1)
                    worst = {k: max(r[k] for r in res) for k in res[0]}
                    print(f"{family:<6} {size / 1024 ** 3:>5.2f} {loader:<22} {ranks:>5} {worst['anon'] / MIB:>9.0f} "
                          f"{worst['file'] / MIB:>9.0f} {worst['rss'] / MIB:>8.0f} {worst['held'] / MIB:>9.0f} "
                          f"{worst['s']:>6.1f}", flush=True)
    finally:
        if tmp is not None:
            tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
