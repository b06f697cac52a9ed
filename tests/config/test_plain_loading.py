"""The plain path (config/loading.py: job and cluster files typed without importing OmegaConf)
gives what OmegaConf gives: the same typed record, value and type, or it steps aside and the
OmegaConf path answers (its result, its one-line error). Checked on every example job and
built-in cluster (which must take the plain path: the dry run's start-up) and on scalars the two
YAML readers could read differently."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sporch.orchestrator.config.cluster import load_cluster_file, omegaconf_cluster, plain_cluster, validate_cluster
from sporch.orchestrator.config.job import load_job, omegaconf_job, plain_job
from sporch.orchestrator.config.job_checks import validate_job
from sporch.orchestrator.errors import SporchError
from tests.testutil import EXAMPLES, ROOT

JOBS = sorted(EXAMPLES.glob("*.yaml"))
CLUSTERS = sorted((ROOT / "clusters").glob("*.yaml"))


def typed(obj):
    """``obj`` with every scalar paired with its type name, dataclasses with their class name
    (1 == 1.0 == True and a dict equal to a dataclass's fields would hide a difference)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return (type(obj).__name__, {f.name: typed(getattr(obj, f.name)) for f in dataclasses.fields(obj)})
    if isinstance(obj, dict):
        return ("dict", {typed(k): typed(v) for k, v in obj.items()})
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, [typed(v) for v in obj])
    return (type(obj).__name__, repr(obj))


def test_there_are_files():
    assert len(JOBS) >= 5 and len(CLUSTERS) >= 5


@pytest.mark.parametrize("path", JOBS, ids=lambda p: p.name)
def test_example_jobs_take_the_plain_path_to_omegaconfs_result(path):
    plain = plain_job(path)
    assert plain is not None, "an example job should not need OmegaConf (the dry run's start-up)"
    assert typed(plain) == typed(omegaconf_job(path))


@pytest.mark.parametrize("path", CLUSTERS, ids=lambda p: p.name)
def test_builtin_clusters_take_the_plain_path_to_omegaconfs_result(path):
    plain = plain_cluster(path)
    assert plain is not None, "a built-in cluster should not need OmegaConf (the dry run's start-up)"
    assert typed(plain) == typed(omegaconf_cluster(path))


def test_defaults_alone_are_omegaconfs(tmp_path):
    """A file that sets nothing: every default as OmegaConf's schema holds it (an int default of
    a float key would come back 1.0 from OmegaConf, 1 from the dataclass)."""
    job, cluster = tmp_path / "j.yaml", tmp_path / "c.yaml"
    job.write_text("name: j\n")
    cluster.write_text("name: c\nlogin: {host: h}\ncontainer: {runtime: pyxis}\n")
    assert plain_job(job) is not None and typed(plain_job(job)) == typed(omegaconf_job(job))
    job.write_text("name: j\ncontainer: {}\nmodel: {lora: [{path: a.safetensors}]}\n")
    assert plain_job(job) is not None and typed(plain_job(job)) == typed(omegaconf_job(job))
    assert plain_cluster(cluster) is not None and typed(plain_cluster(cluster)) == typed(omegaconf_cluster(cluster))


def outcome(load, path):
    try:
        return "ok", typed(load(path))
    except SporchError as e:
        return "error", str(e)


def job_by_omegaconf(path: Path):
    """``load_job`` as it was before the plain path: OmegaConf only."""
    job = omegaconf_job(path)
    job.source = str(path.resolve())
    return validate_job(job, str(path))


#: YAML scalars that PyYAML's safe loader and OmegaConf's loader may read differently (YAML 1.2
#: floats, timestamps, sexagesimal numbers, octal/hex, null and bool spellings), strings that
#: OmegaConf treats specially (interpolations, MISSING) and values OmegaConf converts or refuses.
SCALARS = ["1e-3", "1E3", "1.0e-3", "-1e3", "+1.5", ".5", "-.5", "1_000", "1_000.5", "0x1F", "0o17", "017",
           "1:30", "01:00:00", "1:00:00.5", "2024-01-01", "2024-01-01 10:00:00", "~", "null", "yes", "no", "on",
           "Off", "true", "TRUE", ".inf", "-.Inf", ".nan", "+.INF", "12abc", "1e3x", "=", "'1e-3'", '"2"',
           "${workload.steps}", "'${name}'", "'???'", "''", "[1, 2]", "{a: 1}", "5", "0", "-3", "2.0",
           "2", "auto", "hello world", "4 nodes x 8", "12345678901234567890123", "!!str 5", "!!float 1"]
#: Keys of every kind of type the job schema has.
KEYS = {
    "workload.steps": "workload: {steps: %s}",  # int
    "workload.shift": "workload: {shift: %s}",  # Optional[float]
    "workload.guidance_scale": "workload: {guidance_scale: %s}",  # float
    "workload.prompt": "workload: {prompt: %s}",  # Optional[str]
    "model.qk_norm": "model: {qk_norm: %s}",  # Optional[bool]
    "parallel.ring": "parallel: {ring: %s}",  # Optional[Union[int, str]]
    "model.patch": "model: {patch: %s}",  # Any
    "container.env": "container: {env: {A: %s}}",  # Dict[str, str]
    "workload.sigmas": "workload: {sigmas: [%s, 0.5]}",  # List[float]
    "resources.time": "resources: {time: %s}",  # Optional[str]
}


