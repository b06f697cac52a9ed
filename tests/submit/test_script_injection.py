"""No value of a job or cluster reaches the batch script's shell lines unquoted (issue 9, items 1-2).

Every field of :class:`SlurmJob` that a template renders, and every value of the campaign array
template, gets hostile text. Each render is either refused with a one-line SporchError, or gives a
script that ``bash -n`` accepts and that, run with stand-ins for ``srun`` and ``scontrol`` on PATH,
creates no marker file (``setup`` and ``python`` are shell by design and not fuzzed: docs/clusters.md).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import pytest

from sporch.orchestrator.config.cluster import find_cluster, load_cluster_file
from sporch.orchestrator.config.job import load_job
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.contract.job_files import JobFiles
from sporch.orchestrator.contract.sections import ContainerSpec
from sporch.orchestrator.plan.planner import make_plan
from sporch.orchestrator.submit.render import render_job, render_template
from sporch.orchestrator.submit.slurm_job import SlurmJob
from tests.testutil import EXAMPLES, write

#: Hostile texts; MARKER is replaced by the path of the file none of them may create.
HOSTILE = (
    "o$(touch MARKER)",
    "o`touch MARKER`",
    "o;touch MARKER",
    "o';touch MARKER;'",
    'o";touch MARKER;"',
    "o\ntouch MARKER",
    "o$(touch${IFS}MARKER)",
    "o|touch MARKER",
)

#: field -> how to put a hostile text ``v`` into a SlurmJob ``j``.
FIELDS = {
    "name": lambda j, v: dataclasses.replace(j, name=v),
    "job_dir": lambda j, v: dataclasses.replace(j, files=JobFiles(v)),
    "time": lambda j, v: dataclasses.replace(j, time=v),
    "partition": lambda j, v: dataclasses.replace(j, options={**j.options, "partition": v}),
    "account": lambda j, v: dataclasses.replace(j, options={**j.options, "account": v}),
    "constraint": lambda j, v: dataclasses.replace(j, options={**j.options, "constraint": v}),
    "extra_value": lambda j, v: dataclasses.replace(j, extra=j.extra + (("comment", v),)),
    "extra_key": lambda j, v: dataclasses.replace(j, extra=j.extra + ((v, None),)),
    "env_value": lambda j, v: dataclasses.replace(j, env={**j.env, "SPORCH_X": v}),
    "env_key": lambda j, v: dataclasses.replace(j, env={**j.env, v: "1"}),
    "cluster_comment": lambda j, v: dataclasses.replace(j, comment={**j.comment, "cluster": v}),
    "fabric_comment": lambda j, v: dataclasses.replace(j, comment={**j.comment, "intra_fabric": v}),
    "layout_text": lambda j, v: dataclasses.replace(j, layout_text=v),
    "signal": lambda j, v: dataclasses.replace(j, signal=v),
    "array": lambda j, v: dataclasses.replace(j, array=v),
    "after": lambda j, v: dataclasses.replace(j, after=("12", v)),
    "batch_logs": lambda j, v: dataclasses.replace(j, batch_logs=v),
    "nodes": lambda j, v: dataclasses.replace(j, nodes=v),
    "gpu_directive": lambda j, v: dataclasses.replace(j, gpu_directive=v),
}


def _container(runtime: str, key: str):
    """A FIELDS entry: the job in a ``runtime`` container whose ``key`` holds the hostile text."""
    value = {"image": lambda v: v, "mounts": lambda v: [f"/src/{v}:/dst"], "workdir": lambda v: f"/w/{v}",
             "env": lambda v: {"X": v}, "options": lambda v: [v], "env_key": lambda v: {v: "1"}}[key]
    name = "env" if key == "env_key" else key
    return lambda j, v: dataclasses.replace(j, container=ContainerSpec(
        runtime=runtime, **{"image": "img", name: value(v)}))


#: Every container value a template renders (``container.python`` is shell by design, as ``python``).
FIELDS.update({f"container_{rt}_{key}": _container(rt, key) for rt in ("pyxis", "apptainer", "podman")
               for key in ("image", "mounts", "workdir", "env", "env_key", "options")})
FIELDS.update({f"container_{rt}_job_dir": (lambda rt: lambda j, v: dataclasses.replace(
    j, files=JobFiles(v), container=ContainerSpec(runtime=rt, image="img")))(rt) for rt in ("pyxis", "podman")})
#: Values of the campaign template besides its SlurmJob.
ARRAY_FIELDS = ("campaign", "group", "list_path")


@pytest.fixture(scope="module")
def base_job() -> SlurmJob:
    plan = make_plan(find_cluster("slurmlab"), load_job(EXAMPLES / "tiny.yaml"))
    return dataclasses.replace(SlurmJob.from_plan(plan, "/tmp/base"), setup=())


@pytest.fixture
def stubs(tmp_path) -> dict:
    """PATH with stand-ins for srun and scontrol (srun records its arguments, one a line)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    args = tmp_path / "srun.args"
    write(bin_dir, "srun", f'#!/bin/bash\nprintf "%s\\n" "$@" > {args}\n').chmod(0o755)
    write(bin_dir, "scontrol", "#!/bin/bash\necho node1\n").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "7",
           "SLURM_JOB_NODELIST": "node1", "SLURM_ARRAY_TASK_ID": "0"}
    return {"env": env, "args": args}


