"""The modules of a ``plan.model`` a LoRA may target, by the family's name table (stdlib only): at
plan time, where no state dict exists (sporch.orchestrator.plan.adapters passes them to
:func:`~.lora_targets.map_targets`).
"""

from __future__ import annotations

from typing import Any, Mapping

from sporch.orchestrator.models.lora_targets import FAMILIES


def module_names(model: Mapping[str, Any]) -> set[str]:
    """sporch's linear modules of a ``plan.model`` dict, by the family's name table: the block
    rules for each block index, and the optional inputs only where the model has them (Wan's
    image embedding, Flux's guidance embedding)."""
    table = FAMILIES.get(model.get("attention", ""))
    if table is None:
        return set()
    image = bool((model.get("diffusers_config") or {}).get("image_dim"))
    guidance = bool(model.get("guidance_embed"))  # the planner records it for every preset and checkpoint
    counts = {"blocks.": model.get("depth", 0), "double_blocks.": model.get("depth", 0),
              "single_blocks.": model.get("single_depth", 0)}
    names = set()
    for r in table.rules:
        if r.ours.startswith(("img_emb.",)) or "_img" in r.ours:
            if not image:
                continue
        if r.ours.startswith("guidance_in.") and not guidance:
            continue
        if "{i}" in r.ours:
            n = next(int(c) for prefix, c in counts.items() if r.ours.startswith(prefix))
            names.update(r.ours.replace("{i}", str(i)) for i in range(n))
        else:
            names.add(r.ours)
    return names
