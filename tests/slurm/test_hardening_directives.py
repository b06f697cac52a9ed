"""Issue 24 item 9: '%' and quotes in job and campaign folders.

Slurm expands '%' in ``--output``/``--error`` (sbatch's #SBATCH lines and srun's options), so a
folder's '%' is written as '%%' there; sbatch strips quotes on #SBATCH lines and refuses an
unmatched one, so a folder with a quote is refused when the job is planned (exit 2, one line).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sporch.orchestrator.campaign.spec import campaign_from_dict
from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.slurm.directives import filename_pattern
from sporch.orchestrator.submit.slurm_job import SlurmJob

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "examples" / "tiny.yaml")


def _sporch(home: Path, *args, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, SPORCH_HOME=str(home), COLUMNS="300")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.pop("SPORCH_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", *map(str, args)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout)


def test_filename_pattern_doubles_percent():
    assert filename_pattern("/runs/a%b/%j") == "/runs/a%%b/%%j"
    assert filename_pattern("/runs/plain") == "/runs/plain"


@pytest.mark.parametrize("folder", ["it's", 'say"hi"', "two words", "back\\slash"])
def test_unquotable_output_dir_refused_at_plan_time(folder):
    with pytest.raises(SporchError, match="'output_dir' .* cannot stand on an #SBATCH line"):
        job_from_dict({"name": "x", "output_dir": folder, "workload": {"seq_len": 64}})
    with pytest.raises(SporchError, match="'output_dir' .* cannot stand on an #SBATCH line"):
        campaign_from_dict({"name": "c", "output_dir": folder, "base": {"name": "x", "workload": {"seq_len": 64}},
                            "matrix": {"clusters": ["slurmlab"]}})


def test_single_quote_job_dir_is_not_a_directive_value():
    from sporch.orchestrator.slurm.directives import check_directive_value

    with pytest.raises(SporchError, match="quotes"):
        check_directive_value("job dir", "/runs/it's")


def test_render_refuses_a_quote_in_output_dir_with_one_line(tmp_path):
    p = _sporch(tmp_path / "home", "render", "--cluster", "slurmlab", TINY, f"output_dir={tmp_path}/it's")
    assert p.returncode == 2, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "output_dir" in lines[0] and "Traceback" not in p.stderr
    assert not (tmp_path / "it's").exists()


def test_render_escapes_percent_in_output_lines(tmp_path):
    # render claims its --job-dir (it writes plan.json there), so the folder lives under tmp_path
    job = tmp_path / "a%b" / "JOB"
    p = _sporch(tmp_path / "home", "render", "--cluster", "slurmlab", TINY, "--job-dir", str(job))
    assert p.returncode == 0, p.stderr
    text, doubled = p.stdout, str(job).replace("%", "%%")
    assert f"#SBATCH --output={doubled}/logs/%j.out" in text
    assert f"#SBATCH --error={doubled}/logs/%j.err" in text
    assert f"--output={doubled}/logs/%j_%t.out" in text
    assert f"export SPORCH_JOB_DIR={job}" in text  # shell lines keep the folder as it is
    assert (job / "plan.json").is_file()


def test_campaign_array_doubles_percent_of_point_folders():
    from sporch.orchestrator.campaign.arrays import render_array
    from sporch.orchestrator.config.cluster import find_cluster
    from sporch.orchestrator.plan.planner import make_plan

    from sporch.orchestrator.config.job import load_job

    job = load_job(TINY)
    plan = make_plan(find_cluster("slurmlab"), job)
    text = render_array(plan, campaign="c", group="g", root="/c/a%b", list_path="/c/a%b/arrays/g.1.list", count=2)
    assert "#SBATCH --output=/c/a%%b/arrays/logs/%A_%a.out" in text
    assert 'LOG_DIR="${POINT_DIR//[%]/%%}/logs"' in text and '--output="$LOG_DIR/%j_%t.out"' in text
    plain = render_array(plan, campaign="c", group="g", root="/c/ab", list_path="/c/ab/arrays/g.1.list", count=2)
    assert "LOG_DIR" not in plain and '--output="$POINT_DIR/logs/%j_%t.out"' in plain


@pytest.mark.slurm
@pytest.mark.slow
def test_job_in_a_percent_folder_completes_on_the_lab(slurm_cluster, tmp_path, scancel_recorded):
    home, runs = tmp_path / "home", tmp_path / "runs%x"
    try:
        p = _sporch(home, "submit", "--json", "--cluster", "slurmlab", TINY, f"output_dir={runs}",
                    "workload.kind=verify", "name=pct", "resources.nodes=1", "--via", "sbatch")
        assert p.returncode == 0, p.stderr
        rec = json.loads(p.stdout)
        p = _sporch(home, "wait", rec["id"], "--interval", "1", "--timeout", "500", timeout=530)
        assert f"{rec['id']}: COMPLETED" in p.stdout, p.stdout + p.stderr
        logs = Path(rec["job_dir"]) / "logs"
        assert "%x" in rec["job_dir"]
        assert (logs / f"{rec['backend_job_id']}.out").exists()  # the batch output, at the literal folder
        assert (logs / f"{rec['backend_job_id']}_0.out").exists()  # rank 0's srun output
    finally:
        scancel_recorded((home / "jobs").glob("*.json"))
