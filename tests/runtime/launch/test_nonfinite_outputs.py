"""No silent wrong output (issue 32 items 6 and 8), on the diffusers classes every model runs as:

* a checkpoint holding NaN or inf is refused as it is read (per tensor), naming the tensor; a
  finite weight that overflows the run's dtype likewise;
* a job whose output is not finite (here: finite weights so large that the forward overflows) is a
  failed job naming the stage and the rank, never ``completed``;
* ``--verify`` fails when a shard is wrong: the test hook ``SPORCH_FAULT_WRONG_SHARD`` makes one
  rank's shard of the sharded forward wrong; ``sporch run --local`` says ``verification failed``,
  exits 1 and prints the worst error.
"""

from __future__ import annotations

import json
import re

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from sporch.orchestrator.models.checkpoint_files import CheckpointError  # noqa: E402
from sporch.runtime.models.finite import NonFiniteOutput, check_output  # noqa: E402
from sporch.runtime.models.build import random_diffusers  # noqa: E402
from sporch.runtime.models.families.wan import TINY as WAN_TINY  # noqa: E402
from sporch.runtime.models.placed import build_transformer  # noqa: E402
from sporch.orchestrator.contract.exit_codes import EXIT_FAILED  # noqa: E402
from tests.runtime.launch.local_cli import TINY, local2, sporch  # noqa: E402
from tests.runtime.launch.on_ranks import plan_file, run_point_on_ranks  # noqa: E402

#: a Wan parameter the forward reads (the second block's feed-forward output)
PARAM = "blocks.1.ffn.net.2.weight"


def _folder(path, **changes):
    """The tiny Wan transformer's diffusers folder, with ``changes`` (parameter -> fill value)."""
    model = random_diffusers("WanTransformer3DModel", dict(WAN_TINY), seed=3)
    with torch.no_grad():
        for name, value in changes.items():
            dict(model.named_parameters())[name].fill_(value)
    model.save_pretrained(str(path / "transformer"))
    return path


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_nonfinite_weight_is_refused_as_it_is_read(tmp_path, value):
    folder = _folder(tmp_path, **{PARAM: value})
    with pytest.raises(CheckpointError, match=rf"tensor '{re.escape(PARAM)}': .*NaN or inf; the checkpoint is "
                                              r"corrupt") as info:
        build_transformer(weights=str(folder), class_name="", config=None, ctx=None)
    assert "\n" not in str(info.value)


def test_a_weight_that_overflows_the_dtype_is_refused(tmp_path):
    folder = _folder(tmp_path, **{PARAM: 1e6})  # > float16's 65504
    with pytest.raises(CheckpointError, match="overflows float16"):
        build_transformer(weights=str(folder), class_name="", config=None, ctx=None, dtype=torch.float16)


def test_check_output_names_the_stage_and_passes_finite_tensors():
    check_output(torch.zeros(3), "x")
    check_output(torch.zeros(3, dtype=torch.long), "x")
    with pytest.raises(NonFiniteOutput, match=r"stage generate \(decoded frames\) on rank 0: 1 of 3 output"):
        check_output(torch.tensor([0.0, float("nan"), 1.0]), "generate (decoded frames)")


def _result(run_dir) -> dict:
    return json.loads((run_dir / "result.json").read_text())


def test_a_job_with_nonfinite_output_fails_naming_stage_and_rank(tmp_path):
    """The point on the session's rank pool through the launcher's run_point (on_ranks.py; it was
    a `sporch run --local` launch): result.json is what is asserted, and run_point writes it; the
    launch's own exit code for a failed point is test_local_run.py's failing-rank test."""
    weights = _folder(tmp_path, **{"proj_out.weight": 3e38})
    run_dir = tmp_path / "run"
    codes = run_point_on_ranks(plan_file(run_dir, "workload.kind=inference", f"model.weights={weights}",
                                         "model.preset=null", "parallel.ring=2", "parallel.ulysses=2"), run_dir)
    assert EXIT_FAILED in codes, codes
    result = _result(run_dir)
    assert result["status"] == "failed", result
    assert re.search(r"NonFiniteOutput: stage inference \(denoised latents\) on rank \d: \d+ of \d+ output values "
                     r"are NaN or inf", result["error"]), result["error"]
    assert not list(run_dir.glob("latents_*.safetensors"))  # nothing kept as if it were a result


def test_verify_fails_on_a_wrong_shard(tmp_path):
    """2 ranks, ring 2 (it was 4, ring 2 x ulysses 2): rank 1's shard is wrong."""
    run_dir = tmp_path / "run"
    proc = sporch("run", "--local", "--cluster", str(local2(tmp_path)), str(TINY), "parallel.ring=2", "parallel.ulysses=1",
                  "--run-dir", str(run_dir), "--timeout", "200", env={"SPORCH_FAULT_WRONG_SHARD": "1"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "sporch: verification failed: max_rel_err=" in proc.stderr, proc.stderr
    worst = float(re.search(r"max_abs_err=([0-9.e+-]+)", proc.stdout).group(1))
    result = _result(run_dir)
    assert result["verified"] is False and result["max_abs_err"] == worst, result
    assert 0.5 < worst, worst  # the planted offset of 1 on one rank's tokens (and its share through the steps)
    assert result["max_rel_err"] > result["tolerance"]
