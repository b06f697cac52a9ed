"""Benchmarking campaigns: one YAML sweep -> points -> job arrays -> result files -> report.

Modules (each one job, torch-free; docs/campaigns.md describes the file and the commands):

- :mod:`.spec`       the typed campaign file (``campaign.yaml``) and its loading
- :mod:`.expand`     the matrix -> points through the planner (skipped points keep its reason)
- :mod:`.groups`     points grouped by identical Slurm resources (one job array per group)
- :mod:`.references` ReFrame-style references: selection and pass / fail / no reference
- :mod:`.folder`     the campaign directory (the one place that names its files)
- :mod:`.arrays`     the sbatch job-array script of one group
- :mod:`.lock`       one runner per campaign directory (flock, holder named)
- :mod:`.track`      state.json and one poll of the queue (one squeue for all arrays)
- :mod:`.runner`     campaign run: prepare, submit one array per group (or --local), wait
- :mod:`.collect`    rows of the report, from the result files alone
- :mod:`.report`     table, CSV, plots (PNG + their data as JSON), the HTML page
- :mod:`.compare`    regressions between two campaign directories
- :mod:`.history_runs`     a campaign directory's completed runs (Run), read from its files
- :mod:`.history_store`    every completed run in a SQLite store: where it lives, its schema, Store
- :mod:`.history_record`   recording campaign directories into the store; its rebuild from files
- :mod:`.history_trends`   a point's runs over time: rolling baselines, regressions, what changed
- :mod:`.history_baseline` a campaign directory's runs against their baselines in the store
- :mod:`.history_view`     a point's trend as plain data (history --json, the report), one-line texts
- :mod:`.calibration_points` completed points as observations for the cost model's fit
"""