@pytest.mark.parametrize("key", sorted(KEYS))
def test_tricky_scalars_read_as_omegaconf_reads_them(tmp_path, key):
    """Where the plain path takes a file, its record (or its check's error) is OmegaConf's; where
    it steps aside, ``load_job`` runs the OmegaConf path itself (nothing to compare)."""
    took_plain = 0
    for i, scalar in enumerate(SCALARS):
        path = tmp_path / f"job{i}.yaml"
        path.write_text(f"name: j\n{KEYS[key] % scalar}\n")
        plain = outcome(plain_job, path)
        if plain != ("ok", typed(None)):
            took_plain += 1
            assert plain == outcome(omegaconf_job, path), (key, scalar)
    assert 0 < took_plain < len(SCALARS), "the plain path should take some and leave some"


@pytest.mark.parametrize("text", [
    "", "# only a comment\n", "- a\n- b\n", "just a string\n", "name: [oops\n", "name: j\nname: k\n",
    "name: j\nworkload: &w {steps: 4}\nresources: {time: '1:00:00'}\n",
    "name: j\nbase: &b {steps: 4}\nworkload: *b\n", "name: j\nworkload: {<<: {steps: 4}, seed: 1}\n",
    "name: j\nunknown: 3\n", "name: j\nworkload: {steps: abc}\n", "name: j\nworkload: {steps: true}\n",
    "name: j\nworkload: {steps: 1.5}\n", "name: j\nworkload: null\n", "name: j\ncontainer: {env: {10: x}}\n",
    "name: j\ncontainer: {mounts: [1, /a:/b]}\n", "name: 5\n", "name: 2024-01-01\n", "name: '???'\n",
    "name: j\nworkload: {prompt: !!binary aGk=}\n", "name: j\nmodel: {lora: [{path: a, scale: 1e3}]}\n",
    "name: j\nworkload: {cache: {method: fbcache, threshold: 1e-1}, kind: generate}\n",
    "name: j\nworkload: {steps: 123456789012345678901234567890}\n", "name: j\n=: x\n",
    "name: j\nworkload: {prompt: &p hello, negative_prompt: *p}\n", "name: j\nmodel: {patch: &a [1, *a]}\n",
    # nested aliases (the plain path leaves every alias to OmegaConf, which limits their expansion)
    "name: j\nmodel: {patch: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]}\n"
    "workload: {sigmas: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a]}\n"
    "container: {options: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b]}\n",
], ids=range(27))
def test_odd_documents_read_as_omegaconf_reads_them(tmp_path, text):
    path = tmp_path / "odd.yaml"
    path.write_text(text)
    assert outcome(load_job, path) == outcome(job_by_omegaconf, path)


def cluster_by_omegaconf(path: Path):
    return validate_cluster(dataclasses.replace(omegaconf_cluster(path), source=str(path.resolve())), str(path))


@pytest.mark.parametrize("text", [
    "name: c\nslurm: {mem: 0, time: '1:00:00'}\n", "name: c\nslurm: {time: 1:00:00}\n",
    "name: c\ngpu: {memory_gib: 80, bf16_tflops: 1e3}\n", "name: c\nenv: {A: 1, B: '2', C: on}\n",
    "name: c\nlogin: {host: h, proxy_jump: 'a, b:2222'}\n", "name: c\nlogin: {host: h, proxy_jump: ''}\n",
    "name: c\nlogin: {host: h, proxy_jump: [a]}\n", "name: c\ncalibration_constants: {gemm_efficiency: 1}\n",
    "name: c\ncontainer: {runtime: pyxis, image: img, env: {X: 1}}\n", "name: c\nnodes: '2'\n",
], ids=range(10))
def test_cluster_documents_read_as_omegaconf_reads_them(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    assert outcome(load_cluster_file, path) == outcome(cluster_by_omegaconf, path)


# -- random documents: any mix of the keys and scalars above, and strings of YAML's odd characters
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

ODD_TEXT = st.text(alphabet="0123456789_.eE+-:xo ~${}?'\"#&*!abn", min_size=1, max_size=8)


def document(items) -> str:
    """``name: j`` and each (key, scalar) of ``items`` in its section (``workload: {steps: 4, shift: 1e-3}``)."""
    sections: dict[str, list[str]] = {}
    for key, scalar in items:
        section, _, rest = KEYS[key].partition(": ")
        sections.setdefault(section, []).append(rest[1:-1] % scalar)  # "{steps: %s}" -> "steps: 4"
    return "name: j\n" + "".join(f"{section}: {{{', '.join(parts)}}}\n" for section, parts in sections.items())


@settings(max_examples=250, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=st.lists(st.tuples(st.sampled_from(sorted(KEYS)), st.one_of(st.sampled_from(SCALARS), ODD_TEXT)),
                      min_size=1, max_size=3, unique_by=lambda kv: kv[0]))
def test_random_documents_read_as_omegaconf_reads_them(tmp_path, items):
    path = tmp_path / "random.yaml"
    path.write_text(document(items))
    plain = outcome(plain_job, path)
    if plain != ("ok", typed(None)):
        assert plain == outcome(omegaconf_job, path), document(items)


def test_document_puts_keys_in_their_sections():
    assert document([("workload.steps", "4"), ("model.patch", "2"), ("workload.shift", "1e-3")]) == (
        "name: j\nworkload: {steps: 4, shift: 1e-3}\nmodel: {patch: 2}\n")
