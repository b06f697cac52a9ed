"""The contract at the bottom of sporch: the Plan and result schema the orchestrator and the
runtime agree on.

Standard library only, imported by both sides. Each module holds one subject:

- :mod:`.plan`, :mod:`.sections`  the Plan (frozen dataclasses, JSON round trip, schema version)
- :mod:`.job_files`         where a job's files live (plan.json, logs, ranks/, result.json, checkpoint/)
- :mod:`.results`           typed rank records and job results, written and read atomically
- :mod:`.step_cache_summary` result.json's ``step_cache``
- :mod:`.parallel`          parallel dimensions, head split, KV mode, padded sequence length
- :mod:`.vocab`             the closed word sets of job and cluster files
- :mod:`.exit_codes`        exit codes of ranks and commands
- :mod:`.durations`         Slurm time limits and the seconds rule
- :mod:`.preflight_checks`  what every node must agree on before a job loads its weights
- :mod:`.quant`             which GPUs run float8, a quantised model's bytes
- :mod:`.settings`          every environment variable sporch reads (the only reader of SPORCH_*)

Beside it, as torch-free and also imported by the runtime (docs/architecture.md):
:mod:`sporch.orchestrator.models` (the named models and the readers of their files: checkpoints,
config.json, LoRA adapters), :mod:`sporch.orchestrator.safe_files`,
:mod:`sporch.orchestrator.hangs` and :mod:`sporch.orchestrator.benchstats`.
"""
