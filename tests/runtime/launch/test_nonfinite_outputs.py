"""No silent wrong output (issue 32 items 6 and 8).

* a checkpoint holding NaN or inf is refused as it is read (per tensor), naming the tensor; a
  finite weight that overflows the run's dtype likewise; a LoRA whose merged update overflows too;
* a job whose output is not finite (here: finite weights so large that the forward overflows) is a
  failed job naming the stage and the rank, never ``completed``: inference, verify, benchmark;
* ``--verify`` fails when a shard is wrong: the test hook ``SPORCH_FAULT_WRONG_SHARD`` makes one
  rank's shard of the sharded forward wrong; ``sporch run --local`` says ``verification failed``,
  exits 1 and prints the worst error.
"""

from __future__ import annotations

import json
import re

import pytest

torch = pytest.importorskip("torch")

from sporch.orchestrator.models.checkpoint_files import CheckpointError  # noqa: E402
from sporch.runtime.model import build_model, tiny_model_dict  # noqa: E402
from sporch.runtime.model.build import save_safetensors  # noqa: E402
from sporch.runtime.model.finite import NonFiniteOutput, check_output  # noqa: E402
from sporch.runtime.model.verify import verify  # noqa: E402
from sporch.orchestrator.contract.exit_codes import EXIT_FAILED  # noqa: E402
from tests.runtime.launch.local_cli import TINY, sporch  # noqa: E402
from tests.runtime.launch.on_ranks import plan_file, run_point_on_ranks  # noqa: E402

MODEL = tiny_model_dict("cross")
GRID = (3, 4, 4)


def _weights(path, **changes):
    """The tiny model's weights in sporch's names, with ``changes`` (name -> fill value)."""
    model = build_model(MODEL)
    with torch.no_grad():
        for name, value in changes.items():
            dict(model.named_parameters())[name].fill_(value)
    save_safetensors(model, str(path))
    return path


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_nonfinite_weight_is_refused_as_it_is_read(tmp_path, value):
    path = _weights(tmp_path / "w.safetensors", **{"blocks.1.ffn.fc2.weight": value})
    with pytest.raises(CheckpointError, match=r"tensor 'blocks.1.ffn.fc2.weight' .*NaN or inf; the checkpoint is "
                                              r"corrupt") as info:
        build_model(MODEL, weights=str(path))
    assert "\n" not in str(info.value)


def test_a_weight_that_overflows_the_dtype_is_refused(tmp_path):
    path = _weights(tmp_path / "w.safetensors", **{"blocks.1.ffn.fc2.weight": 1e6})  # > float16 65504
    with pytest.raises(CheckpointError, match="overflows float16"):
        build_model(MODEL, weights=str(path), dtype="float16")


def test_a_lora_whose_merged_update_overflows_is_refused(tmp_path):
    from safetensors.torch import save_file

    lora = tmp_path / "a.safetensors"  # finite values (the planner's check passes), an update of 1e60
    save_file({"blocks.0.self_attn.q.lora_down.weight": torch.full((2, 64), 1e30),
               "blocks.0.self_attn.q.lora_up.weight": torch.full((64, 2), 1e30)}, str(lora))
    with pytest.raises(CheckpointError, match=r"merged with scale 1, blocks.0.self_attn.q.weight: .* NaN or inf"):
        build_model(MODEL, lora=[{"path": str(lora), "scale": 1.0}])


def test_check_output_names_the_stage_and_passes_finite_tensors():
    check_output(torch.zeros(3), "x")
    check_output(torch.zeros(3, dtype=torch.long), "x")
    with pytest.raises(NonFiniteOutput, match=r"stage generate \(decoded frames\) on rank 0: 1 of 3 output"):
        check_output(torch.tensor([0.0, float("nan"), 1.0]), "generate (decoded frames)")


def test_verify_of_an_overflowing_model_fails_instead_of_comparing_nan():
    """NaN errors compare as within any tolerance (max(0.0, nan) is 0.0): the outputs are checked."""
    model = build_model(MODEL)
    with torch.no_grad():
        model.head.head.weight.fill_(3e38)
    with pytest.raises(NonFiniteOutput, match=r"stage verify \(sharded forward\) on rank 0"):
        verify(model, None, grid=GRID, steps=1)


def _result(run_dir) -> dict:
    return json.loads((run_dir / "result.json").read_text())


def test_a_job_with_nonfinite_output_fails_naming_stage_and_rank(tmp_path):
    """The point on the session's rank pool through the launcher's run_point (on_ranks.py; it was
    a `sporch run --local` launch): result.json is what is asserted, and run_point writes it; the
    launch's own exit code for a failed point is test_local_run.py's failing-rank test."""
    weights = _weights(tmp_path / "w.safetensors", **{"head.head.weight": 3e38})
    run_dir = tmp_path / "run"
    codes = run_point_on_ranks(plan_file(run_dir, "workload.kind=inference", f"model.weights={weights}",
                                         "parallel.ring=2", "parallel.ulysses=2"), run_dir)
    assert EXIT_FAILED in codes, codes
    result = _result(run_dir)
    assert result["status"] == "failed", result
    assert re.search(r"NonFiniteOutput: stage inference \(denoised latents\) on rank \d: \d+ of \d+ output values "
                     r"are NaN or inf", result["error"]), result["error"]
    assert not list(run_dir.glob("latents_*.safetensors"))  # nothing kept as if it were a result


def test_verify_fails_on_a_wrong_shard(tmp_path):
    run_dir = tmp_path / "run"
    proc = sporch("run", "--local", "--cluster", "local", str(TINY), "parallel.ring=2", "parallel.ulysses=2",
                  "--run-dir", str(run_dir), "--timeout", "200", env={"SPORCH_FAULT_WRONG_SHARD": "1"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "sporch: verification failed: max_rel_err=" in proc.stderr, proc.stderr
    worst = float(re.search(r"max_abs_err=([0-9.e+-]+)", proc.stdout).group(1))
    result = _result(run_dir)
    assert result["verified"] is False and result["max_abs_err"] == worst, result
    assert 0.5 < worst < 2.0, worst  # the planted offset of 1 (plus the sampling steps' share of it)
    assert result["max_rel_err"] > result["tolerance"]
