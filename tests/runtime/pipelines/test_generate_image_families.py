"""`workload.kind: generate` for CogView4, Lumina-Image 2.0 (split plans derived) and FLUX.2 [dev]
(the class's ``_cp_plan``), against their own diffusers pipelines.

Each family's tiny random pipeline folder (its ``tiny_pipeline``: the family's real component classes,
seeded weights, the word-level tokenizer) is generated from with sporch's generate workload on 4 gloo
ranks (U2R2, float32), and the leader's frames are compared with the family's diffusers pipeline
loaded from the same folder and run unsharded (same prompt, negative prompt, seed, steps and guidance)
within test_generate_generic's FRAME_TOL (1e-4). Where the family's pipeline applies CFG, cfg 2 x U2 runs
in the same 4-rank world: each cfg rank computes one of the pipeline's two calls per step (CogView4's
"cond" / "uncond", Lumina 2's two calls in no cache context, told apart by their order:
``PipelineCfg.TWO_CALLS``) or one row of its [uncond, cond] batch (``BATCHED``), and the frames still
equal the pipeline's; FLUX.2 [dev] is guidance-distilled (the scale embedded, one pass per step, no
cfg 2). One spawned world runs every case. FLUX.2 [klein] and Chroma stay refused, in one line each.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("diffusers")

from sporch.orchestrator.config.cluster import find_cluster  # noqa: E402
from sporch.orchestrator.config.job import job_from_dict  # noqa: E402
from sporch.orchestrator.models.families import PipelineCfg, get_family  # noqa: E402
from sporch.orchestrator.plan.planner import make_plan  # noqa: E402
from sporch.runtime.testing import run_distributed  # noqa: E402
from tests.runtime.pipelines.four_rank_generate import world  # noqa: E402

FRAME_TOL = 1e-4  # as test_generate_generic.py: 1/40 of an 8-bit level
FAMILIES = ("cogview4", "lumina2", "flux2")
PROMPT = "a red fox running in snow"
NEGATIVE = "blurry low quality"
SEED, STEPS, GUIDANCE = 7, 3, 4.0
HEIGHT, WIDTH = 64, 48
WORKLOAD = dict(kind="generate", prompt=PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH, steps=STEPS,
                guidance_scale=GUIDANCE, dtype="float32", seed=SEED)
U2R2 = {"ulysses": 2, "ring": 2}
CFG2U2 = {"cfg": 2, "ulysses": 2, "ring": 1}
#: the families whose pipeline applies CFG (parallel.cfg=2 runs for them)
CFG_FAMILIES = tuple(f for f in FAMILIES if get_family(f).cfg)


def _plan(fam: str, folder: Path, parallel: dict):
    workload = {**WORKLOAD, **({} if get_family(fam).cfg else {"negative_prompt": None})}
    job = job_from_dict({"name": "g", "model": {"weights": str(folder)}, "workload": workload,
                         "parallel": {"cfg": 1, **parallel}})
    return make_plan(dataclasses.replace(find_cluster("local"), gpus_per_node=4), job)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from sporch.runtime.pipelines.tiny import save_tiny_pipeline

    root = tmp_path_factory.mktemp("image-family-pipelines")
    return {fam: save_tiny_pipeline(fam, root / fam, seed=i + 1) for i, fam in enumerate(FAMILIES)} | {"root": root}


@pytest.fixture(scope="module")
def pipes(folders):
    from diffusers import DiffusionPipeline

    out = {}
    for fam in FAMILIES:
        out[fam] = DiffusionPipeline.from_pretrained(folders[fam], dtype=torch.float32)
        out[fam].set_progress_bar_config(disable=True)
    return out


def _reference(pipe, fam: str, guidance: float = GUIDANCE) -> np.ndarray:
    """[1, 1, H, W, 3]: the family's diffusers pipeline on the folder, as a user would call it."""
    negative = {"negative_prompt": NEGATIVE} if get_family(fam).cfg else {}
    out = pipe(prompt=PROMPT, height=HEIGHT, width=WIDTH, num_inference_steps=STEPS, guidance_scale=guidance,
               output_type="np", generator=torch.Generator().manual_seed(SEED), **negative)
    return np.asarray(out.images)[:, None]


