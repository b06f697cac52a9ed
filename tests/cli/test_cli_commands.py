from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sporch.orchestrator.contract.plan import Plan
from tests.testutil import EXAMPLES, ROOT, write

WAN14B = str(EXAMPLES / "wan14b-720p.yaml")
TINY = str(EXAMPLES / "tiny.yaml")
FLUX = str(EXAMPLES / "flux-2048.yaml")


def test_help_lists_commands(run_cli):
    code, out, _ = run_cli("--help")
    assert code == 0
    for name in ("clusters", "plan", "render", "submit"):
        assert name in out


def test_clusters_list_and_show(run_cli):
    code, out, _ = run_cli("clusters", "list")
    assert code == 0
    for name in ("a100x8", "a100x32", "h100x64", "h200x16", "l40x16", "local", "slurmlab"):
        assert name in out
    assert "builtin:" in out
    code, out, _ = run_cli("clusters", "show", "a100x32")
    assert code == 0 and "gpus_per_node: 8" in out and "NCCL_IB_HCA" in out
    code, out, _ = run_cli("clusters", "show", "l40x16", "--json")
    assert code == 0 and json.loads(out)["inter_node"]["fabric"] == "ethernet"


def test_plan_table(run_cli):
    code, out, err = run_cli("plan", "--cluster", "a100x32", WAN14B)
    assert code == 0, err
    assert "dp 1 x cfg 1 x ring 4 x ulysses 8 = 32" in out
    assert "75,600 tokens, split unevenly" in out and "2,362-2,363 per rank" in out and "padded to" not in out
    for word in ("groups", "ranks (32)", "estimates", "seq idx", "all-to-all"):
        assert word in out


def test_plan_big_world_is_abridged(run_cli):
    code, out, _ = run_cli("plan", "-c", "h100x64", WAN14B)
    assert code == 0 and "omitted" in out and "--all-ranks" in out
    code, out, _ = run_cli("plan", "-c", "h100x64", WAN14B, "--all-ranks")
    assert code == 0 and "omitted" not in out


def test_plan_json(run_cli):
    code, out, _ = run_cli("plan", "--cluster", "a100x32", WAN14B, "parallel.cfg=2", "parallel.ring=2", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["layout"] == {"dp": 1, "cfg": 2, "ring": 2, "ulysses": 8}
    assert d["world_size"] == 32 and len(d["ranks"]) == 32
    assert d["groups"]["ulysses"][0] == list(range(8))
    assert Plan.from_dict(d).layout.cfg == 2


def test_render(run_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    jd = tmp_path / "x" / "job"
    code, out, _ = run_cli("render", "-c", "slurmlab", TINY, "parallel.ulysses=2", "parallel.ring=4",
                           "--job-dir", jd)
    assert code == 0 and out.startswith("#!/bin/bash") and f"export SPORCH_PLAN={jd}/plan.json" in out
    # the plan the script points at is there, and it is this job's
    assert Plan.load(str(jd / "plan.json")).layout.ring == 4 and (jd / "logs").is_dir()
    dest = tmp_path / "job.sbatch"
    code, out, err = run_cli("render", "-c", "local", TINY, "-o", dest)
    assert code == 0 and dest.read_text().startswith("#!/bin/bash") and "wrote" in err
    [plan_file] = (tmp_path / "runs" / "tiny").glob("*/plan.json")  # the default job dir, under the cwd
    assert f"export SPORCH_PLAN={plan_file}" in dest.read_text()


def test_render_out_dir_can_be_submitted_as_is(run_cli, tmp_path):
    out_dir = tmp_path / "job"
    code, out, err = run_cli("render", "-c", "slurmlab", TINY, "--out", out_dir)
    assert code == 0, err
    assert (out_dir / "job.sbatch").read_text() == out
    assert f"export SPORCH_PLAN={out_dir}/plan.json" in out and f"#SBATCH --output={out_dir}/logs/%j.out" in out
    assert Plan.load(str(out_dir / "plan.json")).job.name == "tiny"
    code, out, err = run_cli("render", "-c", "slurmlab", TINY, "--out", out_dir)
    assert code == 2 and "not empty" in err


def test_submit_dry_run_writes_nothing(run_cli, tmp_path, monkeypatch):
    """Issue 32 item 5: a dry run leaves nothing behind, not even a temporary folder."""
    monkeypatch.chdir(tmp_path)
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmpdir))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))
    code, out, err = run_cli("submit", "--dry-run", "--cluster", "a100x32", WAN14B)
    assert code == 0, err
    assert "nothing submitted" in out and "sbatch --parsable" in out and "#!/bin/bash" in out
    assert "srun --kill-on-bad-exit=1" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tmp"]  # nothing in the cwd
    # nor a sporch-dryrun-* folder in the temporary folder (jinja2's template cache may be there)
    assert [p.name for p in tmpdir.iterdir() if "jinja2" not in p.name] == []
    assert "not written" in out


