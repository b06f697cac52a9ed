"""Parameter memory per rank with a diffusers transformer's parameters sharded (FSDP2) or not, on 4
gloo ranks.

    python bench/shard_weights_memory.py [--ranks 4]

For each model (``WanTransformer3DModel``, cross attention, and ``FluxTransformer2DModel``, joint
attention, a few sizes), each rank builds the model with sporch's ``build_transformer`` (what a run
loads; seeded random weights) with ``parallel.shard_weights`` none and sequence (= world here: one
replica of ``--ranks`` ranks, ulysses = ranks), runs one forward through sporch's runner
(``ShardedTransformer``) and reports, per rank (the busiest):

- resident: parameter bytes held between forwards (the local shards),
- peak: the most parameter bytes held at any block boundary during the forward (the shards,
  plus the units gathered or being gathered then: the running block, the prefetched next one,
  the root),
- goal: 1/ranks of the parameters + one block + 10% (the issue's bound for resident).

Bytes are counted from the tensors (numel x element size), not from the allocator: exact and
the same on every run, so there is nothing to time.
"""

from __future__ import annotations

import argparse

#: (label, diffusers class, config)
MODELS = [
    ("wan d8 h256", "WanTransformer3DModel",
     dict(patch_size=(1, 2, 2), num_attention_heads=4, attention_head_dim=64, in_channels=16, out_channels=16,
          text_dim=256, freq_dim=256, ffn_dim=1024, num_layers=8, cross_attn_norm=True,
          qk_norm="rms_norm_across_heads", eps=1e-6)),
    ("wan d16 h512", "WanTransformer3DModel",
     dict(patch_size=(1, 2, 2), num_attention_heads=8, attention_head_dim=64, in_channels=16, out_channels=16,
          text_dim=512, freq_dim=256, ffn_dim=2048, num_layers=16, cross_attn_norm=True,
          qk_norm="rms_norm_across_heads", eps=1e-6)),
    ("flux d4+8 h256", "FluxTransformer2DModel",
     dict(patch_size=1, in_channels=16, num_layers=4, num_single_layers=8, attention_head_dim=64,
          num_attention_heads=4, joint_attention_dim=256, pooled_projection_dim=64, guidance_embeds=True,
          axes_dims_rope=(16, 24, 24))),
]
GRID = (2, 4, 4)
TEXT_LEN = 8


def _measure(models):
    import torch

    from sporch.orchestrator.models.families import require_family
    from sporch.runtime.models.blocks import block_lists
    from sporch.runtime.models.runner import ShardedTransformer
    from sporch.runtime.models.families import family_module
    from sporch.runtime.models.placed import build_transformer
    from sporch.runtime.models.shard_weights import ParameterPeak, resident_parameter_bytes
    from sporch.runtime.parallel import ParallelContext

    out = []
    ranks = torch.distributed.get_world_size()
    ctx = ParallelContext.from_layout(ulysses=ranks)
    for label, cls, config in models:
        row = {"model": label}
        family = require_family(cls).name
        inputs = family_module(family).inputs(config, batch=1, grid=GRID, text_len=TEXT_LEN,
                                              generator=torch.Generator().manual_seed(0))
        for mode in ("none", "sequence"):
            model = build_transformer(weights=None, class_name=cls, config=config, ctx=ctx, shard_weights=mode, seed=1)
            runner = ShardedTransformer(model, ctx)
            resident = resident_parameter_bytes(model)
            with ParameterPeak(model) as peak:
                runner.forward(**inputs)
            row[mode] = (resident, peak.bytes)
            if mode == "none":
                row["full"] = resident
                row["block"] = max(sum(p.numel() * p.element_size() for p in b.parameters())
                                   for _, blocks in block_lists(model) for b in blocks)
        out.append(row)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=4)
    args = p.parse_args()
    from sporch.runtime.testing import run_distributed

    per_rank = run_distributed(_measure, args.ranks, MODELS, timeout=600)
    mib = 1024**2
    print(f"{'model':<17} {'params MiB':>10} {'block MiB':>9} {'unsharded':>10} {'sharded':>8} {'ratio':>6} "
          f"{'goal MiB':>8} {'peak MiB':>8} {'peak ratio':>10} {'ok':>3}")
    worst_ok = True
    for i, (label, _, _) in enumerate(MODELS):
        rows = [r[i] for r in per_rank]
        full, block = rows[0]["full"], rows[0]["block"]
        resident = max(r["sequence"][0] for r in rows)
        peak = max(r["sequence"][1] for r in rows)
        goal = (full / args.ranks + block) * 1.10
        ok = resident <= goal
        worst_ok &= ok
        print(f"{label:<17} {full / mib:>10.2f} {block / mib:>9.2f} {rows[0]['none'][0] / mib:>10.2f} "
              f"{resident / mib:>8.2f} {resident / full:>6.3f} {goal / mib:>8.2f} {peak / mib:>8.2f} "
              f"{peak / full:>10.3f} {'yes' if ok else 'NO':>3}")
    return 0 if worst_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
