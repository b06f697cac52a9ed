"""Planning: cluster + job -> Plan."""

from orchestrator.plan.schema import DIMS, SCHEMA_VERSION, Layout, Plan, RankInfo

__all__ = ["DIMS", "SCHEMA_VERSION", "Layout", "Plan", "RankInfo"]
