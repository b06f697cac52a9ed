"""A rank starts lean: ``python -m sporch.runtime.launch`` imports torch, and the model code only
when its workload runs a model (runtime/workloads.py): the model workloads import torch._dynamo
(``torch.compiler.disable`` decorates their cache and attention steps), about 1.4 s of CPU of a
rank's start on the 2-core machine, and build diffusers' classes (diffusers, peft, transformers,
torchao) after that. A preflight job's ranks and an entrypoint's ranks load none of it. Each probe
runs in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

MODEL_CODE = ("torch._dynamo", "diffusers", "transformers", "peft", "torchao", "sporch.runtime.models.workload",
              "sporch.runtime.pipelines.generate")

PROBE = """
import json, sys
import {module}
names = {names!r}
print(json.dumps(sorted(n for n in names if n in sys.modules)))
"""


def loaded_by(module: str) -> list[str]:
    r = subprocess.run([sys.executable, "-c", PROBE.format(module=module, names=MODEL_CODE)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_rank_entry_point_loads_no_model_code():
    assert loaded_by("sporch.runtime.launch") == []


def test_the_model_workload_loads_dynamo():
    """The probe sees model code when it is loaded (so the test above can fail)."""
    assert {"torch._dynamo", "sporch.runtime.models.workload"} <= set(loaded_by("sporch.runtime.models.workload"))