def _run_script(text: str, tmp_path: Path, stubs: dict, marker: Path) -> None:
    """``bash -n`` accepts the script and running it creates no marker."""
    check = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True)
    assert check.returncode == 0, check.stderr
    script = write(tmp_path, "job.sbatch", text)
    subprocess.run(["bash", str(script)], cwd=tmp_path, env=stubs["env"], capture_output=True, timeout=30)
    assert not marker.exists(), f"the script ran an injected command:\n{text}"


def _hostile(value: str, marker: Path) -> str:
    return value.replace("MARKER", str(marker))


@pytest.mark.parametrize("field", sorted(FIELDS))
def test_every_sbatch_field_is_quoted_or_refused(field, base_job, tmp_path, stubs):
    marker = tmp_path / "pwned"
    for raw in HOSTILE:
        value = _hostile(raw, marker)
        if field.endswith("job_dir"):
            value = str(tmp_path / "jobs" / value)
        try:
            text = render_job(FIELDS[field](base_job, value))
        except SporchError as exc:
            assert "\n" not in str(exc)
            continue
        _run_script(text, tmp_path, stubs, marker)


def test_output_dir_with_a_command_substitution_reaches_srun_as_text(base_job, tmp_path, stubs):
    """The issue's case: `$(touch ...)` in the job dir is a literal folder name on srun's line."""
    marker = tmp_path / "pwned"
    job_dir = str(tmp_path / f"o$(touch$IFS{marker})")
    text = render_job(dataclasses.replace(base_job, files=JobFiles(job_dir)))
    _run_script(text, tmp_path, stubs, marker)
    args = stubs["args"].read_text().splitlines()
    assert f"--output={job_dir}/logs/%j_%t.out" in args
    assert Path(job_dir, "logs").is_dir()


@pytest.mark.parametrize("field", ARRAY_FIELDS)
def test_every_array_template_value_is_quoted_or_refused(field, base_job, tmp_path, stubs):
    marker = tmp_path / "pwned"
    list_file = write(tmp_path, "points.list", "")
    for raw in HOSTILE:
        context = {"campaign": "c", "group": "g", "count": 1, "list_path": str(list_file)}
        context[field] = _hostile(raw, marker) if field != "list_path" else str(tmp_path / _hostile(raw, marker))
        if field == "list_path" and "\n" not in context[field]:
            Path(context[field]).parent.mkdir(parents=True, exist_ok=True)
            Path(context[field]).write_text("")
        job = base_job.as_array("c-g", 1, None, str(tmp_path / "batch"))
        try:
            text = render_template("campaign_array.sbatch.j2", job=job, **context)
        except SporchError as exc:
            assert "\n" not in str(exc)
            continue
        _run_script(text, tmp_path, stubs, marker)


@pytest.mark.parametrize("key,value", [
    ("partition", "lab\\n#SBATCH --wrap=touch /tmp/x"),
    ("account", "a b"),
    ("qos", 'q"x'),
    ("extra", ["--reservation=r\\ntouch /tmp/x"]),
    ("extra", ["--comment=a b"]),
])
def test_cluster_directive_values_are_single_words(key, value, tmp_path):
    """A newline in a cluster's slurm value would be a new script line: refused when loading."""
    import yaml

    data = yaml.safe_load((EXAMPLES.parent / "clusters" / "slurmlab.yaml").read_text())
    data.setdefault("slurm", {})[key] = [v.replace("\\n", "\n") for v in value] if isinstance(value, list) \
        else value.replace("\\n", "\n")
    path = write(tmp_path, "hostile.yaml", yaml.safe_dump(data))
    with pytest.raises(SporchError, match=f"slurm.{key}") as info:
        load_cluster_file(path)
    assert "\n" not in str(info.value)
