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
- :mod:`.history`    every completed run in a SQLite store: trends, rolling baselines, rebuild
- :mod:`.calibration_points` completed points as observations for the cost model's fit
"""
