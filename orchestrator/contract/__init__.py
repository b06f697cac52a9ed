"""The contract at the bottom of sporch: what the orchestrator and the runtime agree on.

Standard library only, imported by both sides (the runtime imports nothing else of the
orchestrator). Each module holds one subject:

- :mod:`.plan`, :mod:`.sections`  the Plan (frozen dataclasses, JSON round trip, schema version)
- :mod:`.files`             where a job's files live (plan.json, logs, ranks/, result.json, checkpoint/)
- :mod:`.results`           typed rank records and job results, written and read atomically
- :mod:`.parallel`          parallel dimensions, head split, KV mode, padded sequence length
- :mod:`.vocab`             the closed word sets of job and cluster files
- :mod:`.exit_codes`        exit codes of ranks and commands
- :mod:`.durations`         Slurm time limits and the seconds rule
- :mod:`.settings`          every environment variable sporch reads (the only reader of SPORCH_*)
- :mod:`.benchstats`        benchmark figures written into result.json
- :mod:`.checkpoint_files`  where a checkpoint's tensors are (safetensors headers, index)
- :mod:`.generate_inputs`   what a generate job needs on disk (pipeline folders, prompts)
- :mod:`.models`            the named models: presets (shapes, knobs) and checkpoint name tables, one module per family
"""
