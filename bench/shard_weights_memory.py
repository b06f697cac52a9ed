"""Parameter memory per rank with the DiT's parameters sharded (FSDP2) or not, on 4 gloo ranks.

    python bench/shard_weights_memory.py [--ranks 4]

For each model (Wan-like cross attention and Flux-like joint attention, a few sizes), each rank
builds the model with ``parallel.shard_weights`` none, sequence (= world here: one replica of
``--ranks`` ranks, ulysses = ranks), runs one forward and reports, per rank (the busiest):

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

MODELS = [
    ("cross d8 h256", "cross", dict(depth=8, hidden=256, num_heads=4, num_kv_heads=4, head_dim=64, ffn_dim=1024)),
    ("cross d16 h512", "cross", dict(depth=16, hidden=512, num_heads=8, num_kv_heads=8, head_dim=64, ffn_dim=2048)),
    ("joint d4+8 h256", "joint", dict(depth=4, single_depth=8, hidden=256, num_heads=4, num_kv_heads=4, head_dim=64,
                                      ffn_dim=1024)),
]


def _measure(models):
    import torch

    from sporch.runtime.model import ShardedDiT, build_sharded, make_inputs, resident_parameter_bytes, tiny_model_dict
    from sporch.runtime.model.base import block_lists
    from sporch.runtime.model.shard_weights import ParameterPeak
    from sporch.runtime.parallel import ParallelContext

    out = []
    ranks = torch.distributed.get_world_size()
    ctx = ParallelContext.from_layout(ulysses=ranks)
    for label, kind, over in models:
        md = tiny_model_dict(kind, **over)
        row = {"model": label}
        for mode in ("none", "sequence"):
            model = build_sharded(md, ctx, mode, seed=1)
            runner = ShardedDiT(model, ctx, grid=(2, 4, 4))
            inp = make_inputs(model, (2, 4, 4), 1, 0, ctx)
            resident = resident_parameter_bytes(model)
            with ParameterPeak(model) as peak:
                runner.forward(inp.noise, torch.tensor([500.0]), inp.cond)
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
