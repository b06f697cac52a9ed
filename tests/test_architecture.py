"""The layers, enforced (docs/architecture.md).

import-linter runs the contracts in pyproject.toml ([tool.importlinter]): the orchestrator's
layers, the runtime's layers, the orchestrator importing neither sporch.runtime nor torch, and
the runtime importing nothing of the orchestrator but its shared bottom (``RUNTIME_SHARED``). It counts
function-level imports and follows chains (a -> b -> c).

Beside it, an AST pass of this file's own, for what import-linter does not say:

* each offending import with its file:line, both modules and the rule, for the same contracts
  (read from pyproject.toml), direct imports only but including ``"module:attr"`` strings and
  ``import_module("...")`` literals, which import-linter does not see;
* no circle between files (module- and function-level imports and those strings are edges);
* no bare ``orchestrator`` / ``runtime`` imports (only ``sporch.orchestrator`` / ``sporch.runtime``);
* every package folder is listed in [tool.setuptools] packages, every module sits in a layer,
  and the runtime's forbidden list names every orchestrator package but ``RUNTIME_SHARED``, which
  sit in the orchestrator's bottom layers;
* function-level in-project imports only where ``LAZY_ALLOWED`` says;
* the shared bottom (``RUNTIME_SHARED``) imports the standard library only.

Without pytest::

    python tests/test_architecture.py            # every finding, then the counts
    python tests/test_architecture.py --counts   # the counts only
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections import deque
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set, Tuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: repository folder -> the package it installs as
PACKAGES = {"orchestrator": "sporch.orchestrator", "runtime": "sporch.runtime"}
#: folders whose Python files must never name the bare top-level packages
BARE_SCAN = ("orchestrator", "runtime", "tests", "bench", "examples", "scripts")

#: What the runtime may import of the orchestrator: the torch-free, standard-library-only bottom
#: (the Plan and result schema, the models and their file readers, hang records, benchmark
#: statistics, safe file writes). Everything else of the orchestrator is forbidden to it.
RUNTIME_SHARED = frozenset({"contract", "models", "hangs", "benchstats", "safe_files"})
#: The bottom layers of the orchestrator's contract: besides RUNTIME_SHARED, only these sit there.
BOTTOM_ONLY_ORCHESTRATOR = frozenset({"errors", "paths"})

#: Function-level in-project imports that are meant: (file, how) -> why. Everything else that
#: imports a sporch module inside a function is a hidden dependency and must move to module level.
LAZY_ALLOWED: Dict[Tuple[str, str], str] = {
    ("orchestrator/cli/main.py", "string"): (
        "the command table: a command's module (and the click/rich/omegaconf/jinja2 it pulls) loads "
        "only when that command runs, so `sporch --help` stays lean (bench/cli_startup.py)"),
    ("orchestrator/cli/submit_cmd.py", "function"): (
        "submitting (the backends, the job store, the ssh and Slurm runners) and --wait load only when "
        "used: `submit --dry-run` stays lean (bench/cli_startup.py, tests/project/test_cli_imports.py)"),
    ("runtime/workloads.py", "function"): (
        "the model workloads (torch._dynamo at import, about 1.4 s of CPU of a rank's start, then "
        "diffusers) load only on ranks that run a model: a preflight or an entrypoint rank starts on "
        "torch alone (tests/runtime/test_rank_imports.py)"),
}

MODULE_ATTR = re.compile(r"(sporch\.(?:orchestrator|runtime)(?:\.[A-Za-z_]\w*)*):[A-Za-z_][\w.]*")
IMPORT_FUNCS = {"import_module", "__import__"}


@dataclass(frozen=True, order=True)
class Edge:
    """One import: ``source`` (a module of ours) imports ``target`` at ``path:line``.

    ``how``: "module" (an import statement run at import time, class bodies included),
    "function" (an import statement inside a function), or "string" (a ``"module:attr"``
    string or an ``import_module("module")`` literal, resolved when the code runs)."""

    path: str
    line: int
    source: str
    target: str
    how: str

    def show(self) -> str:
        kind = "" if self.how == "module" else f" ({self.how}-level)" if self.how == "function" else " (string)"
        return f"{self.path}:{self.line}: {self.source} -> {self.target}{kind}"


# -- the project's modules ----------------------------------------------------------------

def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT)
    parts = [PACKAGES[rel.parts[0]], *rel.parts[1:-1]]
    if rel.stem != "__init__":
        parts.append(rel.stem)
    return ".".join(parts)


@lru_cache(maxsize=None)
def project_files() -> Dict[str, Path]:
    """module name -> file, for every Python file under orchestrator/ and runtime/."""
    return {module_name(p): p for folder in PACKAGES for p in sorted((ROOT / folder).rglob("*.py"))}


def in_project(name: str) -> bool:
    return any(name == pkg or name.startswith(pkg + ".") for pkg in PACKAGES.values())


def known_module(name: str, modules: Set[str]) -> str:
    """The longest prefix of ``name`` that is one of our modules (``a.b.attr`` -> ``a.b``)."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in modules:
            return ".".join(parts[:n])
    return name


