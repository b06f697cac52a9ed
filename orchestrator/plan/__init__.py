"""Planning: cluster + job -> Plan.

``schema`` is stdlib-only (the runtime imports it); ``make_plan`` lives in
``orchestrator.plan.planner`` and is imported lazily so the runtime never pulls in OmegaConf.
"""

from orchestrator.plan.schema import DIMS, SCHEMA_VERSION, Layout, Plan, RankInfo

__all__ = ["DIMS", "SCHEMA_VERSION", "Layout", "Plan", "RankInfo"]
