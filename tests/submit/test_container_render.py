"""Containers (issue 19 item 1): the cluster's ``container`` section, a job's override, and what
each runtime adds to the batch script (golden files), to submitit's parameters and to
``submit --dry-run``; one-line errors for what cannot be rendered."""

from __future__ import annotations

import dataclasses
import subprocess

import pytest

from sporch.orchestrator.config.cluster import find_cluster, load_cluster_file
from sporch.orchestrator.config.job import load_job
from sporch.orchestrator.contract.sections import ContainerSpec
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.plan.planner import make_plan
from sporch.orchestrator.slurm.container import check_container
from sporch.orchestrator.submit.render import render_job, render_sbatch
from sporch.orchestrator.submit.request import build_request
from sporch.orchestrator.submit.slurm_job import SlurmJob
from sporch.orchestrator.submit.submitit_backend import executor_parameters, python_command
from tests.testutil import EXAMPLES, GOLDEN_JOB_DIR, container_cluster, golden_dir, update_golden, write

GOLDEN = golden_dir(__file__)
RUNTIMES = ("pyxis", "apptainer", "podman")

#: The tiny model (4 heads) on 8 GPUs.
LAYOUT = ["parallel.ring=2", "parallel.ulysses=4"]


def tiny(*overrides: str):
    return load_job(EXAMPLES / "tiny.yaml", LAYOUT + list(overrides))


def plan_for(cluster_path: str, *overrides: str):
    return make_plan(load_cluster_file(cluster_path), tiny(*overrides))


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if update_golden():
        path.write_text(text)
        pytest.skip(f"golden {name} regenerated; review the diff, then run again without SPORCH_UPDATE_GOLDEN")
    assert path.exists(), f"missing golden {name}; run with SPORCH_UPDATE_GOLDEN=1 to create it"
    assert text == path.read_text(), f"golden {name} differs; SPORCH_UPDATE_GOLDEN=1 regenerates it"


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_golden_job_script(runtime, tmp_path):
    text = render_sbatch(plan_for(container_cluster(tmp_path, runtime)), GOLDEN_JOB_DIR)
    _golden(f"container_{runtime}.sbatch", text)
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


def test_pyxis_adds_srun_options_and_runs_the_containers_python(tmp_path):
    text = render_sbatch(plan_for(container_cluster(tmp_path, "pyxis")), GOLDEN_JOB_DIR)
    srun = text[text.index("srun "):]
    assert "--container-image=/images/sporch+torch.sqsh \\" in srun
    # the job folder first, at its own path: the rank reads its plan and writes its results there
    assert f"--container-mounts={GOLDEN_JOB_DIR}:{GOLDEN_JOB_DIR},/scratch:/scratch,/datasets:/data:ro \\" in srun
    assert "--container-workdir=/workspace \\" in srun and "--container-env=HF_HOME,NOTE \\" in srun
    assert "'--export=ALL,HF_HOME=/scratch/hf,NOTE=two words' \\" in srun
    assert srun.rstrip().endswith('/opt/conda/bin/python -m sporch.runtime.launch --plan "$SPORCH_JOB_DIR/plan.json"')
    assert "python -m" not in srun.replace("/opt/conda/bin/python -m", "")  # not the cluster's python


@pytest.mark.parametrize("runtime", ["apptainer", "singularity"])
def test_apptainer_wraps_the_rank_command(runtime, tmp_path):
    text = render_sbatch(plan_for(container_cluster(tmp_path, runtime)), GOLDEN_JOB_DIR)
    lines = [line.strip() for line in text[text.index("srun "):].splitlines()]
    binds = f"{GOLDEN_JOB_DIR}:{GOLDEN_JOB_DIR},/scratch:/scratch,/datasets:/data:ro"
    assert f"{runtime} exec --nv --bind {binds} \\" in lines
    assert "--pwd /workspace \\" in lines and "--env HF_HOME=/scratch/hf --env 'NOTE=two words' \\" in lines
    assert lines[-2:] == ["/images/sporch.sif \\",
                          '/opt/conda/bin/python -m sporch.runtime.launch --plan "$SPORCH_JOB_DIR/plan.json"']
    no_gpus = render_sbatch(plan_for(container_cluster(tmp_path, runtime, name="ng", gpus=False)), GOLDEN_JOB_DIR)
    assert f"{runtime} exec --bind" in no_gpus and "--nv" not in no_gpus