@pytest.fixture(scope="module")
def references(pipes):
    return {fam: _reference(pipes[fam], fam) for fam in FAMILIES}


@pytest.fixture(scope="module")
def four_ranks(folders):
    cases = []
    for name, fam, parallel in (*((f, f, U2R2) for f in FAMILIES),
                                *((f"cfg2 {f}", f, CFG2U2) for f in CFG_FAMILIES)):
        out = folders["root"] / "out" / name
        out.mkdir(parents=True)
        cases.append((name, _plan(fam, folders[fam], parallel).to_json(), str(out)))
    return run_distributed(world, 4, cases, ("transformer_blocks", "layers"), timeout=600)


@pytest.mark.parametrize("fam", FAMILIES)
def test_u2r2_frames_equal_the_diffusers_pipeline(four_ranks, references, fam):
    """4 gloo ranks, U2R2: the leader's frames equal the family's unsharded diffusers pipeline's; the
    other ranks encode, decode and write nothing; every rank ran every step."""
    ref = references[fam]
    assert ref.shape == (1, 1, HEIGHT, WIDTH, 3) and ref.std() > 0.02  # not flat: the comparison means something
    leader = four_ranks[0][fam]
    err = float(np.abs(leader["frames"][0] - ref[0]).max())
    print(f"{fam} U2R2: max |frames - {leader['pipeline']}| = {err:.3g}")
    assert leader["pipeline"] == get_family(fam).pipeline_class
    assert err <= FRAME_TOL, (fam, err)
    assert len(leader["outputs"]) == 1 and leader["roles"] == ["text_encoder", "vae"]
    for rank in four_ranks[1:]:
        assert rank[fam]["frames"] == {} and rank[fam]["outputs"] == [] and rank[fam]["roles"] == []
        assert len(rank[fam]["step_ms"]) == STEPS


@pytest.mark.parametrize("fam", CFG_FAMILIES)
def test_cfg2_frames_equal_the_diffusers_pipeline(four_ranks, references, pipes, fam):
    """cfg 2 x U2 (4 gloo ranks), guidance 4 with a negative prompt: the leader's frames equal the
    pipeline's; each rank's blocks ran once per step (its cfg rank's half: one of two calls, or one row
    of the two-row batch); guidance off moves the frames far beyond the tolerance (the second pass
    matters)."""
    leader = four_ranks[0][f"cfg2 {fam}"]
    err = float(np.abs(leader["frames"][0] - references[fam][0]).max())
    no_cfg = float(np.abs(_reference(pipes[fam], fam, guidance=1.0) - references[fam]).max())
    print(f"{fam} cfg2xU2: max |frames - {leader['pipeline']}| = {err:.3g}; without CFG {no_cfg:.3g}")
    assert err <= FRAME_TOL, (fam, err)
    assert no_cfg > 100 * FRAME_TOL, no_cfg
    two_calls = get_family(fam).pipeline_cfg is PipelineCfg.TWO_CALLS
    for rank in four_ranks:
        r = rank[f"cfg2 {fam}"]
        assert r["passes"] == STEPS, (fam, r["passes"])
        assert r["rows"] == ([1] * (2 * STEPS) if two_calls else [1] * STEPS), r["rows"]
    for rank in four_ranks[1:]:
        assert rank[f"cfg2 {fam}"]["outputs"] == [] and len(rank[f"cfg2 {fam}"]["step_ms"]) == STEPS


def test_flux2_klein_and_chroma_generate_are_refused_in_one_line():
    """FLUX.2 [klein] (no guidance embedding: its folders name Flux2KleinPipeline) and Chroma (its
    pipeline's float [text, image] mask is a per-query bias) are refused at plan time, naming why."""
    from sporch.orchestrator.errors import SporchError

    for preset, needle in (("flux.2-klein-4b", "Flux2KleinPipeline"), ("chroma1-hd", "ChromaPipeline's attention mask")):
        job = job_from_dict({"name": "g", "model": {"preset": preset},
                             "workload": {**WORKLOAD, "negative_prompt": None, "height": 256, "width": 256,
                                          "guidance_scale": 1.0}})
        with pytest.raises(SporchError, match="workload.kind generate is not built for") as exc:
            make_plan(find_cluster("local"), job)
        assert needle in str(exc.value) and "\n" not in str(exc.value), str(exc.value)
