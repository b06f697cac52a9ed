"""The Plan is the contract: every key the runtime reads from a plan section is a declared field.

An AST scan of runtime/ (and of orchestrator/ and the example entry points) finds every ``plan.<section>.<key>``
read, directly or through a local alias (``wl = plan.workload; wl.steps``), and every
subscript or ``.get`` on a section (a dict-style read would bypass the contract). Torch-free.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from sporch.orchestrator.contract.plan import _SECTIONS, Plan

ROOT = Path(__file__).resolve().parents[2]
SCANNED = sorted([*(ROOT / "runtime").rglob("*.py"), *(ROOT / "orchestrator").rglob("*.py"),
                  *(ROOT / "examples").glob("*.py"), ROOT / "tests" / "runtime" / "launch" / "launch_hooks.py"])
#: What a section offers besides its fields.
SECTION_METHODS = {"to_dict", "from_dict", "world_size", "resolved_env", "summary"}


def _section_of(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """``plan.workload`` (or ``req.plan.workload``) -> "workload"; an alias name -> its section."""
    if isinstance(node, ast.Attribute) and node.attr in _SECTIONS and (
            (isinstance(node.value, ast.Name) and node.value.id == "plan")
            or (isinstance(node.value, ast.Attribute) and node.value.attr == "plan")):
        return node.attr
    if isinstance(node, ast.Name):
        return aliases.get(node.id)
    return None


def reads(tree: ast.AST) -> tuple[list[tuple[str, str, int]], list[tuple[str, int]]]:
    """(section, key, line) for each attribute read; (section, line) for each dict-style read."""
    attrs: set[tuple[str, str, int]] = set()
    dict_style: set[tuple[str, int]] = set()
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
            continue
        aliases: dict[str, str] = {}
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                sec = _section_of(node.value, {})
                if sec:
                    aliases[node.targets[0].id] = sec
        for node in ast.walk(fn):
            if isinstance(node, ast.Attribute):
                sec = _section_of(node.value, aliases)
                if sec:
                    attrs.add((sec, node.attr, node.lineno))
            elif isinstance(node, ast.Subscript) and _section_of(node.value, aliases):
                dict_style.add((_section_of(node.value, aliases), node.lineno))
    return sorted(attrs), sorted(dict_style)


def _declared(section: str) -> set[str]:
    return {f.name for f in dataclasses.fields(_SECTIONS[section])} | SECTION_METHODS


@pytest.mark.parametrize("path", SCANNED, ids=lambda p: str(p.relative_to(ROOT)))
def test_runtime_reads_only_declared_plan_fields(path):
    attrs, dict_style = reads(ast.parse(path.read_text(encoding="utf-8")))
    undeclared = [f"{path.name}:{line}: plan.{sec}.{key}" for sec, key, line in attrs if key not in _declared(sec)]
    assert not undeclared, "reads of undeclared plan keys: " + ", ".join(undeclared)
    assert not dict_style, f"dict-style reads of plan sections in {path.name}: {dict_style}"


def test_the_scan_sees_the_runtime_reads():
    """The scan is not vacuous: it finds the runtime's reads of the workload, the model and the
    job (the workloads' dispatch and the model's workload, wherever they live in runtime/), and it
    flags an undeclared key and a dict-style read."""
    keys = {(s, k) for path in SCANNED if ROOT / "runtime" in path.parents
            for s, k, _ in reads(ast.parse(path.read_text(encoding="utf-8")))[0]}
    assert {("workload", "shift"), ("workload", "steps"), ("model", "weights"), ("job", "entrypoint")} <= keys
    bad = ast.parse("def f(plan):\n    wl = plan.workload\n    return wl.get('shift'), plan.model['weights']\n")
    attrs, dict_style = reads(bad)
    assert ("workload", "get") in {(s, k) for s, k, _ in attrs} and "get" not in _declared("workload")
    assert dict_style == [("model", 3)]


def test_sections_round_trip_and_refuse_unknown_keys():
    from sporch.runtime.testing import plan_for, preset_model
    from sporch.orchestrator.contract.plan import Layout

    plan = plan_for(Layout(ring=2), preset_model("tiny-flux"), workload={"shift": 3.0})
    assert Plan.from_json(plan.to_json()) == plan
    d = plan.to_dict()
    d["workload"]["shfit"] = 2.0
    with pytest.raises(ValueError, match=r"plan.workload: unknown key\(s\) shfit"):
        Plan.from_dict(d)