def test_podman_shares_the_hosts_namespaces_and_passes_the_ranks_environment(tmp_path):
    text = render_sbatch(plan_for(container_cluster(tmp_path, "podman")), GOLDEN_JOB_DIR)
    srun = text[text.index("srun "):]
    assert "podman run --rm --timeout 600 --network host --ipc host --pid host --uts host \\" in srun
    assert f"-v {GOLDEN_JOB_DIR}:{GOLDEN_JOB_DIR} -v /scratch:/scratch -v /datasets:/data:ro \\" in srun
    assert "-w /workspace \\" in srun
    for name in ("'SLURM_*'", "'SPORCH_*'", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "'NCCL_*'",
                 "CUDA_VISIBLE_DEVICES", "'TORCH_*'", "OMP_NUM_THREADS"):
        assert f"-e {name} " in srun, name
    # a cluster env name no pattern covers is passed by name too
    extra = container_cluster(tmp_path, "podman", name="p2", top={"env": {"MY_FLAG": "1"}})
    assert "-e MY_FLAG " in render_sbatch(plan_for(extra), GOLDEN_JOB_DIR)
    assert "-e HF_HOME=/scratch/hf -e 'NOTE=two words' \\" in srun
    assert "--device nvidia.com/gpu=all \\" in srun
    assert "registry.example/sporch:1.0 \\\n    /opt/conda/bin/python -m sporch.runtime.launch" in srun
    # an absolute path is a root file system folder
    rootfs = container_cluster(tmp_path, "podman", name="p3", gpus=False, options=["--label", "a=b"])
    text = render_sbatch(plan_for(rootfs, "container.image=/srv/rootfs"), GOLDEN_JOB_DIR)
    assert "    --label a=b \\\n    --rootfs /srv/rootfs \\\n" in text and "--device" not in text


def test_no_container_leaves_the_script_as_it_was(tmp_path):
    plain = render_sbatch(make_plan(find_cluster("a100x8"), tiny()), GOLDEN_JOB_DIR)
    assert "container" not in plain and "podman" not in plain
    none = plan_for(container_cluster(tmp_path, "podman"), "container.runtime=none")
    assert none.cluster.container is None
    assert render_sbatch(none, GOLDEN_JOB_DIR) == plain


# -- the job's container section ----------------------------------------------------------------
def test_a_jobs_container_keys_replace_the_clusters(tmp_path):
    cluster = container_cluster(tmp_path, "apptainer")
    job = write(tmp_path, "job.yaml", (EXAMPLES / "tiny.yaml").read_text()
                + "container:\n  image: /images/other.sif\n  mounts: [/projects:/projects]\n")
    plan = make_plan(load_cluster_file(cluster), load_job(job, LAYOUT))
    c = plan.cluster.container
    assert (c.runtime, c.image, c.mounts, c.workdir, c.python) == (
        "apptainer", "/images/other.sif", ["/projects:/projects"], "/workspace", "/opt/conda/bin/python")
    assert c.env == {"HF_HOME": "/scratch/hf", "NOTE": "two words"}
    text = render_sbatch(plan, GOLDEN_JOB_DIR)
    assert f"--bind {GOLDEN_JOB_DIR}:{GOLDEN_JOB_DIR},/projects:/projects \\" in text and "/images/other.sif \\" in text
    # the plan keeps the container in force (what the job ran in)
    assert plan.to_dict()["cluster"]["container"]["image"] == "/images/other.sif"
    # command-line overrides too; a runtime switch keeps the other keys
    plan = plan_for(cluster, "container.runtime=podman", "container.gpus=false")
    assert plan.cluster.container.runtime == "podman" and plan.cluster.container.image == "/images/sporch.sif"
    assert "--device" not in render_sbatch(plan, GOLDEN_JOB_DIR)


