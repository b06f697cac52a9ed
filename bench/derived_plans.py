"""CPU: the split-plan derivation's table (docs/model.md, "Derived split plans").

    python bench/derived_plans.py [--cache DIR]

1. Derived or refused, and the largest relative error on 2 and 4 gloo ranks (float32, 15 image +
   6 text tokens): the classes of the families whose plan is derived (CogView4, Lumina 2, Chroma)
   and the specs of tests/runtime/models/derive_specs.py (SkyReels-V2 with diffusion forcing, since
   a family deriving from its own inputs; SANA, Mochi, HunyuanVideo 1.5; Z-Image, refused here, since
   a family with a shipped table), one world for all (runtime/derive_check.check).
2. Derived vs the shipped table or the class's own ``_cp_plan`` for every class with one: equal
   record for record, or the same cut (the largest difference between what every block receives on
   every rank under each, U2R2 on 4 gloo ranks), or where they differ (derive_check.compare).

Markdown tables on stdout. ``--cache``: also write the families' verdicts there (as a run would).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FAMILY_CLASSES = ("CogView4Transformer2DModel", "Lumina2Transformer2DModel", "ChromaTransformer2DModel")


def differences(a: dict, b: dict) -> str:
    """The modules whose entries differ: ``name (a's keys / b's keys)``."""
    def keys(e) -> str:
        return "-" if e is None else ",".join(map(str, e)) if isinstance(e, dict) else "gather"
    return "; ".join(f"{m or '(model)'} ({keys(a.get(m))} / {keys(b.get(m))})"
                     for m in dict.fromkeys([*a, *b]) if a.get(m) != b.get(m))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=None)
    args = parser.parse_args()

    import diffusers

    from sporch.orchestrator.models.families.derived_plans import write_verdict
    from sporch.runtime.derive_check import check, compare, family_spec
    from tests.runtime.models.derive_specs import CANDIDATES
    from tests.runtime.models.test_derived_plans import _shipped_pairs

    start = time.perf_counter()
    verdicts = check([family_spec(c) for c in FAMILY_CLASSES] + list(CANDIDATES.values()))
    print(f"| class | verdict | largest relative error, 2 ranks | 4 ranks | how (derived) or why (refused) |\n"
          f"|---|---|---|---|---|")
    for v in verdicts:
        errs = [f"{v.errors[n]:.1e}" if n in v.errors else "-" for n in (2, 4)]
        print(f"| {v.class_name} | {'derived' if v.exact else 'refused'} | {errs[0]} | {errs[1]} | "
              f"{v.note if v.exact else v.reason} |")
        if args.cache and v.class_name in FAMILY_CLASSES:
            write_verdict(v, args.cache)
    print(f"\n({time.perf_counter() - start:.0f} s)\n")
    start = time.perf_counter()
    pairs, literal = _shipped_pairs()
    print("| class | reference | entries that differ (derived / reference) | block inputs, max abs diff | outputs | "
          "where the cuts differ |\n|---|---|---|---|---|---|")
    for (spec, derived, reference, _), r in zip(pairs, compare(pairs)):
        if spec.class_name not in literal:
            continue
        own = "its _cp_plan" if getattr(getattr(diffusers, spec.class_name), "_cp_plan", None) else "shipped table"
        print(f"| {spec.class_name} | {own} | {differences(derived, reference) or 'none: equal'} | "
              f"{r['block_inputs']:.1e} | {r['output']:.1e} | {r['mismatch'] or '-'} |")
    print(f"\n({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
