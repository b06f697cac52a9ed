"""The orchestrator never imports torch, nor the runtime, not even inside a function (it runs
on login nodes and laptops; the brief's rule). What both halves share is in
sporch.orchestrator.contract; the orchestrator reaches the runtime only by starting a process
(``python -m sporch.runtime.launch``)."""

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


def test_no_torch_and_no_runtime_anywhere_in_source():
    for path in (ROOT / "orchestrator").rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for name in _imports(ast.walk(tree)):
            assert name.split(".")[0] != "torch", f"{path}: imports {name}"
            assert not (name + ".").startswith("sporch.runtime."), f"{path}: imports {name}"
        src = path.read_text()
        assert 'import_module("sporch.runtime' not in src and "import_module('sporch.runtime" not in src, path
