"""`sporch run --local --verify model.weights=DIR` on a tiny diffusers folder of one family, no preset: the
folder planned from its config.json, 4 gloo ranks against the unsharded model. Two ways to run the same point:

* :func:`launch_verify`: the real ``sporch`` command (rank processes started and watched by the local runner).
  A few families keep it (tests/runtime/models/test_generic.py: LTX-Video, cross-attention video; Qwen-Image,
  joint image) so the whole path -- the command's weights check, planning from the folder, the launch -- stays
  checked end to end.
* :func:`verify_on_ranks`: the same job and overrides planned as ``sporch run`` plans them and run through the
  launcher's own ``run_point`` on the test rank pool (tests/runtime/launch/on_ranks.py), for the other
  families: the assertion is about the point (the family read from the folder, its split, the verify's
  numbers in result.json), not about starting a launch, and it costs no torch import per rank.

Both return result.json (its ``metrics``: family, path, ok, max_abs_err, forward ...).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.testutil import ROOT

#: the job both ways run: one verify step, float32, 7 text tokens (frames, size, layout: the overrides)
JOB = ("name: g\nmodel: {text_len: 7}\nworkload: {kind: verify, %ssteps: 1, guidance_scale: 1.0, "
       "dtype: float32}\nresources: {time: '00:10:00'}\n")


def tiny_folder(tmp_path: Path, cls: str, config: dict, *, frames: bool = True) -> tuple[Path, Path]:
    """A random ``cls`` with ``config`` saved as a diffusers pipeline folder (``m/transformer``), and the
    job file (``frames: 1`` unless ``frames`` is False: the overrides give it); (folder, job)."""
    from sporch.runtime.models.build import random_diffusers

    random_diffusers(cls, config, seed=1).save_pretrained(str(tmp_path / "m" / "transformer"))
    job = tmp_path / "job.yaml"
    job.write_text(JOB % ("frames: 1, " if frames else ""))
    return tmp_path / "m", job


def launch_verify(tmp_path: Path, cls: str, config: dict, overrides, *, frames: bool = True,
                  env: dict | None = None, timeout: float = 300) -> dict:
    """``sporch run --local --verify --cluster local JOB model.weights=FOLDER OVERRIDES``: a real launch;
    asserts it exits 0; its result.json."""
    folder, job = tiny_folder(tmp_path, cls, config, frames=frames)
    out = subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", "run", "--local", "--verify",
                          "--cluster", "local", str(job), f"model.weights={folder}", *overrides,
                          f"output_dir={tmp_path / 'runs'}"], capture_output=True, text=True, timeout=timeout,
                         cwd=ROOT, env={**os.environ, **(env or {})})
    assert out.returncode == 0, out.stderr[-2000:]
    (result,) = (tmp_path / "runs").glob("g/*/result.json")
    return json.loads(result.read_text())


def verify_on_ranks(tmp_path: Path, cls: str, config: dict, overrides, *, frames: bool = True,
                    env: dict | None = None, timeout: float | None = None) -> dict:
    """The same point on the pool's ranks: the job planned with ``workload.kind=verify`` (what ``--verify``
    adds) on the local cluster, run by ``run_point`` with the environment ``sporch run --local`` gives each
    rank; asserts every rank exits EXIT_OK; its result.json."""
    from sporch.orchestrator.contract.exit_codes import EXIT_OK
    from tests.runtime.launch.on_ranks import plan_file, result, run_point_on_ranks

    folder, job = tiny_folder(tmp_path, cls, config, frames=frames)
    run_dir = tmp_path / "run"
    plan = plan_file(run_dir, f"model.weights={folder}", *overrides, "workload.kind=verify", job=job)
    world = json.loads(plan.read_text())["world_size"]
    codes = run_point_on_ranks(plan, run_dir, env, **({"timeout": timeout} if timeout else {}))
    # moved from the launches' `assert out.returncode == 0` (sporch's exit 0 stays in test_generic.py's launches)
    assert codes == [EXIT_OK] * world, codes
    return result(run_dir)
