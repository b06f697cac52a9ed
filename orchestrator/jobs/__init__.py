"""Submitted jobs: records (:mod:`.store`), where they stand (:mod:`.status`: Slurm's rows from
:mod:`sporch.orchestrator.slurm.rows`, a local run's from :mod:`.local_state`) and how they failed
(:mod:`.diagnosis`, with :mod:`.batchlog`).

Standard library only (plus sporch.orchestrator.slurm): ``sporch status/logs/cancel/wait`` stay fast.
Below :mod:`sporch.orchestrator.submit`: nothing here imports it.
"""
