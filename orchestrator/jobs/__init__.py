"""Submitted jobs: records (:mod:`.store`) and their state (:mod:`.status`).

Standard library only (plus sporch.orchestrator.slurm): ``sporch status/logs/cancel/wait`` stay fast.
"""
