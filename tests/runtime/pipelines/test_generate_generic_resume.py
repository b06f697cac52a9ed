"""A generic-path generate stopped by USR2 after step k resumes from step k and ends with the
uninterrupted run's frames (runtime/pipelines/resume.py).

Tiny random pipeline folders (runtime/pipelines/tiny.py), float32, world 1 in this
process: Qwen-Image (FlowMatchEulerDiscreteScheduler with dynamic shift; true CFG, two transformer
calls per step, norm rescaling), LTX-Video (FlowMatchEuler; both CFG passes batched into one call;
packed video latents) and CogVideoX (CogVideoXDDIMScheduler; batched CFG). A stand-in for the launcher's Progress answers "stop" after step k; the run raises
RequeueRequested and keeps its step files; the next run in the same folder resumes: its
transformer blocks run only for the steps left (counted), its frames equal the uninterrupted
run's. Then the same on 2 gloo ranks, Qwen-Image on U2, SD3.5 on cfg 2 and Qwen-Image on cfg 2 (its
two calls split), where the sequence- and CFG-parallel hooks are attached only at the boundary step. CogVideoX with CogVideoXDPMScheduler (its pipeline keeps
``old_pred_original_sample`` outside the scheduler) writes no step files and restarts.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("diffusers")
pytest.importorskip("imageio_ffmpeg")

from sporch.orchestrator.config.cluster import find_cluster  # noqa: E402
from sporch.orchestrator.config.job import job_from_dict  # noqa: E402
from sporch.orchestrator.plan.planner import make_plan  # noqa: E402
from sporch.runtime.testing import run_distributed  # noqa: E402

STEPS, STOP_AFTER = 5, 2
#: world 1: one per kind of pipeline loop (true CFG, DDIM, packed video latents); SD3.5 runs in
#: the 2-rank test, HunyuanVideo (FlowMatchEuler, one pass) was checked once by hand (docs/generate.md)
FAMILIES = ("qwen-image", "cogvideox", "ltx-video")
FOLDERS = (*FAMILIES, "sd3")
#: transformer calls per step: Qwen-Image's true CFG calls it twice, SD3, CogVideoX and LTX-Video
#: batch both passes, HunyuanVideo's guidance is embedded (one pass)
CALLS = {"qwen-image": 2, "sd3": 1, "cogvideox": 1, "ltx-video": 1, "hunyuanvideo": 1}
#: per family: the workload keys that differ (video frames; LTX-Video's 32 x 32 pixels per latent;
#: HunyuanVideo takes no negative prompt)
EXTRA = {"cogvideox": {"frames": 9}, "ltx-video": {"frames": 9, "width": 96},
         "hunyuanvideo": {"frames": 9, "negative_prompt": None}}
WORKLOAD = dict(kind="generate", prompt="a red fox running in snow", negative_prompt="blurry", height=64,
                width=48, steps=STEPS, guidance_scale=4.0, dtype="float32", seed=7)
TOL = 1e-6


class StopAfter:
    """The launcher's Progress as the generate sees it: USR2 arrives during step ``k`` (the stop
    flag is read once per finished step, at the agreement)."""

    def __init__(self, k: int) -> None:
        self.k, self.reads = k, 0

    @property
    def stop_requested(self) -> bool:
        self.reads += 1
        return self.reads >= self.k


def _plan(fam: str, folder: Path, gpus: int = 1, **parallel):
    workload = {**WORKLOAD, **EXTRA.get(fam, {})}
    job = job_from_dict({"name": "g", "model": {"weights": str(folder)}, "workload": workload,
                         "parallel": {"cfg": 1, "ulysses": 1, "ring": 1, "dp": 1, **parallel}})
    return make_plan(dataclasses.replace(find_cluster("local"), gpus_per_node=gpus), job)


def _block_calls(calls: list):
    """A ``compile_model`` stand-in: counts the calls of the transformer's first block (computed
    calls only: a skipped call never reaches the blocks); compiles nothing."""
    def attach(model):
        model.transformer_blocks[0].register_forward_pre_hook(lambda *a: calls.append(1))
    return attach


def _generate(plan, ctx, out: Path, progress=None):
    from sporch.runtime.pipelines.generate import run_generate

    frames, calls = {}, []
    metrics = run_generate(plan, ctx, torch.device("cpu"), out, frames_sink=lambda i, f: frames.__setitem__(i, f),
                           progress=progress, compile_model=_block_calls(calls))
    return metrics, frames.get(0), len(calls)


def _step_files(out: Path, rank: int | str = "*") -> list[str]:
    """This rank's step files in the job folder ``out`` (every rank's by default)."""
    folder = out / "checkpoint"
    return sorted(p.name for p in folder.glob(f"generate_rank{rank}.*.pt")) if folder.exists() else []


def _stop_then_resume(plan, ctx, out: Path, usr2: bool = True):
    """(files after the stop, the resumed run's metrics, frames, block calls); ``usr2``: this rank
    gets the signal (False: only another rank of the replica does)."""
    from sporch.runtime.progress import RequeueRequested

    with pytest.raises(RequeueRequested, match=f"after step {STOP_AFTER}/{STEPS}"):
        _generate(plan, ctx, out, progress=StopAfter(STOP_AFTER if usr2 else 10 ** 9))
    kept = _step_files(out, ctx.rank if ctx is not None else 0)
    return (kept, *_generate(plan, ctx, out))


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from sporch.runtime.pipelines.tiny import save_tiny_pipeline

    root = tmp_path_factory.mktemp("generic-resume")
    return {fam: save_tiny_pipeline(fam, root / fam, seed=i + 1) for i, fam in enumerate(FOLDERS)}


@pytest.fixture(scope="module")
def uninterrupted(folders, tmp_path_factory):
    """Each family's uninterrupted world-1 run, made once: {family: (metrics, frames, block calls)}."""
    runs: dict = {}

    def get(fam: str):
        if fam not in runs:
            runs[fam] = _generate(_plan(fam, folders[fam]), None, tmp_path_factory.mktemp(f"reference-{fam}"))
        return runs[fam]
    return get


@pytest.mark.parametrize("fam", FAMILIES)
def test_stopped_after_step_k_then_resumed_gives_the_uninterrupted_frames(folders, uninterrupted, fam, tmp_path):
    plan = _plan(fam, folders[fam])
    ref_metrics, ref, ref_calls = uninterrupted(fam)
    assert ref_calls == STEPS * CALLS[fam] and ref_metrics["resumed"] == {}
    kept, metrics, frames, calls = _stop_then_resume(plan, None, tmp_path / "run")
    assert kept == [f"generate_rank0.b0.s{STOP_AFTER - 1}.pt", f"generate_rank0.b0.s{STOP_AFTER}.pt"], kept
    err = float(np.abs(frames - ref).max())
    print(f"{fam}: stopped after {STOP_AFTER}/{STEPS}, resumed: max |frames - uninterrupted| = {err:.3g}, "
          f"block calls {calls} (uninterrupted {ref_calls})")
    assert metrics["resumed"] == {"0": STOP_AFTER}
    assert calls == (STEPS - STOP_AFTER) * CALLS[fam]  # the finished steps' transformer calls were skipped
    assert len(metrics["step_ms"]) == STEPS - STOP_AFTER
    assert err <= TOL, err
    assert _step_files(tmp_path / "run") == []  # dropped once the prompt is denoised


def test_the_comparison_can_fail(folders, uninterrupted, tmp_path):
    """The kept step file holding the step before's latents (an off-by-one resume) moves the
    resumed frames far beyond TOL: the comparison sees which latents were put back."""
    from sporch.runtime.progress import RequeueRequested

    fam = "qwen-image"
    plan = _plan(fam, folders[fam])
    _, ref, _ = uninterrupted(fam)
    out = tmp_path / "run"
    with pytest.raises(RequeueRequested):
        _generate(plan, None, out, progress=StopAfter(STOP_AFTER))
    newest, before = (out / "checkpoint" / f"generate_rank0.b0.s{s}.pt" for s in (STOP_AFTER, STOP_AFTER - 1))
    state = torch.load(newest, weights_only=True)
    state["x"] = torch.load(before, weights_only=True)["x"]
    torch.save(state, newest)
    _, frames, _ = _generate(plan, None, out)
    err = float(np.abs(frames - ref).max())
    print(f"resumed with the step before's latents: max |frames - uninterrupted| = {err:.3g}")
    assert err > 1e3 * TOL


def test_a_scheduler_not_checked_restarts_the_prompt(folders, tmp_path):
    """CogVideoX with CogVideoXDPMScheduler: no step files, the stopped prompt restarts (every
    step's transformer call runs again, and nothing is said to be resumed)."""
    import json
    import shutil

    from diffusers import CogVideoXDPMScheduler

    folder = tmp_path / "cogvideox-dpm"
    shutil.copytree(folders["cogvideox"], folder)
    CogVideoXDPMScheduler.from_pretrained(str(folder / "scheduler")).save_pretrained(str(folder / "scheduler"))
    index = json.loads((folder / "model_index.json").read_text())
    index["scheduler"] = ["diffusers", "CogVideoXDPMScheduler"]
    (folder / "model_index.json").write_text(json.dumps(index))
    plan = _plan("cogvideox", folder)
    kept, metrics, frames, calls = _stop_then_resume(plan, None, tmp_path / "run")
    assert kept == [] and metrics["resumed"] == {} and calls == STEPS
    assert metrics["pipeline"] == "CogVideoXPipeline" and np.isfinite(frames).all()


def _two_ranks(cases: list, out: str):
    """Each (name, plan) case stopped (USR2 on rank 1 only) and resumed on these ranks, after its
    uninterrupted run."""
    from sporch.orchestrator.contract.plan import Plan
    from sporch.runtime.parallel import ParallelContext

    res = {}
    for name, plan_json in cases:
        plan = Plan.from_json(plan_json)
        ctx = ParallelContext.from_plan(plan)
        try:
            _, ref, ref_calls = _generate(plan, ctx, Path(out) / name / "reference")
            kept, metrics, frames, calls = _stop_then_resume(plan, ctx, Path(out) / name / "run", usr2=ctx.rank == 1)
        finally:
            ctx.close()
        res[name] = {"ref": ref, "frames": frames, "kept": kept, "resumed": metrics["resumed"], "calls": calls,
                     "ref_calls": ref_calls}
    return res


#: 2-rank cases: (name, family, parallel, transformer calls per step on each rank)
TWO_RANKS = (("U2", "qwen-image", {"ulysses": 2}, 2), ("cfg2", "sd3", {"cfg": 2}, 1),
             ("cfg2 two calls", "qwen-image", {"cfg": 2}, 1))


def test_two_ranks_stop_is_agreed_and_the_resume_is_exact(folders, tmp_path):
    """2 gloo ranks: Qwen-Image on U2, SD3.5 on cfg 2 (each rank one half of the batched CFG
    call) and Qwen-Image on cfg 2 (each rank one of the step's two calls); only rank 1 gets USR2, both stop after the same step and keep their files; the resumed
    run (the sequence- / CFG-parallel hooks attached at the boundary step) gives the uninterrupted
    2-rank run's frames on the leader, and skipped the finished steps on both ranks."""
    cases = [(name, _plan(fam, folders[fam], gpus=2, **par).to_json()) for name, fam, par, _ in TWO_RANKS]
    ranks = run_distributed(_two_ranks, 2, cases, str(tmp_path))
    for name, fam, _, per_step in TWO_RANKS:
        lead = ranks[0][name]
        err = float(np.abs(lead["frames"] - lead["ref"]).max())
        print(f"{fam} {name}: stopped after {STOP_AFTER}/{STEPS}, resumed: max |frames - uninterrupted| = {err:.3g}")
        assert err <= TOL, (name, err)
        for r, rank in enumerate(ranks):
            rec = rank[name]
            assert rec["kept"] == [f"generate_rank{r}.b0.s{s}.pt" for s in (STOP_AFTER - 1, STOP_AFTER)], rec["kept"]
            assert rec["resumed"] == {"0": STOP_AFTER}
            assert rec["calls"] == (STEPS - STOP_AFTER) * per_step and rec["ref_calls"] == STEPS * per_step


def test_step_files_of_another_plan_are_not_resumed_from(folders, uninterrupted, tmp_path):
    """The job changed (another guidance scale) and ran again into the folder a stopped run left
    its step files in: its key differs, so the prompt restarts (every transformer call computed,
    nothing resumed) and the frames are the new plan's own, not a mix of the two."""
    from sporch.runtime.progress import RequeueRequested

    fam = "ltx-video"
    out = tmp_path / "run"
    with pytest.raises(RequeueRequested):
        _generate(_plan(fam, folders[fam]), None, out, progress=StopAfter(STOP_AFTER))
    assert _step_files(out)
    changed = _plan(fam, folders[fam])
    changed = dataclasses.replace(changed, workload=dataclasses.replace(changed.workload, guidance_scale=3.0))
    metrics, frames, calls = _generate(changed, None, out)
    fresh = _generate(changed, None, tmp_path / "fresh")
    print(f"another plan's step files: resumed {metrics['resumed']}, block calls {calls}, "
          f"max |frames - a fresh run| = {float(np.abs(frames - fresh[1]).max()):.3g}")
    assert metrics["resumed"] == {} and calls == STEPS * CALLS[fam]
    assert float(np.abs(frames - fresh[1]).max()) <= TOL
