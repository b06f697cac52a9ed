"""The environment variables sporch reads: declared once (contract/settings.py, runtime/faults.py),
read only there, listed in docs/settings.md (``SPORCH_UPDATE_GOLDEN=1`` rewrites the page)."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

from sporch.orchestrator.contract import settings
from sporch.orchestrator.jobs import retry
from sporch.runtime import faults

ROOT = Path(__file__).resolve().parents[2]
SETTINGS_FILE = ROOT / "orchestrator" / "contract" / "settings.py"
FAULTS_FILE = ROOT / "runtime" / "faults.py"
PAGE = ROOT / "docs" / "settings.md"
#: A variable's whole name (``SPORCH_FAULT_HANG_*`` and ``SPORCH_*`` are patterns, not names).
NAME = re.compile(r"SPORCH_[A-Z0-9_]*[A-Z0-9](?![A-Z0-9_*])")
#: The fault-injection hooks that exist (a new one is added here, in faults.HOOKS and in the docs).
HOOK_NAMES = {"SPORCH_FAULT_HANG_RANK", "SPORCH_FAULT_HANG_BEFORE", "SPORCH_FAULT_HANG_S",
              "SPORCH_FAULT_SLOW_NODE", "SPORCH_FAULT_SLOW_S", "SPORCH_FAULT_HIDE_WEIGHTS",
              "SPORCH_FAULT_SWAP_SHARDS", "SPORCH_FAULT_WRONG_SHARD"}

HEADER = """# Settings: the environment variables sporch reads

Every variable is declared once, with its type, default and one line, in
`orchestrator/contract/settings.py` (the fault-injection hooks for tests in `runtime/faults.py`);
those two modules are the only readers of `SPORCH_*` variables. This page is generated from them
(`SPORCH_UPDATE_GOLDEN=1 python -m pytest tests/project/test_settings.py` rewrites it; the test
fails when it is out of date).

Types: `path` (`~` expanded), `paths` (separated by `os.pathsep`), `seconds` (a finite
number above 0), `seconds>=0`, `int` (a whole number >= 0), `flag` (on unless empty or `0`), `text`. A value
that is not of its type is refused in one line where the `sporch` command reads it
(`SPORCH_GRACE_S`), and ignored with a warning, or the default used, where a rank reads it.

Two grace periods on purpose: commands that watch (`wait`, `campaign run`) retry an unreachable
Slurm or login host for 300 s by default, commands that look once (`status`, `campaign status`)
for 60 s, since a person waits at the prompt for their one answer
(`orchestrator/jobs/retry.py`: `DEFAULT_GRACE_S`, `STATUS_GRACE_S`). `--grace` or
`SPORCH_GRACE_S` sets either.

