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
- :mod:`.report`     the report folder: CSV, plots and the HTML page written together
- :mod:`.report_files`       the report folder's file names; each file written whole or not at all
- :mod:`.report_csv`         the table as CSV (table.csv)
- :mod:`.report_plot_data`   the series every plot draws (plots.json), from the rows alone
- :mod:`.report_plot_images` the plots as PNG files, drawn from that data only
- :mod:`.report_columns`     the groups the page's table columns are shown or hidden in
- :mod:`.report_cells`       reference checks and published points with their cells as text
- :mod:`.report_page`        the one self-contained HTML page (report.html)
- :mod:`.compare`    regressions between two campaign directories
- :mod:`.history_runs`     a campaign directory's completed runs (Run), read from its files
- :mod:`.history_store`    every completed run in a SQLite store: where it lives, its schema, Store
- :mod:`.history_record`   recording campaign directories into the store; its rebuild from files
- :mod:`.history_trends`   a point's runs over time: rolling baselines, regressions, what changed
- :mod:`.history_baseline` a campaign directory's runs against their baselines in the store
- :mod:`.history_view`     a point's trend as plain data (history --json, the report), one-line texts
- :mod:`.history_plot`     points' trends drawn as one PNG (history --plot, the report page)
- :mod:`.calibration_points` completed points as observations for the cost model's fit
"""
