"""`sporch run --local` with ``model.weights``: a published-layout checkpoint drives the run;
a broken one is a one-line error with exit 2 (before any rank starts when the files
themselves are broken, from the ranks when a tensor is missing)."""

from __future__ import annotations

import json

import pytest

from tests.runtime.launch.local_cli import TINY, sporch


def _one_line_exit_2(proc, needle):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_truncated_checkpoint_exit_2_before_ranks(tmp_path):
    folder = tmp_path / "Wan-T2V"
    folder.mkdir()
    (folder / "diffusion_pytorch_model.safetensors").write_bytes(b"\x40\x00\x00\x00")
    run_dir = tmp_path / "run"
    proc = sporch("run", "--local", "--cluster", "local", str(TINY), f"model.weights={folder}",
                  "--run-dir", str(run_dir))
    _one_line_exit_2(proc, "is truncated or not a safetensors file")
    assert not run_dir.exists()


@pytest.fixture(scope="module")
def tiny_wan_diffusers(tmp_path_factory):
    """A random diffusers Wan2.1 model with the shapes of the `tiny` preset, saved the way the
    -Diffusers releases are (transformer/ folder, sharded with an index)."""
    pytest.importorskip("diffusers")
    from tests.runtime.models.published import diffusers_wan

    cfg = dict(patch_size=(1, 2, 2), num_attention_heads=4, attention_head_dim=16, in_channels=4, out_channels=4,
               text_dim=32, freq_dim=256, ffn_dim=128, num_layers=2, cross_attn_norm=True,
               qk_norm="rms_norm_across_heads", eps=1e-6)
    root = tmp_path_factory.mktemp("ckpt") / "Wan-tiny-Diffusers"
    diffusers_wan(cfg, seed=3).save_pretrained(root / "transformer", max_shard_size="100KB")
    return root


def test_diffusers_checkpoint_runs_and_verifies(tiny_wan_diffusers, tmp_path):
    """The point `sporch run --local --verify model.weights=DIR` plans, on the pool's ranks as the launcher
    runs it (tests/runtime/launch/on_ranks.py): the sharded published-layout checkpoint loaded and verified.
    The real launches of a weights folder: test_missing_tensor_exit_2_from_the_ranks below, and
    tests/runtime/models/test_generic.py's test_sporch_run_local_verify_on_a_tiny_folder."""
    from sporch.orchestrator.contract.exit_codes import EXIT_OK
    from tests.runtime.launch.on_ranks import plan_file, result, run_point_on_ranks

    run_dir = tmp_path / "run"
    plan = plan_file(run_dir, f"model.weights={tiny_wan_diffusers}", "parallel.ulysses=2", "parallel.ring=2",
                     "workload.kind=verify")
    assert run_point_on_ranks(plan, run_dir) == [EXIT_OK] * 4  # was the launch's `proc.returncode == 0`
    out = result(run_dir)
    assert out["verified"] is True and out["max_rel_err"] <= 1e-5
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["model"]["weights"] == str(tiny_wan_diffusers)


def test_missing_tensor_exit_2_from_the_ranks(tiny_wan_diffusers, tmp_path):
    import shutil

    folder = tmp_path / "incomplete"
    shutil.copytree(tiny_wan_diffusers / "transformer", folder)
    index = folder / "diffusion_pytorch_model.safetensors.index.json"
    data = json.loads(index.read_text())
    data["weight_map"].pop("blocks.1.ffn.net.2.bias")
    index.write_text(json.dumps(data))
    proc = sporch("run", "--local", "--cluster", "local", str(TINY), f"model.weights={folder}",
                  "--run-dir", str(tmp_path / "run"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "lacks tensor 'blocks.1.ffn.net.2.bias'" in proc.stderr.strip().splitlines()[-1]
