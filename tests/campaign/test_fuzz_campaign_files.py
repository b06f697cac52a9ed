"""Property-based fuzzing of campaign files and of a campaign directory's state.json,
result.json and point.json (issue 24), through the CLI entry point in-process.

A bad campaign file or state.json: exit 2, one line on stderr (``sporch: error: ...``), no
traceback, nothing written. A bad result.json or point.json is a point of its own: the report
goes on (exit 0), shows that point as unreadable and every other point as it is. Example counts
are modest (two shared cores).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SETTINGS = settings(max_examples=20, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

CAMPAIGN = {"name": "fuzz", "output_dir": "out",
            "base": {"model": {"preset": "tiny"},
                     "workload": {"kind": "benchmark", "frames": 5, "height": 32, "width": 32, "dtype": "float32"}},
            "matrix": {"clusters": ["local"], "nodes": [1], "layouts": [{"ulysses": 1, "ring": "auto"}]},
            "run": {"retries": 1}}
VALUES = {"cluster": "local", "nodes": 1, "preset": "tiny", "shape": "5x32x32", "dtype": "float32", "repeat": 0}


def run_main(*args) -> tuple[int, str, str]:
    from sporch.orchestrator.cli.main import main

    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


def assert_one_line(code: int, err: str, what) -> None:
    assert code == 2, (what, code, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sporch: error: "), (what, err)
    assert "Traceback" not in err and "internal error" not in err, (what, err)


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SPORCH_CLUSTERS", raising=False)


# -- values that are wrong -----------------------------------------------------------------------
junk = st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30), st.sampled_from([math.nan, math.inf]),
                 st.text(alphabet="ab$\\{[ \n", max_size=6), st.lists(st.integers(-3, 3), max_size=3),
                 st.dictionaries(st.sampled_from(["x", "job_id", "status"]), st.integers(0, 3), max_size=2))
not_json = st.one_of(st.binary(max_size=40).filter(lambda b: not _parses(b)),
                     st.sampled_from([b"", b"{", b"\xff\xfe", b'{"a": 1', b"\x00" * 8]))


def _parses(data: bytes) -> bool:
    try:
        json.loads(data.decode("utf-8"))
        return True
    except ValueError:
        return False


def _dump(value) -> bytes:
    return json.dumps(value).encode("utf-8")


# -- campaign files -------------------------------------------------------------------------------
bad_count = st.one_of(st.integers(max_value=0), st.integers(min_value=2**63, max_value=10**30),
                      st.sampled_from([math.nan, math.inf, "x", [1.5], {"a": 1}]))
CAMPAIGN_BAD = [
    (("name",), st.one_of(st.sampled_from(["", "..", "a/b", "../x", "a b", "$(id)"]), st.lists(st.integers(), min_size=1),
                          st.text(alphabet="abc", min_size=101, max_size=200))),
    (("matrix", "nodes"), st.one_of(st.lists(bad_count, min_size=1, max_size=2), st.sampled_from(["pow3", {"a": 1}]))),
    (("matrix", "clusters"), st.one_of(st.sampled_from([[], "local", [["x"]], [{"a": 1}], ["no-such-cluster"]]))),
    (("matrix", "repeats"), bad_count),
    (("matrix", "layouts"), st.sampled_from(["some", [{"ulysses": 0}], [{"zz": 2}], [3], {"a": 1}])),
    (("run", "retries"), st.one_of(st.integers(max_value=-1), st.sampled_from(["x", math.nan, [1]]))),
    (("run", "throttle"), st.one_of(st.integers(max_value=0), st.sampled_from(["x", math.inf, [1]]))),
    (("references",), st.sampled_from(["x", [3], [{"metrics": {"step_ms_median": "fast"}}],
                                       [{"metrics": {"no_such_metric": [1, 0.1, 0.1, "ms"]}}]])),
    (("matrix",), st.sampled_from([[], "x", 3])),
    (("unknown_key",), st.integers(0, 3)),
]


@st.composite
def bad_campaigns(draw):
    (path, values) = draw(st.sampled_from(CAMPAIGN_BAD))
    doc = json.loads(json.dumps(CAMPAIGN))
    node = doc
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = draw(values)
    return path, yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


@SETTINGS
@given(case=bad_campaigns(), command=st.sampled_from(["plan", "run"]))
def test_bad_campaign_files_are_one_line_errors_that_write_nothing(case, command):
    path, text = case
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "c.yaml").write_text(text)
        old = os.getcwd()
        try:
            os.chdir(folder)
            args = ["campaign", command, "c.yaml"] + (["--local"] if command == "run" else [])
            code, _, err = run_main(*args)
        finally:
            os.chdir(old)
        assert_one_line(code, err, (path, text))
        assert sorted(p.name for p in folder.iterdir()) == ["c.yaml"], (path, text)


# -- a prepared campaign directory (made once, copied per example) --------------------------------
@pytest.fixture(scope="module")
def prepared_once(tmp_path_factory) -> Path:
    from sporch.orchestrator.campaign.expand import expand
    from sporch.orchestrator.campaign.folder import prepare
    from sporch.orchestrator.campaign.spec import load_campaign

    folder = tmp_path_factory.mktemp("prepared")
    doc = {**CAMPAIGN, "output_dir": str(folder / "out")}
    (folder / "c.yaml").write_text(json.dumps(doc))
    c = load_campaign(str(folder / "c.yaml"))
    return prepare(expand(c), c.directory()).root


state_bad = st.one_of(
    not_json,
    st.builds(_dump, junk.filter(lambda v: not isinstance(v, dict))),
    st.builds(lambda v: _dump({"arrays": v}), junk.filter(lambda v: v not in (None, []))),
    st.builds(lambda v: _dump({"points": v}), junk.filter(lambda v: v is not None and v != {} and (
        not isinstance(v, dict) or any(not isinstance(x, dict) for x in v.values())))),
    st.builds(lambda v: _dump({"points": {"p": {"submissions": v}}}),
              junk.filter(lambda v: v is not None and (isinstance(v, bool) or not isinstance(v, int)))),
    st.builds(lambda v: _dump({"points": {"p": {"task": v}}}), junk.filter(lambda v: v is not None and not isinstance(v, str))),
)


@SETTINGS
@given(content=state_bad)
def test_a_bad_state_json_is_one_line_and_left_alone(prepared_once, tmp_path, content):
    root = Path(tempfile.mkdtemp(dir=tmp_path)) / "c"
    shutil.copytree(prepared_once, root)
    (root / "state.json").write_bytes(content)
    before = tree(root)
    code, _, err = run_main("campaign", "status", root)
    assert_one_line(code, err, content)
    after = tree(root)
    after.pop(".lock", None), before.pop(".lock", None)  # the lock file records its holder
    assert after == before


# -- result.json / point.json: the point is unreadable, the report goes on --------------------------
result_bad = st.one_of(
    not_json,
    st.builds(_dump, junk.filter(lambda v: not isinstance(v, dict))),
    st.builds(lambda v: _dump({"status": "completed", "metrics": v}),
              junk.filter(lambda v: v is not None and not isinstance(v, dict))),
    st.builds(lambda v: _dump({"status": v}), junk.filter(lambda v: v is not None and not isinstance(v, str))),
    st.builds(lambda k: _dump({"status": "completed", k: 1}), st.sampled_from(["zz", "bogus", "Status"])),
    st.builds(lambda v: _dump({"status": "completed", "errors": v}),
              junk.filter(lambda v: v is not None and v != [] and v != {} and v != 0 and v != "" and v is not False)),
    st.just(b"FIFO"),
)
point_bad = st.one_of(
    not_json,
    st.builds(_dump, junk.filter(lambda v: not isinstance(v, dict))),
    st.builds(lambda v: _dump({"id": "b", "values": v}), junk.filter(lambda v: not isinstance(v, dict))),
    st.builds(lambda v: _dump({"id": v, "values": {}}), junk.filter(lambda v: not isinstance(v, str))),
)


def synthetic(root: Path) -> Path:
    for pid, gpus, layout in (("a", 2, "1x1x1x2"), ("b", 4, "1x1x2x2")):
        d = root / "points" / pid
        d.mkdir(parents=True)
        (d / "point.json").write_text(json.dumps({"id": pid, "values": {**VALUES, "gpus": gpus, "layout": layout}}))
        (d / "result.json").write_text(json.dumps({"status": "completed", "metrics": {"step_ms_median": 10.0}}))
    return root


@settings(SETTINGS, max_examples=8)  # each draws the four plots
@given(which=st.sampled_from(["result.json", "point.json"]), data=st.data())
def test_a_bad_point_file_is_an_unreadable_point_and_the_report_goes_on(tmp_path, which, data):
    content = data.draw(result_bad if which == "result.json" else point_bad)
    root = synthetic(Path(tempfile.mkdtemp(dir=tmp_path)) / "c")
    target = root / "points" / "b" / which
    target.unlink()
    if content == b"FIFO":
        os.mkfifo(target)
    else:
        target.write_bytes(content)
    out_dir = root.parent / "r"
    code, out, err = run_main("campaign", "report", root, "--out", out_dir)
    assert code == 0 and err == "", (content, err)
    assert "Traceback" not in out and "unreadable: b" in out, (content, out)
    rows = {r["id"]: r for r in csv.DictReader(open(out_dir / "table.csv", encoding="utf-8"))}
    assert rows["a"]["status"] == "completed" and rows["a"]["step_ms_median"] == "10.0"
    assert rows["b"]["status"] == "unreadable"
    assert not list(out_dir.glob(".*.tmp"))
