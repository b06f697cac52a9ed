"""Planning: cluster + job -> Plan (``planner.make_plan``), the layouts that fit, the cost model.

The Plan itself and the rules both sides apply live in :mod:`sporch.orchestrator.contract`.
"""