def test_submit_to_a_remote_login_cluster_is_refused_before_anything_is_written(run_cli, tmp_path):
    remote = tmp_path / "remote.yaml"
    remote.write_text((ROOT / "clusters" / "a100x8.yaml").read_text()
                      + "login: {host: login.example.org, user: me, workdir: /scratch/me}\n")
    code, _, err = run_cli("submit", "-c", str(remote), TINY, "parallel.ulysses=8", "--job-dir", str(tmp_path / "job"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "job").exists()


@pytest.mark.parametrize(
    "args,needle",
    [
        (["plan", "-c", "a100x33", WAN14B], "known clusters: a100-40gx32, a100x32"),
        (["plan", "-c", "a100x32", WAN14B, "parallel.ring=2"], "feasible (dp x cfg x ring x ulysses)"),
        (["plan", "-c", "a100x32", WAN14B, "parallel.rnig=2"], "'parallel.rnig'"),
        (["plan", "-c", "a100x32", WAN14B, "workload.batch=x"], "'workload.batch'"),
        (["plan", "-c", "a100x32", WAN14B, "model.preset=wan3"], "presets: wan2.1-t2v-1.3b"),
        (["plan", "-c", "a100x32", "/no/such/job.yaml"], "no such file"),
        (["render", "-c", "local", TINY, "parallel.cfg=3"], "cfg must be 1 or 2"),
        (["submit", "--dry-run", "-c", "local", TINY, "model.num_heads=3", "model.head_dim=8",
          "model.hidden=24", "parallel.ulysses=4"], "ulysses 4 > num_heads 3"),
        (["plan", "-c", "a100x32", FLUX, "workload.guidance_scale=3.5", "parallel.cfg=2", "parallel.ring=2"],
         "cfg 2: flux.1-dev is guidance-distilled"),
        (["submit", "--dry-run", "-c", "a100x32", FLUX, "parallel.cfg=2", "parallel.ring=2"],
         "set parallel.cfg=1; feasible (dp x cfg x ring x ulysses): 1x1x"),
        (["plan", "-c", "a100x32", FLUX, "model.preset=flux.1-schnell", "workload.guidance_scale=3.5"],
         "set workload.guidance_scale <= 1"),
        (["submit", "--dry-run", "-c", "local", TINY, "model.vae_stride=[8,8]"],
         "'model.vae_stride' must be three positive ints [temporal, height, width]"),
    ],
)
def test_bad_input_one_line_exit_2(run_cli, args, needle):
    code, out, err = run_cli(*args)
    assert code == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-5", "0", "1e999", "soon"])
@pytest.mark.parametrize(
    "args,option",
    [
        (["run", "--local", "-c", "local", TINY, "--timeout"], "--timeout"),
        (["wait", "nosuchjob", "--timeout"], "--timeout"),
        (["wait", "nosuchjob", "--interval"], "--interval"),
        (["logs", "nosuchjob", "--interval"], "--interval"),
        (["campaign", "run", "nosuch.yaml", "--interval"], "--interval"),
    ],
)
def test_seconds_options_refuse_non_finite_and_non_positive(run_cli, tmp_path, monkeypatch, args, option, value):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(*args, value)
    assert code == 2 and not out
    assert f"Invalid value for '{option}': must be a finite number of seconds" in err and repr(value) in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # refused before anything ran or was written


@pytest.mark.parametrize("args", [["wait", "nosuchjob"], ["status", "nosuchjob"]])
@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_grace_refuses_non_finite_and_negative(run_cli, args, value):
    code, _, err = run_cli(*args, "--grace", value)
    assert code == 2 and "Invalid value for '--grace': must be a finite number of seconds >= 0" in err
    assert len(err.strip().splitlines()) == 1


def test_seconds_type_accepts_finite_values_in_range():
    import click

    from sporch.orchestrator.cli.common import GRACE_SECONDS, POSITIVE_SECONDS, Seconds

    assert POSITIVE_SECONDS.convert("1.5", None, None) == 1.5 and POSITIVE_SECONDS.convert(600, None, None) == 600.0
    assert GRACE_SECONDS.convert("0", None, None) == 0.0  # no grace: give up at the first outage
    assert Seconds(0.1, inclusive=True).convert("0.1", None, None) == 0.1
    with pytest.raises(click.BadParameter, match=">= 0.1, got '0.09'"):
        Seconds(0.1, inclusive=True).convert("0.09", None, None)


def test_bad_yaml_file(run_cli, tmp_path):
    p = write(tmp_path, "j.yaml", "model: {preset: tiny\n")
    code, _, err = run_cli("plan", "-c", "local", p)
    assert code == 2 and "YAML syntax error" in err and str(p) in err


def test_debug_shows_traceback():
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", "--debug", "plan", "-c", "nope", TINY],
                       capture_output=True, text=True, cwd=ROOT, env=env)
    assert r.returncode != 0 and "Traceback" in r.stderr and "SporchError" in r.stderr
    r = subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", "plan", "-c", "nope", TINY],
                       capture_output=True, text=True, cwd=ROOT, env=env)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_commands_are_registered_lazily():
    from sporch.orchestrator.cli import main as climain

    assert set(climain.COMMANDS) >= {"clusters", "plan", "render", "submit"}
    for target, _help in climain.COMMANDS.values():
        module, _, attr = target.partition(":")
        assert module.startswith("sporch.orchestrator.cli.") and attr