def test_a_job_brings_its_own_container_to_a_cluster_without_one():
    plan = make_plan(find_cluster("a100x8"),
                     tiny("container.runtime=pyxis", "container.image=nvcr.io#nvidia/pytorch:24.05-py3"))
    text = render_sbatch(plan, GOLDEN_JOB_DIR)
    assert "'--container-image=nvcr.io#nvidia/pytorch:24.05-py3' \\" in text
    assert f"--container-mounts={GOLDEN_JOB_DIR}:{GOLDEN_JOB_DIR} \\" in text
    assert "    python -m sporch.runtime.launch" in text  # container.python's default
    with pytest.raises(SporchError, match=r"'container' needs runtime: the cluster has no container") as e:
        make_plan(find_cluster("a100x8"), tiny("container.image=x.sif"))
    assert "\n" not in str(e.value)


# -- one-line errors ---------------------------------------------------------------------------
BAD_CLUSTER = [
    ("runtime", "docker", r"'container.runtime' must be one of pyxis, apptainer, singularity, podman, got 'docker'"),
    ("image", "", r"'container.image' must name the image"),
    ("image", "a b", r"'container.image' must name the image"),
    ("mounts", ["/scratch"], r"'container.mounts' entry '/scratch' is not SRC:DST"),
    ("mounts", ["scratch:/scratch"], r"entry 'scratch:/scratch' is not SRC:DST"),
    ("mounts", ["/a:/b:rx"], r"entry '/a:/b:rx' is not SRC:DST"),
    ("mounts", ["/a,/c:/b"], r"entry '/a,/c:/b' is not SRC:DST"),
    ("mounts", ["/a:/b; touch /tmp/x"], r"is not SRC:DST"),
    ("workdir", "work", r"'container.workdir' must be an absolute path"),
    ("env", {"1X": "a"}, r"'container.env' name '1X' is not a valid environment variable name"),
    ("env", {"X": "a,b"}, r"'container.env.X' 'a,b' holds a ',', which srun --export splits on"),
    ("env", {"X": "a\nb"}, r"'container.env.X' 'a\\nb' must be a single line"),
    ("python", "", r"'container.python' must be the interpreter's command"),
    ("options", ["--a\nb"], r"'container.options' entry '--a\\nb' must be one non-empty argument on one line"),
]


@pytest.mark.parametrize("key,value,message", BAD_CLUSTER)
def test_bad_cluster_container_is_one_line(key, value, message, tmp_path):
    path = (container_cluster(tmp_path, value, name="bad") if key == "runtime" else
            container_cluster(tmp_path, "pyxis", name="bad", **{key: value}))
    with pytest.raises(SporchError, match=message) as e:
        load_cluster_file(path)
    assert "\n" not in str(e.value) and str(path) in str(e.value)


def test_comma_in_an_env_value_is_fine_for_podman_only(tmp_path):
    ok = container_cluster(tmp_path, "podman", name="ok", env={"X": "a,b"})
    assert "-e X=a,b " in render_sbatch(plan_for(ok), GOLDEN_JOB_DIR) + " "
    bad = container_cluster(tmp_path, "apptainer", name="bad", env={"X": "a,b"})
    with pytest.raises(SporchError, match=r"'a,b' holds a ',' or '\"', which apptainer --env splits on"):
        load_cluster_file(bad)
    quote = container_cluster(tmp_path, "apptainer", name="quote", env={"X": 'say "hi"'})
    with pytest.raises(SporchError, match=r"which apptainer --env splits on"):
        load_cluster_file(quote)
    assert "'--export=ALL,X=say \"hi\"'" in render_sbatch(
        plan_for(container_cluster(tmp_path, "pyxis", name="pq", env={"X": 'say "hi"'})), GOLDEN_JOB_DIR)


@pytest.mark.parametrize("override,message", [
    ("container.runtime=docker", r"'container.runtime' must be one of pyxis, apptainer, singularity, podman or none"),
    ("container.mounts=[/data]", r"'container.mounts' entry '/data' is not SRC:DST"),
    ("container.image=a b", r"'container.image' must name the image"),
])
def test_bad_job_container_is_one_line(override, message):
    with pytest.raises(SporchError, match=message) as e:
        load_job(EXAMPLES / "tiny.yaml", [override])
    assert "\n" not in str(e.value)


