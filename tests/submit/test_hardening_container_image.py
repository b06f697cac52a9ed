"""Issue 32 item 17: a container image that is not an image reference (one starting with '-'
would be read as an option by podman/apptainer/srun) is refused in one line, for every runtime,
from the cluster descriptor, from the job file and from the command line; a plan.json that
carries one is refused when its script is rendered."""

from __future__ import annotations

import dataclasses

import pytest

from sporch.orchestrator.config.cluster import load_cluster_file
from sporch.orchestrator.config.job import load_job
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.plan.planner import make_plan
from sporch.orchestrator.slurm.container import IMAGE_RE
from sporch.orchestrator.submit.render import render_job
from sporch.orchestrator.submit.slurm_job import SlurmJob
from tests.testutil import EXAMPLES, container_cluster

RUNTIMES = ("pyxis", "apptainer", "singularity", "podman")
BAD_IMAGES = ("--volume=/:/host", "--privileged", "-v", "-", "img;rm", "img`x`", "a\tb", "img$(id)", "")
GOOD_IMAGES = ("registry.example/sporch:1.0", "nvcr.io#nvidia/pytorch:24.05-py3", "docker://ubuntu:22.04",
               "/images/sporch.sif", "./x.sqsh", "name@sha256:abc123", "library://u/c/i:1")
LAYOUT = ["parallel.ring=2", "parallel.ulysses=4"]


@pytest.mark.parametrize("image", GOOD_IMAGES)
def test_image_references_are_accepted(image):
    assert IMAGE_RE.fullmatch(image)


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("image", BAD_IMAGES)
def test_a_descriptor_image_that_is_not_a_reference_is_refused(runtime, image, tmp_path):
    path = container_cluster(tmp_path, runtime, name="bad", image=image)
    with pytest.raises(SporchError, match=r"'container.image' must name the image") as e:
        load_cluster_file(path)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_job_or_command_line_image_starting_with_a_dash_is_refused(runtime, tmp_path, run_cli, sporch_home):
    job = tmp_path / "job.yaml"
    job.write_text((EXAMPLES / "tiny.yaml").read_text()
                   + f"container:\n  runtime: {runtime}\n  image: \"--privileged\"\n")
    with pytest.raises(SporchError, match=r"'container.image' must name the image"):
        load_job(job, LAYOUT)
    # the command line (an override) and the job on a cluster that has a container of its own
    cluster = container_cluster(tmp_path, runtime)
    code, out, err = run_cli("render", "--cluster", cluster, str(EXAMPLES / "tiny.yaml"), *LAYOUT,
                             "container.image=--volume=/:/host", "-o", str(tmp_path / "s.sbatch"))
    assert code == 2 and "'container.image' must name the image" in err, err
    assert "Traceback" not in err and not (tmp_path / "s.sbatch").exists()


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_plan_carrying_a_dash_image_is_not_rendered(runtime, tmp_path):
    plan = make_plan(load_cluster_file(container_cluster(tmp_path, runtime)), load_job(EXAMPLES / "tiny.yaml", LAYOUT))
    job = SlurmJob.from_plan(plan, "/jobs/J")
    bad = dataclasses.replace(job, container=dataclasses.replace(job.container, image="--privileged"))
    with pytest.raises(SporchError, match=r"'container.image' must name the image"):
        render_job(bad)
