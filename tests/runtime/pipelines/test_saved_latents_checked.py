"""``sporch decode`` checks saved latents before decoding (issue 32 item 7): a file whose fingerprint
was kept but whose tensor changed (another shape than the job wrote, another dtype, NaN or inf) is
refused in one line with exit 2, and nothing is decoded or written."""

from __future__ import annotations

import contextlib
import io
import math

import pytest

torch = pytest.importorskip("torch")

from sporch.orchestrator.config.cluster import find_cluster  # noqa: E402
from sporch.orchestrator.config.job import job_from_dict  # noqa: E402
from sporch.orchestrator.plan.planner import make_plan  # noqa: E402
from sporch.runtime import decode  # noqa: E402
from sporch.runtime.pipelines.latent_files import LatentStore, SavedLatentsError  # noqa: E402
from sporch.runtime.pipelines.params import generate_params  # noqa: E402

WORKLOAD = dict(kind="generate", frames=9, height=64, width=64, steps=2, prompt="a fox", dtype="float32")
#: what the job wrote: Wan's final latents (4 channels; 9 frames / 4 + 1; 64 / 8)
SHAPE = (4, 3, 8, 8)


@pytest.fixture
def job_dir(tmp_path):
    plan = make_plan(find_cluster("local"), job_from_dict({"name": "gen", "model": {"preset": "tiny"},
                                                           "workload": WORKLOAD, "parallel": {}}))
    (tmp_path / "plan.json").write_text(plan.to_json())
    params = generate_params(plan)
    return tmp_path, params


def _plant(folder, params, latents) -> None:
    """Write ``latents`` as prompt 0's with the job's fingerprint (as if the file was edited)."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    store = LatentStore(params, folder)
    store.save([0], torch.zeros(1, *SHAPE))
    with safe_open(str(store.path(0)), framework="pt") as fh:
        meta = fh.metadata()
    save_file({"latents": latents}, str(store.path(0)), metadata=meta)


def _decode(folder) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = decode.main([str(folder), "--device", "cpu"])
    return code, err.getvalue()


@pytest.mark.parametrize("make,message", [
    (lambda: torch.zeros(4, 3, 8, 9), "shape [4, 3, 8, 9], but the job wrote [4, 3, 8, 8]"),
    (lambda: torch.zeros(4, 8, 8), "shape [4, 8, 8]"),
    (lambda: torch.zeros(4, 3, 8, 8, dtype=torch.float64), "holds float64 latents"),
    (lambda: torch.zeros(4, 3, 8, 8).index_fill_(1, torch.tensor([1]), math.nan), "holds 256 NaN or inf value(s) of 768"),
    (lambda: torch.full((4, 3, 8, 8), math.inf), "holds 768 NaN or inf"),
])
def test_changed_latents_are_refused_before_decoding(job_dir, make, message):
    folder, params = job_dir
    _plant(folder, params, make())
    code, err = _decode(folder)
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert "00000.safetensors" in err and "run the job again" in err
    assert sorted(p.name for p in folder.iterdir()) == ["latents", "plan.json"]  # nothing written
    with pytest.raises(SavedLatentsError):
        LatentStore(params, folder).load([0])


def test_latents_as_the_plan_says_pass_the_check(job_dir):
    folder, params = job_dir
    _plant(folder, params, torch.randn(4, 3, 8, 8))
    assert LatentStore(params, folder).load([0]).shape == (1, 4, 3, 8, 8)
