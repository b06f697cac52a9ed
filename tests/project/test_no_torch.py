"""The orchestrator never imports torch, nor the runtime at module level (it runs on login
nodes and laptops; the brief's rule). A function may import a torch-free runtime module
lazily (sporch.orchestrator.contract.results, the result files' contract) or the entry point on a compute node."""

from __future__ import annotations

import ast
import subprocess
import sys

from tests.testutil import EXAMPLES, ROOT

PROBE = """
import sys, io, contextlib
from sporch.orchestrator.cli.main import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(["submit", "--dry-run", "--cluster", "a100x32", {job!r}])
bad = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.") or m == "sporch.runtime"
             or m.startswith("sporch.runtime."))
print(code, ",".join(bad))
"""


def test_dry_run_leaves_torch_out_of_sys_modules(tmp_path):
    job = str(EXAMPLES / "wan14b-720p.yaml")
    r = subprocess.run([sys.executable, "-c", PROBE.format(job=job)], capture_output=True, text=True,
                       cwd=tmp_path, check=True)
    code, _, bad = r.stdout.strip().partition(" ")
    assert code == "0", r.stderr
    assert bad == "", f"imported: {bad}"


def _imports(nodes):
    for node in nodes:
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def test_no_torch_anywhere_and_no_runtime_at_module_level_in_source():
    for path in (ROOT / "orchestrator").rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for name in _imports(ast.walk(tree)):
            assert name.split(".")[0] != "torch", f"{path}: imports {name}"
        module_level = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        module_level += [n for b in tree.body if isinstance(b, (ast.If, ast.Try)) for n in ast.walk(b)]
        for name in _imports(module_level):
            assert not (name + ".").startswith("sporch.runtime."), f"{path}: imports {name} at module level"
        src = path.read_text()
        assert 'import_module("sporch.runtime' not in src and "import_module('sporch.runtime" not in src, path
