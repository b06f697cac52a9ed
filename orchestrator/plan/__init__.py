"""Planning: cluster + job -> Plan.

``schema``, ``sections`` and ``rules`` are stdlib-only (the runtime imports them); ``make_plan``
lives in ``orchestrator.plan.planner`` and is imported lazily so the runtime never pulls in
OmegaConf.
"""

from orchestrator.plan.rules import DIMS, Dim
from orchestrator.plan.schema import SCHEMA_VERSION, Layout, Plan, RankInfo

__all__ = ["DIMS", "Dim", "SCHEMA_VERSION", "Layout", "Plan", "RankInfo"]