# -- imports of one file ------------------------------------------------------------------

class _ImportFinder(ast.NodeVisitor):
    """Collects (line, dotted name, how) for every import of one file."""

    def __init__(self, module: str, is_package: bool):
        self.package = module if is_package else module.rpartition(".")[0]
        self.depth = 0
        self.found: List[Tuple[int, str, str]] = []

    @property
    def how(self) -> str:
        return "function" if self.depth else "module"

    def visit_FunctionDef(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef

    def visit_Import(self, node: ast.Import) -> None:
        self.found += [(node.lineno, alias.name, self.how) for alias in node.names]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            up = self.package.split(".")[: len(self.package.split(".")) - (node.level - 1)]
            base = ".".join(up + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        # "from pkg import name": name may be a submodule (kept as pkg.name, trimmed later) or an attribute
        self.found += [(node.lineno, base if a.name == "*" else f"{base}.{a.name}", self.how) for a in node.names]

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in IMPORT_FUNCS and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            self.found.append((node.lineno, node.args[0].value, "string"))
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            m = MODULE_ATTR.fullmatch(node.value)
            if m:
                self.found.append((node.lineno, m.group(1), "string"))


def file_imports(source: "str | ast.AST", module: str, is_package: bool) -> List[Tuple[int, str, str]]:
    finder = _ImportFinder(module, is_package)
    finder.visit(ast.parse(source) if isinstance(source, str) else source)
    return finder.found


@lru_cache(maxsize=None)
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


@lru_cache(maxsize=None)
def all_edges() -> Tuple[Edge, ...]:
    """Every import of every file under orchestrator/ and runtime/: ours resolved to the module
    file they name, third-party ones as written."""
    files = project_files()
    modules = set(files)
    edges = set()
    for module, path in files.items():
        rel = str(path.relative_to(ROOT))
        for line, name, how in file_imports(parsed(path), module, path.name == "__init__.py"):
            target = known_module(name, modules) if in_project(name) else name
            if target != module:
                edges.add(Edge(rel, line, module, target, how))
    return tuple(sorted(edges))


def project_edges() -> List[Edge]:
    return [e for e in all_edges() if in_project(e.target)]


# -- the contracts (pyproject.toml) -------------------------------------------------------

@lru_cache(maxsize=None)
def pyproject() -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def contracts(kind: str) -> List[dict]:
    return [c for c in pyproject()["tool"]["importlinter"]["contracts"] if c["type"] == kind]


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@dataclass(frozen=True)
class Layer:
    index: int          # 0 = top
    name: str           # "cli"
    independent: bool   # its siblings ("a | b") may not import each other


def parse_layers(contract: dict) -> Dict[str, Layer]:
    """A layers contract's "cli", "contract | errors | paths" lines -> name -> Layer."""
    out = {}
    for index, line in enumerate(contract["layers"]):
        independent = ":" not in line
        for name in re.split(r"[|:]", line):
            name = name.strip().strip("()")
            out[name] = Layer(index, name, independent)
    return out


def rule_broken(edge: Edge) -> Optional[str]:
    """The contract (and why) this direct import breaks, or None."""
    for c in contracts("layers"):
        layers = parse_layers(c)
        for container in c["containers"]:
            def layer_of(module: str) -> Optional[Layer]:
                if not within(module, container) or module == container:
                    return None
                return layers.get(module[len(container) + 1:].split(".")[0])
            src, dst = layer_of(edge.source), layer_of(edge.target)
            if src is None or dst is None or src.name == dst.name:
                continue
            if dst.index < src.index:
                return f"{c['id']}: {src.name} may not import {dst.name} (a higher layer)"
            if dst.index == src.index and src.independent:
                return f"{c['id']}: {src.name} may not import {dst.name} (independent siblings)"
    for c in contracts("forbidden"):
        if any(within(edge.source, s) for s in c["source_modules"]):
            for f in c["forbidden_modules"]:
                if within(edge.target, f):
                    return f"{c['id']}: {edge.source.split('.')[1]} may not import {f}"
    return None


def layer_violations() -> List[Tuple[Edge, str]]:
    out = []
    for edge in all_edges():
        rule = rule_broken(edge)
        if rule:
            out.append((edge, rule))
    return out


# -- circles between files ----------------------------------------------------------------

def strongly_connected(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Tarjan's algorithm, iterative; the groups of two or more nodes that reach each other."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    groups = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return sorted(groups)


def shortest_cycle(start: str, graph: Dict[str, Set[str]], members: Set[str]) -> List[str]:
    """start -> ... -> start, fewest steps, inside ``members``."""
    came: Dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(graph.get(node, ())):
            if child not in members:
                continue
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(came[path[-1]])
                return list(reversed(path)) + [start]
            if child not in came:
                came[child] = node
                queue.append(child)
    return [start]


def file_circles() -> List[Tuple[List[str], List[Edge]]]:
    """Each group of files that import each other: its members and its shortest circle, as the
    imports (file:line) that make it."""
    graph: Dict[str, Set[str]] = {}
    by_pair: Dict[Tuple[str, str], Edge] = {}
    for e in project_edges():
        graph.setdefault(e.source, set()).add(e.target)
        by_pair.setdefault((e.source, e.target), e)
    out = []
    for group in strongly_connected(graph):
        cycle = min((shortest_cycle(start, graph, set(group)) for start in group), key=len)
        out.append((group, [by_pair[(a, b)] for a, b in zip(cycle, cycle[1:])]))
    return out


# -- function-level imports ---------------------------------------------------------------

def lazy_imports() -> Tuple[List[Edge], List[Edge]]:
    """In-project imports resolved at call time: (allowed by LAZY_ALLOWED, the others)."""
    lazy = [e for e in project_edges() if e.how != "module"]
    allowed = [e for e in lazy if (e.path, e.how) in LAZY_ALLOWED]
    return allowed, [e for e in lazy if (e.path, e.how) not in LAZY_ALLOWED]


# -- bare top-level imports ---------------------------------------------------------------

def bare_imports() -> List[str]:
    """``import orchestrator...`` / ``from runtime... import`` / ``import_module("runtime...")``
    and ``"orchestrator.x.y"`` / ``"runtime.x:attr"`` strings naming a real module of ours."""
    children = {folder: {p.stem for p in (ROOT / folder).iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
                for folder in PACKAGES}
    bare_string = re.compile(r"(orchestrator|runtime)\.([A-Za-z_]\w*)(?:\.[A-Za-z_]\w*)*(?::[\w.]+)?")
    found = []
    for folder in BARE_SCAN:
        for path in sorted((ROOT / folder).rglob("*.py")) if (ROOT / folder).is_dir() else ():
            rel = path.relative_to(ROOT)
            for node in ast.walk(parsed(path)):
                names: List[str] = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    m = bare_string.fullmatch(node.value)
                    if m and m.group(2) in children[m.group(1)]:
                        names = [node.value]
                bad = [n for n in names if n.split(".")[0] in PACKAGES]
                found += [f"{rel}:{node.lineno}: {n}" for n in bad]
    return found


# -- packaging and coverage of the contracts ----------------------------------------------

def package_problems() -> List[str]:
    listed = set(pyproject()["tool"]["setuptools"]["packages"])
    folders = {module_name(p) for folder in PACKAGES for p in (ROOT / folder).rglob("__init__.py")}
    problems = [f"{name}: a package folder missing from [tool.setuptools] packages" for name in sorted(folders - listed)]
    ours = {n for n in listed if in_project(n) and "._data" not in n}
    problems += [f"{name}: listed in [tool.setuptools] packages, but no such package folder" for name in sorted(ours - folders)]
    return problems


def top_children(folder: str) -> Set[str]:
    """The subpackages and modules right under a repository folder (orchestrator/ -> cli, errors, ...)."""
    return {p.stem for p in (ROOT / folder).iterdir()
            if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()}


def coverage_problems() -> List[str]:
    problems = []
    for c in contracts("layers"):
        named = set(parse_layers(c))
        for container in c["containers"]:
            folder = next(f for f, pkg in PACKAGES.items() if pkg == container)
            problems += [f"{c['id']}: {container}.{name} is in no layer" for name in sorted(top_children(folder) - named)]
            problems += [f"{c['id']}: layer {name} names nothing in {container}" for name in sorted(named - top_children(folder))]
    runtime_rule = next(c for c in contracts("forbidden") if c["source_modules"] == ["sporch.runtime"])
    wanted = {f"sporch.orchestrator.{name}" for name in top_children("orchestrator") - RUNTIME_SHARED}
    have = set(runtime_rule["forbidden_modules"])
    problems += [f"{runtime_rule['id']}: forbidden_modules lacks {name}" for name in sorted(wanted - have)]
    problems += [f"{runtime_rule['id']}: forbidden_modules names {name}, which must stay allowed or does not exist"
                 for name in sorted(have - wanted)]
    # the shared ones sit below everything the runtime may not see (but errors and paths)
    layers = parse_layers(next(c for c in contracts("layers") if c["containers"] == ["sporch.orchestrator"]))
    lowest_private = max((layers[n].index for n in layers if n not in RUNTIME_SHARED | BOTTOM_ONLY_ORCHESTRATOR),
                         default=-1)
    problems += [f"orchestrator-layers: {name} (shared with the runtime) sits at or above {lowest_private}, "
                 "a layer of orchestrator-only code" for name in sorted(RUNTIME_SHARED)
                 if name in layers and layers[name].index <= lowest_private]
    return problems


# -- the report ---------------------------------------------------------------------------

def counts() -> Dict[str, int]:
    allowed, hidden = lazy_imports()
    circles = file_circles()
    violations = layer_violations()
    return {
        "upward imports (direct imports breaking a contract)": len(violations),
        "  of which layers": sum(r.split(":")[0].endswith("-layers") for _, r in violations),
        "file circles (groups of files importing each other)": len(circles),
        "  files in them": sum(len(g) for g, _ in circles),
        "function-level in-project imports": len(allowed) + len(hidden),
        "  allowed (LAZY_ALLOWED)": len(allowed),
        "  to move to module level": len(hidden),
        "bare orchestrator/runtime imports": len(bare_imports()),
        "unlisted or stale packages": len(package_problems()),
    }


def format_violations() -> str:
    return "\n".join(f"{e.show()}  [{rule}]" for e, rule in layer_violations())


def format_circles() -> str:
    lines = []
    for group, edges in file_circles():
        lines.append(f"circle of {len(group)} files: {', '.join(group)}")
        lines += [f"    {e.show()}" for e in edges]
    return "\n".join(lines)


def lint_imports() -> subprocess.CompletedProcess:
    """import-linter's own run of the contracts (no cache folder is written)."""
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run([sys.executable, "-c", code, "--config", str(ROOT / "pyproject.toml"), "--no-cache", "--no-logo"],
                          cwd=ROOT, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})


# -- the tests ----------------------------------------------------------------------------

def fail_with(header: str, lines: Sequence[str]) -> None:
    if lines:
        pytest.fail(f"{header}\n" + "\n".join(lines), pytrace=False)


def test_import_linter_contracts_hold():
    pytest.importorskip("importlinter", reason="pip install -e .[test] (import-linter)")
    r = lint_imports()
    if r.returncode:
        pytest.fail(f"import-linter: broken contracts (pyproject.toml [tool.importlinter])\n{r.stdout}{r.stderr}", pytrace=False)


def test_each_import_keeps_to_its_layer():
    fail_with("imports that break the layers (file:line: importer -> imported  [contract: rule]):",
              [f"{e.show()}  [{rule}]" for e, rule in layer_violations()])


def test_no_import_circle_between_files():
    fail_with("files that import each other (each group, and one circle through it):", format_circles().splitlines())


def test_no_bare_orchestrator_or_runtime_imports():
    fail_with("import sporch.orchestrator... / sporch.runtime..., never the bare names:", bare_imports())


def test_every_package_folder_is_installed_and_in_a_layer():
    fail_with("packaging (pyproject.toml [tool.setuptools]) and contract coverage ([tool.importlinter]):",
              package_problems() + coverage_problems())


def shared_bottom_imports() -> List[Edge]:
    """Imports of anything but the standard library (and our own modules) in the part of the
    orchestrator the runtime imports (RUNTIME_SHARED), at any level: they run on login nodes
    without torch and on ranks alike."""
    out = []
    for e in all_edges():
        parts = e.source.split(".")
        if parts[:2] != ["sporch", "orchestrator"] or len(parts) < 3 or parts[2] not in RUNTIME_SHARED:
            continue
        root = e.target.split(".")[0]
        if not in_project(e.target) and root != "__future__" and root not in sys.stdlib_module_names:
            out.append(e)
    return out


def test_what_the_runtime_shares_imports_the_standard_library_only():
    fail_with("the shared bottom (RUNTIME_SHARED) imports the standard library only:",
              [e.show() for e in shared_bottom_imports()])


def test_function_level_in_project_imports_only_where_allowed():
    allowed, hidden = lazy_imports()
    print(f"function-level in-project imports: {len(allowed) + len(hidden)} ({len(allowed)} allowed, {len(hidden)} to move)")
    fail_with("in-project imports inside functions are hidden dependencies: import at module level "
              "(or add the file to LAZY_ALLOWED with its reason):", [e.show() for e in hidden])


def test_the_finder_sees_every_kind_of_import():
    """The AST pass itself: module, relative, function-level and string imports are edges."""
    src = '''
import sporch.runtime.parallel
from . import sibling
from ..contract.plan import Plan
TABLE = {"x": "sporch.orchestrator.cli.plan_cmd:plan", "y": "not sporch.runtime.launch:main"}
def f():
    from sporch.orchestrator.plan import planner
    importlib.import_module("sporch.runtime.launch")
'''
    found = file_imports(src, "sporch.orchestrator.jobs.status", is_package=False)
    assert found == [
        (2, "sporch.runtime.parallel", "module"),
        (3, "sporch.orchestrator.jobs.sibling", "module"),
        (4, "sporch.orchestrator.contract.plan.Plan", "module"),
        (5, "sporch.orchestrator.cli.plan_cmd", "string"),
        (7, "sporch.orchestrator.plan.planner", "function"),
        (8, "sporch.runtime.launch", "string"),
    ]
    modules = {"sporch.orchestrator.contract.plan", "sporch.orchestrator.plan", "sporch.orchestrator.plan.planner"}
    assert known_module("sporch.orchestrator.contract.plan.Plan", modules) == "sporch.orchestrator.contract.plan"
    assert known_module("sporch.orchestrator.plan.planner", modules) == "sporch.orchestrator.plan.planner"
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert strongly_connected(graph) == [["a", "b", "c"]]
    assert shortest_cycle("a", graph, {"a", "b", "c"}) == ["a", "b", "c", "a"]


def main(argv: Sequence[str]) -> int:
    numbers = counts()
    if "--counts" not in argv:
        sections = [
            ("upward imports (file:line: importer -> imported [rule])", format_violations()),
            ("file circles", format_circles()),
            ("function-level in-project imports to move", "\n".join(e.show() for e in lazy_imports()[1])),
            ("bare orchestrator/runtime imports", "\n".join(bare_imports())),
            ("packaging and contract coverage", "\n".join(package_problems() + coverage_problems())),
        ]
        for title, body in sections:
            print(f"== {title}\n{body or '(none)'}\n")
    width = max(len(k) for k in numbers)
    for name, value in numbers.items():
        print(f"{name.ljust(width)}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