"""

FOOTER = """The example hooks of `examples/hooks.py` read their own variables (`SPORCH_FAIL_RANK`,
`SPORCH_HANG_S`, `SPORCH_SLEEP_S`, `SPORCH_DIE_RANK`): they are a job's own code, not sporch's.
"""


def page() -> str:
    return HEADER + settings.markdown([("Settings", settings.SETTINGS),
                                       ("Fault-injection hooks (tests only)", faults.HOOKS)]) + "\n" + FOOTER


def test_the_settings_page_is_generated_from_the_declarations():
    text = page()
    if os.environ.get("SPORCH_UPDATE_GOLDEN"):
        PAGE.write_text(text, encoding="utf-8")
    assert PAGE.read_text(encoding="utf-8") == text, "docs/settings.md is out of date; SPORCH_UPDATE_GOLDEN=1 rewrites it"


def test_each_setting_is_declared_once_with_a_type_a_default_and_a_line():
    every = settings.SETTINGS + faults.HOOKS
    assert len({s.name for s in every}) == len(every)
    for s in every:
        assert s.kind in settings.KINDS and s.doc and s.shown_default
    assert {s.name for s in faults.HOOKS} == HOOK_NAMES
    assert not [s.name for s in settings.SETTINGS if s.name.startswith("SPORCH_FAULT_")]


def _python_files():
    for folder in ("orchestrator", "runtime"):
        yield from sorted((ROOT / folder).rglob("*.py"))


def _readers(path: Path) -> list[str]:
    """Places in ``path`` that name a SPORCH_* variable in code: a string that is a whole name, or a
    keyword argument (``env.update(SPORCH_X=...)``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings \
                and NAME.fullmatch(node.value.strip().lstrip("$")):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
        elif isinstance(node, ast.keyword) and node.arg and NAME.fullmatch(node.arg):
            found.append(f"{path.relative_to(ROOT)}:{node.value.lineno}: {node.arg}=")
    return found


def test_no_other_module_reads_a_sporch_variable():
    found = [hit for path in _python_files() if path not in (SETTINGS_FILE, FAULTS_FILE) for hit in _readers(path)]
    assert not found, "name a Setting of contract/settings.py instead:\n" + "\n".join(found)


def test_fault_hooks_live_in_the_faults_module_only():
    found = [f"{path.relative_to(ROOT)}:{n}" for path in _python_files() if path != FAULTS_FILE
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if "SPORCH_FAULT_" in line]
    assert not found, "fault hooks belong to runtime/faults.py:\n" + "\n".join(found)


def test_every_variable_the_code_and_templates_mention_is_declared():
    declared = {s.name for s in settings.SETTINGS + faults.HOOKS}
    files = list(_python_files()) + sorted((ROOT / "templates").glob("*.j2"))
    mentioned = {m.group(0): f for f in files for m in NAME.finditer(f.read_text(encoding="utf-8"))}
    undeclared = {name: str(f.relative_to(ROOT)) for name, f in mentioned.items() if name not in declared}
    assert not undeclared, f"declare these in contract/settings.py: {undeclared}"


def test_reading_is_typed_and_a_bad_value_names_the_variable():
    env = {"SPORCH_GRACE_S": " 4.5 ", "SPORCH_CLUSTERS": os.pathsep.join(["/a", "", "~/b"]),
           "SPORCH_DEBUG": "0", "SPORCH_FORCE_CPU": "1", "SPORCH_PREFLIGHT_BYTES": "1024"}
    assert settings.read(settings.GRACE_S, env) == 4.5
    assert settings.read(settings.CLUSTERS, env) == [Path("/a"), Path("~/b").expanduser()]
    assert settings.read(settings.DEBUG, env) is False and settings.read(settings.FORCE_CPU, env) is True
    assert settings.read(settings.PREFLIGHT_BYTES, env) == 1024
    assert settings.read(settings.INIT_METHOD, {}) == "env://"
    assert settings.read(settings.HOME, {}) == Path("~/.local/share/sporch").expanduser()
    assert settings.read(settings.CLUSTERS, {}) == [] and settings.read(settings.GRACE_S, {}) is None
    for setting, bad in ((settings.GRACE_S, "-1"), (settings.COLLECTIVE_TIMEOUT_S, "0"),
                         (settings.PREFLIGHT_BYTES, "4MiB")):
        with pytest.raises(ValueError, match=re.escape(f"${setting.name} ")):
            settings.read(setting, {setting.name: bad})


def test_the_fault_hooks_answer_only_for_their_node_rank_or_layout():
    env = {"SPORCH_FAULT_SLOW_NODE": "n1", "SPORCH_FAULT_HIDE_WEIGHTS": "n2", "SPORCH_FAULT_SWAP_SHARDS": "1x1x1x2"}
    assert faults.slow_link_s("n1", env) == 0.2 and faults.slow_link_s("n2", env) == 0.0
    assert faults.hides_weights("n2", env) and not faults.hides_weights("n1", env)
    assert faults.swap_shards_set(env) and faults.swaps_shards("1x1x1x2", env) and not faults.swaps_shards("1x1x2x1", env)
    assert not faults.swap_shards_set({}) and faults.slow_link_s("n1", {}) == 0.0
    assert faults.hang_before(0, {"SPORCH_FAULT_HANG_RANK": "0", "SPORCH_FAULT_HANG_BEFORE": "x",
                                  "SPORCH_FAULT_HANG_S": "soon"}) == ("x", 3600.0)


def test_grace_defaults_are_the_ones_the_page_states():
    assert (retry.DEFAULT_GRACE_S, retry.STATUS_GRACE_S) == (300.0, 60.0)
    assert f"{retry.DEFAULT_GRACE_S:g} (wait" in settings.GRACE_S.shown_default
    assert f"{retry.STATUS_GRACE_S:g} (status" in settings.GRACE_S.shown_default
