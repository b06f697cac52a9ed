"""The orchestrator never imports torch or the runtime (it runs on login nodes and laptops)."""

from __future__ import annotations

import ast
import subprocess
import sys

from orch_testutil import EXAMPLES, ROOT

PROBE = """
import sys, io, contextlib
from orchestrator.cli.main import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(["submit", "--dry-run", "--cluster", "a100x32", {job!r}])
bad = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.") or m == "runtime"
             or m.startswith("runtime."))
print(code, ",".join(bad))
"""


def test_dry_run_leaves_torch_out_of_sys_modules(tmp_path):
    job = str(EXAMPLES / "wan14b-720p.yaml")
    r = subprocess.run([sys.executable, "-c", PROBE.format(job=job)], capture_output=True, text=True,
                       cwd=tmp_path, check=True)
    code, _, bad = r.stdout.strip().partition(" ")
    assert code == "0", r.stderr
    assert bad == "", f"imported: {bad}"


def test_no_torch_or_runtime_imports_in_source():
    for path in (ROOT / "orchestrator").rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                assert top not in ("torch", "runtime"), f"{path}: imports {name}"