def test_lazy_command_list_is_the_commands_own_help():
    """``sporch --help`` lists the commands from ``COMMANDS`` without importing them; each line
    must be what the command itself says (its ``short_help``), i.e. what click prints when it
    loads every command to list them."""
    import click

    from sporch.orchestrator.cli.main import COMMANDS, cli

    ctx = click.Context(cli, info_name="sporch")
    for name, (_target, line) in sorted(COMMANDS.items()):
        assert cli.get_command(ctx, name).get_short_help_str(limit=10_000) == line, name
    for width in (80, 200):
        lazy, eager = click.HelpFormatter(width=width), click.HelpFormatter(width=width)
        cli.format_commands(ctx, lazy)
        click.Group.format_commands(cli, ctx, eager)  # loads each command and asks it
        assert lazy.getvalue() == eager.getvalue()


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "soon"])
def test_grace_environment_variable_refuses_what_the_option_refuses(run_cli, tmp_path, monkeypatch, value):
    from sporch.orchestrator.jobs.retry import default_grace

    monkeypatch.setenv("SPORCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SPORCH_GRACE_S", value)
    code, _, err = run_cli("status")
    assert code == 2 and "$SPORCH_GRACE_S must be a finite number of seconds >= 0" in err and repr(value) in err
    assert len(err.strip().splitlines()) == 1
    monkeypatch.setenv("SPORCH_GRACE_S", "2.5")
    assert default_grace(60.0) == 2.5
    monkeypatch.delenv("SPORCH_GRACE_S")
    assert default_grace(60.0) == 60.0
