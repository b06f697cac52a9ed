"""Property-based fuzzing of job files, cluster files and KEY=VALUE overrides (issue 9).

Every generated input is bad by construction; driving the real CLI entry point in-process, each
must give exit 2, exactly one line on stderr (``sporch: error: ...``), no traceback, and nothing
written (the working folder stays empty). Example counts are modest: the file runs in well under
a minute on two cores.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.testutil import EXAMPLES

SETTINGS = settings(max_examples=30, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])

TINY = yaml.safe_load((EXAMPLES / "tiny.yaml").read_text())
CLUSTER = {
    "name": "box", "nodes": 1, "gpus_per_node": 4,
    "gpu": {"model": "cpu", "memory_gib": 8, "bf16_tflops": 0.2},
    "intra_node": {"fabric": "pcie", "gb_per_s": 5},
    "inter_node": {"fabric": "ethernet", "gb_per_s": 1, "nics_per_node": 1},
    "slurm": {"time": "00:10:00", "cpus_per_task": 1},
}

# -- values that are wrong for a kind of key -----------------------------------------------------
non_finite = st.sampled_from([math.nan, math.inf, -math.inf])
too_big = st.integers(min_value=2**63, max_value=10**40)
not_a_number = st.one_of(st.text(alphabet="abcxyz!?#", min_size=1, max_size=8),
                         st.lists(st.integers(0, 9), min_size=1, max_size=3),
                         st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 9), min_size=1))
bad_count = st.one_of(st.integers(max_value=0), too_big, non_finite, not_a_number)  # must be an int >= 1
bad_positive_float = st.one_of(st.floats(max_value=0, allow_nan=False), non_finite, not_a_number)


def bad_word(valid):
    return st.one_of(st.text(alphabet="qwzk_-", min_size=1, max_size=10).filter(lambda s: s not in valid),
                     st.lists(st.integers(0, 9), min_size=1, max_size=2))


bad_name = st.one_of(st.sampled_from(["..", ".", "a/b", "../x", "a b", "x;y", "$(id)"]),
                     st.text(alphabet="abc", min_size=101, max_size=300))

#: (section path, strategy of wrong values) for job files
JOB_BAD = [
    (("workload", "batch"), bad_count), (("workload", "steps"), bad_count), (("workload", "repeat"), bad_count),
    (("workload", "frames"), bad_count), (("workload", "height"), bad_count), (("workload", "width"), bad_count),
    (("workload", "warmup"), st.one_of(st.integers(max_value=-1), too_big, not_a_number)),
    (("workload", "guidance_scale"), st.one_of(st.floats(max_value=-1e-9, allow_nan=False), non_finite,
                                                not_a_number)),
    (("workload", "shift"), bad_positive_float),
    (("workload", "kind"), bad_word(["inference", "benchmark", "verify", "generate"])),
    (("workload", "dtype"), bad_word(["float32", "bfloat16", "float16"])),
    (("model", "depth"), bad_count), (("model", "num_heads"), bad_count), (("model", "hidden"), bad_count),
    (("model", "mlp_ratio"), bad_positive_float),
    (("model", "vae_stride"), st.one_of(st.lists(st.integers(1, 16), max_size=5).filter(lambda v: len(v) != 3),
                                        st.lists(st.integers(-3, 0), min_size=3, max_size=3), st.integers(),
                                        non_finite, st.text(alphabet="abcxyz!?#", min_size=1, max_size=8))),
    (("model", "attention"), bad_word(["cross", "joint", "self"])),
    (("model", "preset"), bad_word(["tiny"])),
    (("parallel", "ring"), st.one_of(st.integers(max_value=0), st.text(alphabet="xyz", min_size=1), non_finite)),
    (("parallel", "ulysses"), st.integers(min_value=5, max_value=10**6)),  # tiny has 4 heads
    (("resources", "nodes"), bad_count),
    (("resources", "time"), st.text(alphabet="xyz:-", min_size=1, max_size=8)),
    (("name",), bad_name),
]

#: (section path, strategy of wrong values) for cluster files
CLUSTER_BAD = [
    (("nodes",), bad_count), (("gpus_per_node",), bad_count),
    (("gpu", "memory_gib"), bad_positive_float), (("gpu", "bf16_tflops"), bad_positive_float),
    (("intra_node", "gb_per_s"), bad_positive_float), (("inter_node", "gb_per_s"), bad_positive_float),
    (("intra_node", "fabric"), bad_word(["nvlink", "pcie"])),
    (("inter_node", "fabric"), bad_word(["infiniband", "roce", "ethernet"])),
    (("slurm", "time"), st.text(alphabet="xyz:-", min_size=1, max_size=8)),
    (("slurm", "cpus_per_task"), bad_count),
    (("env", "NCCL_X"), st.one_of(st.lists(st.integers(0, 9), min_size=1, max_size=3),
                                  st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 9), min_size=1))),
    (("name",), bad_name),
]


def unknown_key(known):
    return st.text(alphabet="qvwxz_", min_size=3, max_size=10).filter(lambda k: k not in known)


def with_value(doc: dict, path: tuple, value) -> dict:
    doc = yaml.safe_load(yaml.safe_dump(doc))
    node = doc
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    return doc


def yaml_text(doc: dict) -> str:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


def run_in_empty_folder(make_args) -> tuple[int, str, list[str]]:
    """``make_args(folder) -> argv`` run by ``main`` in a fresh folder (the cwd); returns the exit
    code, stderr, and what is in the folder afterwards besides the inputs."""
    from sporch.orchestrator.cli.main import main

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        args, inputs = make_args(folder)
        old = os.getcwd()
        err, out = io.StringIO(), io.StringIO()
        try:
            os.chdir(folder)
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
                code = main([str(a) for a in args])
        finally:
            os.chdir(old)
        left = sorted(p.name for p in folder.iterdir() if p.name not in inputs)
        return code, err.getvalue(), left


def assert_refused(code: int, err: str, left: list[str], what) -> None:
    assert code == 2, (what, code, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sporch: error: "), (what, err)
    assert "Traceback" not in err and "internal error" not in err, (what, err)
    assert left == [], (what, left)


@st.composite
def bad_jobs(draw):
    if draw(st.integers(0, 5)) == 0:  # an unknown key, at the top or in a section
        section = draw(st.sampled_from([None, "model", "workload", "parallel", "resources"]))
        key = draw(unknown_key(set(TINY) | set(TINY.get(section) or {}) | {"model", "workload", "parallel",
                                                                           "resources", "name", "output_dir",
                                                                           "entrypoint", "source"}))
        path = (key,) if section is None else (section, key)
        return with_value(TINY, path, draw(st.integers(0, 9))), path
    path, values = draw(st.sampled_from(JOB_BAD))
    return with_value(TINY, path, draw(values)), path


@SETTINGS
@given(case=bad_jobs(), command=st.sampled_from([("render",), ("submit", "--dry-run"), ("run", "--local")]))
def test_bad_job_files_are_one_line_errors_that_write_nothing(case, command):
    doc, path = case

    def args(folder: Path):
        (folder / "job.yaml").write_text(yaml_text(doc))
        return [*command, "--cluster", "local", "job.yaml"], {"job.yaml"}

    assert_refused(*run_in_empty_folder(args), (command, path, doc))


@st.composite
def bad_clusters(draw):
    if draw(st.integers(0, 5)) == 0:
        section = draw(st.sampled_from([None, "gpu", "intra_node", "inter_node", "slurm"]))
        key = draw(unknown_key(set(CLUSTER) | set(CLUSTER.get(section) or {}) | {"env", "login", "description"}))
        path = (key,) if section is None else (section, key)
        return with_value(CLUSTER, path, 1), path
    path, values = draw(st.sampled_from(CLUSTER_BAD))
    return with_value(CLUSTER, path, draw(values)), path


@SETTINGS
@given(case=bad_clusters(), command=st.sampled_from([("render",), ("plan",), ("run", "--local")]))
def test_bad_cluster_files_are_one_line_errors_that_write_nothing(case, command):
    doc, path = case

    def args(folder: Path):
        (folder / "box.yaml").write_text(yaml_text(doc))
        return [*command, "--cluster", str(folder / "box.yaml"), EXAMPLES / "tiny.yaml"], {"box.yaml"}

    assert_refused(*run_in_empty_folder(args), (command, path, doc))


def _scalar_text(value) -> str:
    """How a value is typed on the command line (OmegaConf's dotlist parses it as YAML)."""
    if isinstance(value, float):
        return {math.inf: ".inf", -math.inf: "-.inf"}.get(value, ".nan" if math.isnan(value) else repr(value))
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


@st.composite
def bad_overrides(draw):
    kind = draw(st.integers(0, 3))
    if kind == 0:  # not KEY=VALUE at all
        return draw(st.one_of(st.text(alphabet="abc.", min_size=1, max_size=10),
                              st.builds(lambda v: "=" + v, st.text(alphabet="abc1", max_size=5)),
                              st.builds(lambda k: k + " x=1", st.sampled_from(["workload.steps", "a"]))))
    if kind == 1:  # a key no section has
        section = draw(st.sampled_from(["", "model.", "workload.", "parallel.", "resources."]))
        return section + draw(unknown_key(set(TINY) | {"name", "output_dir", "entrypoint", "model", "workload",
                                                       "parallel", "resources", "source"})) + "=1"
    if kind == 2:  # an interpolation that cannot resolve
        return draw(st.sampled_from(["workload.steps", "model.depth", "name"])) + "=${" + draw(
            st.text(alphabet="qxz", min_size=1, max_size=5)) + "}"
    path, values = draw(st.sampled_from(JOB_BAD))
    return ".".join(path) + "=" + _scalar_text(draw(values))


@SETTINGS
@given(override=bad_overrides(), command=st.sampled_from([("plan",), ("render",), ("submit", "--dry-run")]))
def test_bad_overrides_are_one_line_errors_that_write_nothing(override, command):
    def args(folder: Path):
        return [*command, "--cluster", "local", EXAMPLES / "tiny.yaml", override], set()

    assert_refused(*run_in_empty_folder(args), (command, override))
