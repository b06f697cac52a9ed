"""Which transformer of a two-expert model (Wan2.2 A14B) each ``plan.model.lora`` entry adapts
(stdlib only; read by the runtime's pipelines and workloads).
"""

from __future__ import annotations

from typing import Optional

from sporch.orchestrator.contract.vocab import LORA_EXPERTS


#: Which transformer of a two-expert model (Wan2.2 A14B) an entry of ``model.lora`` adapts.
EXPERTS = LORA_EXPERTS


def for_expert(entries: Optional[list], index: int) -> list:
    """The ``plan.model.lora`` entries that adapt transformer ``index`` (0: ``transformer``, the
    only one of most models; 1: Wan2.2's ``transformer_2``)."""
    return [e for e in entries or () if e.get("expert", "both") in ("both", EXPERTS[1 + index])]