def test_a_job_dir_a_runtime_would_split_is_refused(tmp_path):
    plan = plan_for(container_cluster(tmp_path, "podman"))
    with pytest.raises(SporchError, match=r"job dir '/jobs/a:b' cannot be mounted into a container") as e:
        render_sbatch(plan, "/jobs/a:b")
    assert "\n" not in str(e.value)
    job = SlurmJob.from_plan(plan, "/jobs/ok")
    with pytest.raises(SporchError, match="'container.mounts'"):
        render_job(dataclasses.replace(job, container=dataclasses.replace(job.container, mounts=["/a:/b\n"])))


def test_check_container_accepts_a_complete_section():
    c = ContainerSpec(runtime="podman", image="img", mounts=["/a:/a:rw"], env={"K": "v w"}, options=["--x=1 2"])
    assert check_container(c) is c


# -- submitit, dry run, ssh ------------------------------------------------------------------------
def test_submitit_carries_the_container(tmp_path):
    pyxis = build_request(load_cluster_file(container_cluster(tmp_path, "pyxis")), tiny(), job_dir="/jobs/J")
    params = executor_parameters(pyxis)
    assert params["slurm_srun_args"][0] == "--kill-on-bad-exit=1"
    assert "--container-image=/images/sporch+torch.sqsh" in params["slurm_srun_args"]
    assert "--container-mounts=/jobs/J:/jobs/J,/scratch:/scratch,/datasets:/data:ro" in params["slurm_srun_args"]
    assert python_command(pyxis) == "/opt/conda/bin/python"
    podman = build_request(load_cluster_file(container_cluster(tmp_path, "podman")), tiny(), job_dir="/jobs/J")
    assert executor_parameters(podman)["slurm_srun_args"] == ["--kill-on-bad-exit=1"]
    cmd = python_command(podman)
    assert cmd.startswith("podman run --rm --timeout 600 --network host") and " -v /jobs/J:/jobs/J " in cmd
    assert cmd.endswith(" registry.example/sporch:1.0 /opt/conda/bin/python")


def test_dry_run_prints_the_container_command(tmp_path, run_cli, sporch_home):
    for runtime, needle in (("podman", "podman run --rm"), ("apptainer", "apptainer exec --nv --bind"),
                            ("pyxis", "--container-image=/images/sporch+torch.sqsh")):
        code, out, err = run_cli("submit", "--dry-run", "--via", "sbatch", "--cluster",
                                 container_cluster(tmp_path, runtime), str(EXAMPLES / "tiny.yaml"),
                                 *LAYOUT, "--job-dir", "/jobs/dry")
        assert code == 0, err
        assert needle in out and "---- job.sbatch ----" in out
        assert "container " in out  # the plan's summary names it
        assert "/jobs/dry:/jobs/dry" in out


def test_ssh_submission_uploads_the_same_script(tmp_path):
    """A cluster with a login section gets the script the dry run shows: the request's script
    (submitter writes request.files() over SFTP)."""
    path = container_cluster(tmp_path, "apptainer", name="remote",
                             top={"login": {"host": "login.example", "workdir": "/home/u/sporch"}})
    req = build_request(load_cluster_file(path), tiny(), job_dir="/home/u/sporch/runs/J")
    assert req.remote and req.files()["job.sbatch"] == req.script
    assert "apptainer exec --nv --bind /home/u/sporch/runs/J:/home/u/sporch/runs/J," in req.script


def test_campaign_points_in_different_containers_are_different_groups(tmp_path):
    from sporch.orchestrator.campaign.groups import group_key, resource_shape

    cluster = container_cluster(tmp_path, "podman")
    a, b = plan_for(cluster), plan_for(cluster, "container.image=other:2")
    assert resource_shape(a)["container"]["image"] == "registry.example/sporch:1.0"
    assert group_key(resource_shape(a)) != group_key(resource_shape(b))
    plain = make_plan(find_cluster("a100x8"), tiny())
    assert "container" not in resource_shape(plain)  # container-less groups keep their keys
