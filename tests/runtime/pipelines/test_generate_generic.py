"""`workload.kind: generate` on the generic path against diffusers' own pipelines.

Tiny random pipeline folders of the generic families (runtime/pipelines/tiny.py: the
family's real component classes, seeded weights, the word-level tokenizer) are generated from
with sporch's generate workload, in one process (world 1) and on 4 gloo ranks (U2R2; SD3.5's
12 image + 333 text tokens make uneven chunks; LTX-Video's 7-token prompt padded to 128 with a mask
that drops the padding's keys puts every kept text key on the first rank's chunk), and the decoded
frames are compared with ``QwenImagePipeline`` / ``StableDiffusion3Pipeline`` / ``CogVideoXPipeline``
/ ``LTXPipeline`` / ``HunyuanVideoPipeline`` / ``PixArtSigmaPipeline`` loaded from the same folder, same prompt, seed and guidance, float32, within
test_generate's FRAME_TOL (1e-4).

``parallel.cfg=2`` (cfg 2 x U2, the same 4-rank world) for the families whose pipeline batches
both CFG passes into one transformer call (SD3, CogVideoX, LTX-Video, PixArt-Sigma, whose pipeline
passes the latents positionally and has only diffusers' older step callback): each rank's transformer
computes one row of the [uncond, cond] batch, the halves are gathered over the cfg group, and the
frames still equal the pipeline's; and for Qwen-Image, whose pipeline calls the transformer twice
per step ("cond", then "uncond"): each cfg rank computes one of the two calls (one pass per step,
counted at its first block), the predictions are exchanged, and the frames equal the pipeline's,
with fbcache too. The families' ``pipeline_cfg`` is checked against their pipelines' source (for
two calls: the loop's shape that makes the split exact).

The options the generic generate applies: ``model.lora`` (a PEFT-format adapter merged into the
Qwen-Image transformer at load, against diffusers' pipeline with ``load_lora_weights`` +
``set_adapters``, unfused) and ``workload.compile: true`` (SD3.5's blocks through ``torch.compile``
with backend ``eager``, Dynamo's graph capture without Inductor's C++ build, as
tests/runtime/models/test_generic_levers.py) and ``workload.cache`` fbcache (Qwen-Image, 6 steps:
the steps computed per cache context and the frames against diffusers' own First Block Cache on
the unsharded pipeline, its last step forced computed as sporch's step policy does), at world 1
and in the same 4-rank world.

``pipeline.text_encoder: sharded`` (U2R2, the same world) for one family per kind of text encoders
(HunyuanVideo's Llama + CLIP, SD3's two CLIPs + T5, Qwen-Image's Qwen2.5-VL): every rank holds about
a quarter of the encoders' parameter bytes and the frames still equal the pipeline's.
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
from sporch.orchestrator.errors import SporchError  # noqa: E402
from sporch.orchestrator.models.families import get_family  # noqa: E402
from sporch.orchestrator.plan.planner import make_plan  # noqa: E402
from sporch.runtime.testing import run_distributed  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
FRAME_TOL = 1e-4  # as test_generate.py: 1/40 of an 8-bit level
FAMILIES = ("qwen-image", "sd3", "cogvideox", "ltx-video", "hunyuanvideo", "pixart")
PROMPT = "a red fox running in snow"
NEGATIVE = "blurry low quality"
SEED, STEPS, GUIDANCE = 7, 3, 4.0
WORKLOAD = dict(kind="generate", prompt=PROMPT, negative_prompt=NEGATIVE, height=64, width=48, steps=STEPS,
                guidance_scale=GUIDANCE, dtype="float32", seed=SEED)
U2R2 = {"ulysses": 2, "ring": 2}
CFG2U2 = {"cfg": 2, "ulysses": 2, "ring": 1}
#: the families whose pipeline batches [uncond, cond] into one transformer call (parallel.cfg=2 runs)
CFG_FAMILIES = ("sd3", "cogvideox", "ltx-video", "pixart")
#: the family whose pipeline calls the transformer twice per step for CFG ("cond", then "uncond"):
#: parallel.cfg=2 computes one of the two calls on each cfg rank and exchanges the predictions
TWO_CALL_FAMILY = "qwen-image"
#: a video family's frames (9: 3 latent frames of CogVideoX, 2 of LTX-Video)
FRAMES = {"cogvideox": 9, "ltx-video": 9, "hunyuanvideo": 9}
#: guidance-distilled families: guidance_scale is embedded, no negative prompt
DISTILLED = ("hunyuanvideo",)
#: height x width where 64 x 48 does not fit the family's VAE (LTX-Video: 32 x 32 pixels per latent)
SIZE = {"ltx-video": (64, 96)}
#: the families whose pipeline is also run with every attention kept on the rank's own chunk
WRONG = ("sd3", "ltx-video")
LORA_FAMILY, LORA_SCALE, LORA_RANK = "qwen-image", 0.7, 3
COMPILE_FAMILY = "sd3"
#: fbcache: the family, steps and a threshold between the tiny model's changes (0.67-0.80 skipped,
#: 1.01-1.32 computed), so some steps are skipped and some computed in both of its cache contexts
CACHE_FAMILY, CACHE_STEPS, CACHE_THRESHOLD = "qwen-image", 6, 0.9
CACHE = {"steps": CACHE_STEPS, "cache": {"method": "fbcache", "threshold": CACHE_THRESHOLD}}
#: generate with the transformer's parameters sharded over the 4 ranks (parallel.shard_weights: world)
SHARD_FAMILY = "hunyuanvideo"
#: fbcache with parallel.cfg=2: LTX-Video's one "cond_uncond" context, a threshold between its tiny
#: model's changes (0.27-0.37 skipped, 0.45 computed)
CFG_CACHE_FAMILY, CFG_CACHE_THRESHOLD = "ltx-video", 0.42
CFG_CACHE = {"steps": CACHE_STEPS, "cache": {"method": "fbcache", "threshold": CFG_CACHE_THRESHOLD}}
#: generate with pipeline.text_encoder: sharded (FSDP2 over the U2R2 sequence group), one family per kind of
#: encoders: Llama + CLIP, two CLIPs with projection + T5, Qwen2.5-VL (its vision tower never called)
TEXT_SHARDED = ("hunyuanvideo", "sd3", "qwen-image")
#: pipeline.vae: parallel on U2R2 (the 4 ranks' sequence group decodes 2 latent rows each): Qwen-Image's
#: cached causal convs and attention block, HunyuanVideo's replicate-padded causal convs and mid block
VAE_PARALLEL_FAMILIES = ("qwen-image", "hunyuanvideo")


def _size(fam: str) -> tuple[int, int]:
    return SIZE.get(fam, (64, 48))


def _plan(fam: str, folder: Path, parallel: dict, gpus: int = 4, lora: str | None = None,
          pipeline: dict | None = None, **extra):
    """The generate plan of ``fam``'s folder; ``pipeline``: the job's pipeline section; ``extra``: more
    workload keys."""
    h, w = _size(fam)
    workload = {**WORKLOAD, "height": h, "width": w, **({"frames": FRAMES[fam]} if fam in FRAMES else {}),
                **({"negative_prompt": None} if fam in DISTILLED else {}), **extra}
    model = {"weights": str(folder), **({"lora": [{"path": lora, "scale": LORA_SCALE}]} if lora else {})}
    job = job_from_dict({"name": "g", "model": model, "workload": workload, "parallel": {"cfg": 1, **parallel},
                         **({"pipeline": pipeline} if pipeline else {})})
    return make_plan(dataclasses.replace(find_cluster("local"), gpus_per_node=gpus), job)


def _lora_file(folder: Path, path: Path) -> str:
    """A PEFT-format adapter (``transformer.<module>.lora_A/B.weight``, rank 3, alpha in the header
    as diffusers' save_lora_weights writes it) on every Linear of the folder's transformer blocks."""
    import json

    from safetensors.torch import save_file

    from sporch.runtime.models.build import load_diffusers

    model = load_diffusers(str(folder))
    g = torch.Generator().manual_seed(11)
    sd = {}
    for name, lin in model.named_modules():
        if isinstance(lin, torch.nn.Linear) and name.startswith("transformer_blocks."):
            sd[f"transformer.{name}.lora_A.weight"] = torch.randn(LORA_RANK, lin.in_features, generator=g) * 0.4
            sd[f"transformer.{name}.lora_B.weight"] = torch.randn(lin.out_features, LORA_RANK, generator=g) * 0.4
    meta = {"lora_adapter_metadata": json.dumps({"transformer.r": LORA_RANK, "transformer.lora_alpha": 2.0,
            "transformer.target_modules": sorted({k.split(".lora_")[0].split(".", 1)[1] for k in sd})})}
    save_file(sd, str(path), metadata=meta)
    return str(path)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from sporch.runtime.pipelines.tiny import save_tiny_pipeline

    root = tmp_path_factory.mktemp("generic-pipelines")
    out = {fam: save_tiny_pipeline(fam, root / fam, seed=i + 1) for i, fam in enumerate(FAMILIES)} | {"root": root}
    out["lora"] = _lora_file(out[LORA_FAMILY], root / "adapter.safetensors")
    return out


@pytest.fixture(scope="module")
def pipes(folders):
    """Each folder's pipeline, loaded once by diffusers itself."""
    from diffusers import DiffusionPipeline

    out = {}
    for fam in FAMILIES:
        out[fam] = DiffusionPipeline.from_pretrained(folders[fam], dtype=torch.float32)
        out[fam].set_progress_bar_config(disable=True)
    return out


def _reference(pipe, seed: int = SEED, guidance: float = GUIDANCE, steps: int = STEPS, **call) -> np.ndarray:
    """[1, F, H, W, 3]: the family's diffusers pipeline on the folder, as a user would call it
    (``call``: more of the call's arguments; with ``prompt_embeds`` among them, no prompt is passed)."""
    name = type(pipe).__name__
    kw = {"true_cfg_scale": guidance} if name == "QwenImagePipeline" else {"guidance_scale": guidance}
    if name == "CogVideoXPipeline":  # its frames, and every prompt padded to the transformer's text length
        kw.update(num_frames=FRAMES["cogvideox"], max_sequence_length=pipe.transformer.config.max_text_seq_length)
    if name == "LTXPipeline":
        kw.update(num_frames=FRAMES["ltx-video"])
    if name == "HunyuanVideoPipeline":  # embedded guidance, no negative prompt
        kw.update(num_frames=FRAMES["hunyuanvideo"])
    if name == "PixArtSigmaPipeline":  # the size asked for (its default bins it to the nearest trained aspect ratio)
        kw.update(use_resolution_binning=False)
    h, w = SIZE["ltx-video"] if name == "LTXPipeline" else _size("")
    if "prompt_embeds" not in call:
        kw.update({"prompt": PROMPT, **({} if name == "HunyuanVideoPipeline" else {"negative_prompt": NEGATIVE})})
    out = pipe(height=h, width=w, num_inference_steps=steps, output_type="np",
               generator=torch.Generator().manual_seed(seed), **kw, **call)
    return np.asarray(out.frames) if name in ("CogVideoXPipeline", "LTXPipeline", "HunyuanVideoPipeline") \
        else out.images[:, None]


@pytest.fixture(scope="module")
def references(pipes):
    return {fam: _reference(pipes[fam]) for fam in FAMILIES}


@pytest.fixture(scope="module")
def lora_reference(folders):
    """The LoRA family's diffusers pipeline with the adapter loaded by diffusers itself
    (``load_lora_weights``, ``set_adapters`` at the scale; PEFT layers in the forward, not fused)."""
    from diffusers import DiffusionPipeline

    pipe = DiffusionPipeline.from_pretrained(folders[LORA_FAMILY], dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    pipe.load_lora_weights(folders["lora"], adapter_name="ref")
    pipe.set_adapters(["ref"], adapter_weights=[LORA_SCALE])
    return _reference(pipe)


def _fbc_reference(pipe, threshold: float) -> tuple[np.ndarray, dict[str, list[int]]]:
    """diffusers' own First Block Cache on the unsharded pipeline (``enable_cache``), CACHE_STEPS
    steps at ``threshold``, its last step forced computed (sporch's step policy computes the last
    step): (frames, the steps computed per cache context)."""
    from diffusers.hooks import FirstBlockCacheConfig, HookRegistry

    pipe.transformer.enable_cache(FirstBlockCacheConfig(threshold=threshold))
    head = HookRegistry.check_if_exists_or_initialize(pipe.transformer.transformer_blocks[0])
    theirs = head.get_hook("fbc_leader_block_hook")
    computed: dict[str, list[int]] = {}

    def seen(module, args, kwargs, output):  # after each transformer call: did it run the other blocks?
        steps = computed.setdefault(theirs.state_manager.context.name, [])
        steps.append(len(steps) if theirs.state_manager.get_state().should_compute else -1)

    def last_step_computed(p, i, t, kw):
        if i == CACHE_STEPS - 2:
            theirs.threshold = -1.0
        return {}

    handle = pipe.transformer.register_forward_hook(seen, with_kwargs=True)
    try:
        frames = _reference(pipe, steps=CACHE_STEPS, callback_on_step_end=last_step_computed)
    finally:
        handle.remove()
        pipe.transformer.disable_cache()
    return frames, {name: [i for i in steps if i >= 0] for name, steps in computed.items()}


@pytest.fixture(scope="module")
def cache_reference(pipes):
    return _fbc_reference(pipes[CACHE_FAMILY], CACHE_THRESHOLD)


@pytest.fixture(scope="module")
def cfg_cache_reference(pipes):
    return _fbc_reference(pipes[CFG_CACHE_FAMILY], CFG_CACHE_THRESHOLD)


def _eager_compile(model):
    """workload.compile's callback with Dynamo's ``eager`` backend (graph capture, no Inductor build)."""
    from sporch.runtime.compile import compile_blocks

    return compile_blocks(model, backend="eager")


def _graphs() -> int:
    import torch._dynamo

    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def _rows_seen(rows: list, passes: list):
    """A ``compile_model`` stand-in (it is handed the pipeline's transformer once, before the
    denoising): records the batch rows of every transformer call as the model receives them (after
    CFG parallel's pre-hook, which goes first) and each pass that runs the transformer's blocks (its
    first block's pre-hook: a call computed on the other cfg rank runs none here), compiles nothing."""
    def attach(model):
        model.register_forward_pre_hook(lambda m, args, kw: rows.append(int(kw["hidden_states"].shape[0])),
                                        with_kwargs=True)
        model.transformer_blocks[0].register_forward_pre_hook(lambda m, args: passes.append(1))

    return attach


def _world(cases, wrong: tuple[str, ...]):
    """Each case's generate on these ranks; then each of ``wrong``'s pipelines with every attention
    kept on the rank's own chunk (a wrong shard: what the comparison must catch)."""
    from sporch.orchestrator.contract.plan import Plan
    from sporch.runtime.models.split_plans import split_plan
    from sporch.runtime.models.sequence_parallel import SequenceParallel
    from sporch.runtime.parallel import ParallelContext
    from sporch.runtime.pipelines.generate import run_generate
    from sporch.runtime.pipelines.denoise import pipeline_arguments
    from sporch.runtime.pipelines.load import load_pipeline
    from sporch.runtime.pipelines.prompts import encode
    from sporch.runtime.pipelines.params import generate_params

    import torch._dynamo

    out = {}
    for name, plan_json, folder in cases:
        plan = Plan.from_json(plan_json)
        ctx = ParallelContext.from_plan(plan)
        frames, rows, passes = {}, [], []
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        seam = _eager_compile if plan.workload.compile else _rows_seen(rows, passes) if plan.layout.cfg == 2 else None
        metrics = run_generate(plan, ctx, torch.device("cpu"), Path(folder),
                               frames_sink=lambda i, f: frames.__setitem__(i, f), compile_model=seam)
        out[name] = {**metrics, "frames": frames, "graphs": _graphs(), "rows": rows, "passes": len(passes)}
        if name in wrong:
            spec, cls, cpu = generate_params(plan), plan_pipeline(plan), torch.device("cpu")
            fam = get_family(plan.model.family)
            pipe = load_pipeline(spec, cls, cpu)
            with torch.no_grad(), SequenceParallel(pipe.transformer, ctx, split_plan(type(pipe.transformer)),
                                                   local_attention=("transformer_blocks",)):
                kw = {**encode(pipe, spec, fam, PROMPT, cpu), **pipeline_arguments(spec, fam, SEED)}
                res = pipe(**kw, output_type="np")
            out[f"wrong-shard {name}"] = np.asarray(res.frames) if spec.video else res.images[:, None]
        ctx.close()
    return out


def plan_pipeline(plan) -> str:
    from sporch.orchestrator.models.families import get_family

    return get_family(plan.model.family).pipeline_class


@pytest.fixture(scope="module")
def four_ranks(folders):
    cases = []
    for fam in FAMILIES:
        out = folders["root"] / "out" / fam
        out.mkdir(parents=True)
        cases.append((fam, _plan(fam, folders[fam], U2R2).to_json(), str(out)))
    for name, plan in (("lora", _plan(LORA_FAMILY, folders[LORA_FAMILY], U2R2, lora=folders["lora"])),
                       ("compile", _plan(COMPILE_FAMILY, folders[COMPILE_FAMILY], U2R2, compile=True)),
                       ("cache", _plan(CACHE_FAMILY, folders[CACHE_FAMILY], U2R2, **CACHE)),
                       ("sharded", _plan(SHARD_FAMILY, folders[SHARD_FAMILY], {**U2R2, "shard_weights": "world"})),
                       *((f"cfg2 {fam}", _plan(fam, folders[fam], CFG2U2)) for fam in CFG_FAMILIES),
                       ("cfg2 cache", _plan(CFG_CACHE_FAMILY, folders[CFG_CACHE_FAMILY], CFG2U2, **CFG_CACHE)),
                       ("cfg2 two-call", _plan(TWO_CALL_FAMILY, folders[TWO_CALL_FAMILY], CFG2U2)),
                       ("cfg2 two-call cache", _plan(CACHE_FAMILY, folders[CACHE_FAMILY], CFG2U2, **CACHE)),
                       *((f"text sharded {fam}", _plan(fam, folders[fam], U2R2, pipeline={"text_encoder": "sharded"}))
                         for fam in TEXT_SHARDED),
                       *((f"vae-parallel {fam}", _plan(fam, folders[fam], U2R2, pipeline={"vae": "parallel"}))
                         for fam in VAE_PARALLEL_FAMILIES)):
        (folders["root"] / "out" / name).mkdir(parents=True)
        cases.append((name, plan.to_json(), str(folders["root"] / "out" / name)))
    return run_distributed(_world, 4, cases, WRONG, timeout=600)


@pytest.mark.parametrize("fam", FAMILIES)
def test_world1_frames_equal_the_diffusers_pipeline(folders, references, fam, tmp_path):
    """One process (no ParallelContext): the frames and the PNG equal the pipeline's."""
    from sporch.runtime.pipelines.generate import run_generate
    from sporch.runtime.pipelines.media import read, to_uint8

    plan = _plan(fam, folders[fam], {"ulysses": 1, "ring": 1, "dp": 1}, gpus=1)
    assert (plan.model.family, plan.layout.world_size) == (fam, 1)
    frames = {}
    metrics = run_generate(plan, None, torch.device("cpu"), tmp_path, frames_sink=lambda i, f: frames.__setitem__(i, f))
    ref = references[fam]
    nf, (h, w) = FRAMES.get(fam, 1), _size(fam)
    assert ref.shape == (1, nf, h, w, 3) and ref.std() > 0.02  # not flat: the comparison means something
    err = float(np.abs(frames[0] - ref[0]).max())
    print(f"{fam} world 1: max |frames - {metrics['pipeline']}| = {err:.3g}")
    assert err <= FRAME_TOL, (fam, err)
    (row,) = metrics["outputs"]
    fmt = "mp4" if fam in FRAMES else "png"
    assert (row["seed"], row["prompt"], row["format"], row["frames"], row["height"], row["width"]) == (
        SEED, PROMPT, fmt, nf, h, w)
    saved = read(Path(row["path"]))
    assert saved.shape == (nf, h, w, 3)
    if fmt == "png":  # lossless: exactly the pipeline's image in 8 bits
        assert np.array_equal(saved, to_uint8(ref[0]))
    assert len(metrics["step_ms"]) == STEPS and metrics["stages"]["denoise"]["steps"] == STEPS
    assert {"load", "encode", "denoise", "decode", "save"} <= set(metrics["stages"])


def test_the_workload_dispatch_runs_the_generic_generate(folders, references, tmp_path):
    """What a rank runs for the plan (runtime/workloads.py): the generic generate, not the generic
    verify/benchmark; its PNG is the pipeline's image in 8 bits."""
    from sporch.runtime.pipelines.media import read, to_uint8
    from sporch.runtime.progress import Progress
    from sporch.runtime.workloads import run_workload

    plan = _plan("sd3", folders["sd3"], {"ulysses": 1, "ring": 1, "dp": 1}, gpus=1)
    metrics = run_workload(plan, None, torch.device("cpu"), Progress(tmp_path, 0))
    assert (metrics["kind"], metrics["path"]) == ("generate", "diffusers")
    assert metrics["pipeline"] == "StableDiffusion3Pipeline"
    (row,) = metrics["outputs"]
    assert np.array_equal(read(Path(row["path"])), to_uint8(references["sd3"][0]))
    # workload.compile's rule reached the generic generate (unset on a CPU: off, and why)
    assert metrics["compile"]["enabled"] is False and metrics["compile"]["reason"] == "off (workload.compile)"


def test_lora_frames_equal_the_diffusers_pipeline_with_the_adapter(folders, references, lora_reference, four_ranks,
                                                                 tmp_path):
    """model.lora on generate: the adapter merged into the transformer at load gives the frames of
    diffusers' pipeline with ``load_lora_weights`` at the same scale, at world 1 and on U2R2; the
    adapter moves the frames far beyond the tolerance (else the comparison proves nothing)."""
    from sporch.runtime.pipelines.generate import run_generate

    plan = _plan(LORA_FAMILY, folders[LORA_FAMILY], {"ulysses": 1, "ring": 1, "dp": 1}, gpus=1, lora=folders["lora"])
    assert plan.model.lora[0]["scale"] == LORA_SCALE
    frames = {}
    metrics = run_generate(plan, None, torch.device("cpu"), tmp_path, frames_sink=lambda i, f: frames.__setitem__(i, f))
    effect = float(np.abs(lora_reference - references[LORA_FAMILY]).max())
    world1 = float(np.abs(frames[0] - lora_reference[0]).max())
    u2r2 = float(np.abs(four_ranks[0]["lora"]["frames"][0] - lora_reference[0]).max())
    print(f"LoRA {LORA_FAMILY}: effect {effect:.3g}, world 1 {world1:.3g}, U2R2 {u2r2:.3g}")
    assert effect > 100 * FRAME_TOL, effect
    assert max(world1, u2r2) <= FRAME_TOL, (world1, u2r2)
    assert metrics["lora_adapters"] == 1 and four_ranks[0]["lora"]["lora_adapters"] == 1


def test_compiled_generate_frames_equal_the_diffusers_pipeline(folders, references, four_ranks, tmp_path):
    """workload.compile: true on generate: the transformer's blocks compiled (Dynamo captured
    graphs), the frames still the eager diffusers pipeline's, at world 1 and on U2R2."""
    import torch._dynamo

    from sporch.runtime.pipelines.generate import run_generate

    plan = _plan(COMPILE_FAMILY, folders[COMPILE_FAMILY], {"ulysses": 1, "ring": 1, "dp": 1}, gpus=1, compile=True)
    frames = {}
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    metrics = run_generate(plan, None, torch.device("cpu"), tmp_path, frames_sink=lambda i, f: frames.__setitem__(i, f),
                           compile_model=_eager_compile)
    graphs = _graphs()
    ref = references[COMPILE_FAMILY][0]
    world1 = float(np.abs(frames[0] - ref).max())
    sharded = four_ranks[0]["compile"]
    u2r2 = float(np.abs(sharded["frames"][0] - ref).max())
    print(f"compiled {COMPILE_FAMILY}: world 1 {world1:.3g} ({graphs} graphs), U2R2 {u2r2:.3g} ({sharded['graphs']} graphs)")
    for res, n in ((metrics, graphs), *((rank["compile"], rank["compile"]["graphs"]) for rank in four_ranks)):
        info = res["compile"]
        assert info["enabled"] and info["blocks"] >= 2 and info["backend"] == "eager" and n >= 1, (info, n)
        assert info["first_call_s"] is not None
    assert max(world1, u2r2) <= FRAME_TOL, (world1, u2r2)


@pytest.mark.parametrize("fam", FAMILIES)
def test_four_ranks_frames_equal_the_diffusers_pipeline(four_ranks, references, fam):
    """4 gloo ranks, U2R2: the leader's frames equal the pipeline's; the other ranks encode,
    decode and write nothing (the leader's prompt embeddings reach them)."""
    ref = references[fam]
    leader = four_ranks[0][fam]
    err = float(np.abs(leader["frames"][0] - ref[0]).max())
    print(f"{fam} U2R2: max |frames - {leader['pipeline']}| = {err:.3g}")
    assert err <= FRAME_TOL, (fam, err)
    assert len(leader["outputs"]) == 1 and leader["roles"] == ["text_encoder", "vae"]
    for rank in four_ranks[1:]:
        assert rank[fam]["frames"] == {} and rank[fam]["outputs"] == [] and rank[fam]["roles"] == []
        assert "encode" not in rank[fam]["stages"]
        assert len(rank[fam]["step_ms"]) == STEPS


def _unmasked(pipe) -> dict:
    """The prompt's embeddings as the pipeline encodes them, with its text mask all ones (the
    padding's keys kept); checks that the mask does drop keys."""
    with torch.no_grad():
        if type(pipe).__name__ == "LTXPipeline":
            pe, pm, npe, npm = pipe.encode_prompt(PROMPT, NEGATIVE, True, device="cpu")
            masks = (pm, npm)
            out = dict(prompt_embeds=pe, negative_prompt_embeds=npe, prompt_attention_mask=torch.ones_like(pm),
                       negative_prompt_attention_mask=torch.ones_like(npm))
        else:  # HunyuanVideoPipeline
            pe, ppe, pm = pipe.encode_prompt(PROMPT, device="cpu")
            masks = (pm,)
            out = dict(prompt_embeds=pe, pooled_prompt_embeds=ppe, prompt_attention_mask=torch.ones_like(pm))
    assert all(0 < m.sum() < m.numel() for m in masks)  # the mask does drop keys
    return out


def test_comparison_can_fail(pipes, references, four_ranks):
    """A wrong shard (every rank attending to its own chunk only), another seed, no guidance or
    LTX-Video's / HunyuanVideo's padded text keys kept (the mask ignored) move the frames far beyond
    the tolerance."""
    wrong = {fam: float(np.nan_to_num(np.abs(four_ranks[0][f"wrong-shard {fam}"] - references[fam]), nan=1.0).max())
             for fam in WRONG}
    other_seed = float(np.abs(_reference(pipes["sd3"], seed=SEED + 1) - references["sd3"]).max())
    no_cfg = float(np.abs(_reference(pipes["qwen-image"], guidance=1.0) - references["qwen-image"]).max())
    no_mask = {fam: float(np.abs(_reference(pipes[fam], **_unmasked(pipes[fam])) - references[fam]).max())
               for fam in ("ltx-video", "hunyuanvideo")}
    print(f"wrong shard {wrong}, other seed {other_seed:.3g}, no CFG {no_cfg:.3g}, mask ignored {no_mask}")
    assert min(*wrong.values(), other_seed, no_cfg, *no_mask.values()) > 100 * FRAME_TOL


@pytest.mark.parametrize("parallel, workload, pipeline, match", [
    ({}, {"batch": 2}, {}, "workload.batch=2"),
    ({"ulysses": 4}, {"height": 16, "width": 128}, {"vae": "parallel"},
     "pipeline.vae=parallel is not supported for generate .* splits the latent's 2 rows over the 4 ranks"),
])
def test_what_generic_generate_does_not_do_is_refused_in_one_line(folders, parallel, workload, pipeline, match):
    job = job_from_dict({"name": "g", "model": {"weights": str(folders["sd3"])}, "workload": {**WORKLOAD, **workload},
                         "parallel": parallel, **({"pipeline": pipeline} if pipeline else {})})
    with pytest.raises(SporchError, match=match) as exc:
        make_plan(find_cluster("local"), job)
    assert "\n" not in str(exc.value) and "SD3Transformer2DModel" in str(exc.value)


def test_a_scheduler_knob_on_a_pipeline_that_does_not_flow_match_is_refused(folders):
    """workload.shift / sigmas / scheduler set a flow-matching scheduler; CogVideoX's pipeline runs its
    folder's own DDIM: refused at plan time in one line naming the pipeline (SD3.5's flow-matching
    scheduler takes the shift)."""
    job = job_from_dict({"name": "g", "model": {"weights": str(folders["cogvideox"])},
                         "workload": {**WORKLOAD, "frames": 9, "shift": 3.0}})
    with pytest.raises(SporchError, match="workload.shift sets a flow-matching scheduler, but CogVideoXPipeline "
                                          "runs its folder's own") as exc:
        make_plan(find_cluster("local"), job)
    assert "\n" not in str(exc.value)
    ok = job_from_dict({"name": "g", "model": {"weights": str(folders["sd3"])}, "workload": {**WORKLOAD, "shift": 3.0}})
    assert make_plan(find_cluster("local"), ok).workload.shift == 3.0


def test_fbcache_generate_skips_the_steps_diffusers_first_block_cache_skips(folders, cache_reference, four_ranks,
                                                                          tmp_path):
    """workload.cache fbcache on generate: the steps computed in each of the pipeline's cache
    contexts ("cond", "uncond") are diffusers' First Block Cache's on the unsharded pipeline, and
    the frames equal its frames, at world 1 and on every rank of U2R2; the cache both skips and
    computes steps (else the comparison proves nothing: without the cache every step computes)."""
    from sporch.runtime.pipelines.generate import run_generate

    ref, ref_computed = cache_reference
    plan = _plan(CACHE_FAMILY, folders[CACHE_FAMILY], {"ulysses": 1, "ring": 1, "dp": 1}, gpus=1, **CACHE)
    frames = {}
    metrics = run_generate(plan, None, torch.device("cpu"), tmp_path, frames_sink=lambda i, f: frames.__setitem__(i, f))
    world1 = float(np.abs(frames[0] - ref[0]).max())
    u2r2 = float(np.abs(four_ranks[0]["cache"]["frames"][0] - ref[0]).max())
    print(f"fbcache {CACHE_FAMILY}: diffusers computed {ref_computed}, world 1 {world1:.3g}, "
          f"U2R2 {u2r2:.3g}")
    assert set(ref_computed) == {"cond", "uncond"}
    assert all(2 <= len(c) < CACHE_STEPS for c in ref_computed.values()), ref_computed  # skips and computes
    for res in (metrics, *(rank["cache"] for rank in four_ranks)):
        (batch,) = res["step_cache"]["batches"]
        rec = batch["contexts"]
        assert {name: rec[name]["computed"] for name in ref_computed} == ref_computed, rec
    assert max(world1, u2r2) <= FRAME_TOL, (world1, u2r2)


def test_sharded_parameters_generate_frames_equal_the_diffusers_pipeline(four_ranks, references):
    """``parallel.shard_weights: world`` (FSDP2 over the 4 ranks, each reading its rows of the
    folder's transformer), U2R2: the leader's frames equal the unsharded diffusers pipeline's, and
    each rank holds about a quarter of the transformer's parameter bytes (measured)."""
    ref = references[SHARD_FAMILY]
    sharded, plain = four_ranks[0]["sharded"], four_ranks[0][SHARD_FAMILY]
    err = float(np.abs(sharded["frames"][0] - ref[0]).max())
    print(f"{SHARD_FAMILY} U2R2 shard_weights=world: max |frames - {sharded['pipeline']}| = {err:.3g}, resident "
          f"{sharded['resident_parameter_bytes']} of {plain['resident_parameter_bytes']} bytes")
    assert err <= FRAME_TOL, err
    for rank in four_ranks:
        r = rank["sharded"]
        assert r["shard_weights"] == "world" and plain["shard_weights"] == "none", r
        assert r["resident_parameter_bytes"] <= 0.3 * plain["resident_parameter_bytes"], r


@pytest.mark.parametrize("fam", TEXT_SHARDED)
def test_sharded_text_encoders_frames_equal_the_diffusers_pipeline(four_ranks, references, fam):
    """``pipeline.text_encoder: sharded`` on U2R2: every rank loads the pipeline's text encoders,
    keeps about a quarter of their parameter bytes (FSDP2 over its sequence group, measured after
    sharding; the leader placement's leader holds all of them) and encodes with the group; the
    leader's frames equal the unsharded diffusers pipeline's."""
    got, plain = four_ranks[0][f"text sharded {fam}"], four_ranks[0][fam]
    err = float(np.abs(got["frames"][0] - references[fam][0]).max())
    print(f"{fam} U2R2 text_encoder=sharded: max |frames - {got['pipeline']}| = {err:.3g}; text encoder bytes per "
          f"rank {[r[f'text sharded {fam}']['text_encoder_resident_bytes'] for r in four_ranks]} of "
          f"{got['text_encoder_bytes']}")
    assert err <= FRAME_TOL, (fam, err)
    assert (plain["text_encoder"], plain["text_encoder_resident_bytes"]) == ("leader", plain["text_encoder_bytes"])
    total = plain["text_encoder_bytes"]
    for rank in four_ranks:
        r = rank[f"text sharded {fam}"]
        assert r["text_encoder"] == "sharded" and "text_encoder" in r["roles"] and "encode" in r["stages"], r["roles"]
        assert r["text_encoder_bytes"] == total
        assert 0 < r["text_encoder_resident_bytes"] <= 0.3 * total, (fam, r["text_encoder_resident_bytes"], total)
    assert sum(rank[f"text sharded {fam}"]["text_encoder_resident_bytes"] for rank in four_ranks) >= total


@pytest.mark.parametrize("fam", CFG_FAMILIES)
def test_cfg2_frames_equal_the_diffusers_pipeline(four_ranks, references, fam):
    """cfg 2 x U2 (4 gloo ranks), guidance 4 with a negative prompt: the leader's frames equal the
    pipeline's; every rank's transformer computed one row per call, its half of the pipeline's
    two-row [uncond, cond] batch (the other half on the other cfg rank), at every step."""
    leader = four_ranks[0][f"cfg2 {fam}"]
    err = float(np.abs(leader["frames"][0] - references[fam][0]).max())
    print(f"{fam} cfg2xU2: max |frames - {leader['pipeline']}| = {err:.3g}")
    assert err <= FRAME_TOL, (fam, err)
    assert len(leader["outputs"]) == 1 and leader["roles"] == ["text_encoder", "vae"]
    for rank in four_ranks:
        assert rank[f"cfg2 {fam}"]["rows"] == [1] * STEPS, rank[f"cfg2 {fam}"]["rows"]
    for rank in four_ranks[1:]:
        assert rank[f"cfg2 {fam}"]["outputs"] == [] and len(rank[f"cfg2 {fam}"]["step_ms"]) == STEPS


def test_cfg2_comparison_can_fail(pipes, references):
    """The two CFG halves swapped (the gather in the wrong order; for Qwen-Image the two calls'
    predictions exchanged the wrong way round) or guidance off move the frames far beyond the
    tolerance."""
    def swap(module, args, output):  # noise_pred's [uncond, cond] rows exchanged
        return (torch.cat(output[0].chunk(2)[::-1]), *output[1:])

    swapped = {}
    for fam in ("sd3", "ltx-video"):
        handle = pipes[fam].transformer.register_forward_hook(swap)
        try:
            swapped[fam] = float(np.nan_to_num(np.abs(_reference(pipes[fam]) - references[fam]), nan=1.0).max())
        finally:
            handle.remove()
    held: list = []

    def exchange_swapped(module, args, output):  # Qwen-Image's "cond" / "uncond" predictions exchanged
        if not held:
            held.append(output[0])
            return output
        cond = held.pop()
        was = cond.clone()
        cond.copy_(output[0])
        return (was, *output[1:])

    handle = pipes[TWO_CALL_FAMILY].transformer.register_forward_hook(exchange_swapped)
    try:
        swapped[TWO_CALL_FAMILY] = float(np.abs(_reference(pipes[TWO_CALL_FAMILY]) - references[TWO_CALL_FAMILY]).max())
    finally:
        handle.remove()
    no_cfg = float(np.abs(_reference(pipes["ltx-video"], guidance=1.0) - references["ltx-video"]).max())
    print(f"cfg halves swapped {swapped}, LTX-Video without CFG {no_cfg:.3g}")
    assert min(*swapped.values(), no_cfg) > 100 * FRAME_TOL


def _two_call_problem(src: str) -> str | None:
    """Why a pipeline ``__call__``'s source (``src``) is not one that CFG parallel over two calls
    (runtime/models/cfg_two_calls.py) runs exactly, or None: its denoising loop calls the transformer
    exactly twice, first inside ``cache_context("cond")`` then inside ``cache_context("uncond")`` (or
    both in no cache context, told apart by their order), each call's output (or its ``[0]``) bound as
    it is to a name (cfg rank 1's "cond" placeholder is filled in place later, so a copy would keep the
    placeholder), and the "cond" prediction is not read before the "uncond" call has returned (so
    neither the second call's inputs nor anything else sees the placeholder)."""
    import ast
    import textwrap

    def transformer_calls(node) -> list:
        """Calls of ``self.transformer`` or of the expert the step picked (WanPipeline's ``current_model``,
        ``self.transformer`` or ``self.transformer_2``)."""
        return [n for n in ast.walk(node) if isinstance(n, ast.Call)
                and ((isinstance(n.func, ast.Attribute) and n.func.attr == "transformer")
                     or (isinstance(n.func, ast.Name) and n.func.id == "current_model"))]

    def context(node) -> str | None:
        for item in node.items if isinstance(node, ast.With) else ():
            c = item.context_expr
            if isinstance(c, ast.Call) and getattr(c.func, "attr", None) == "cache_context" and c.args:
                return getattr(c.args[0], "value", None)
        return None

    loops = [n for n in ast.walk(ast.parse(textwrap.dedent(src))) if isinstance(n, ast.For) and transformer_calls(n)]
    if len(loops) != 1:
        return f"{len(loops)} loops call the transformer"
    (loop,) = loops
    if len(transformer_calls(loop)) != 2:
        return f"{len(transformer_calls(loop))} transformer calls per step, not 2"
    withs = {context(n): n for n in ast.walk(loop) if context(n)}
    if not withs:  # no cache context (Lumina2Pipeline): the first call is the prompt's, the second the negative's
        calls = sorted(transformer_calls(loop), key=lambda c: c.lineno)
        withs = {name: ast.With(items=[], body=[stmt], lineno=stmt.lineno, end_lineno=stmt.end_lineno)
                 for name, call in zip(("cond", "uncond"), calls)
                 for stmt in [next((a for a in ast.walk(loop) if isinstance(a, ast.Assign) and call in ast.walk(a)),
                                   call)]}
    if set(withs) != {"cond", "uncond"}:
        return f"cache contexts {sorted(withs)}, not cond and uncond"
    cond, uncond = withs["cond"], withs["uncond"]
    if cond.end_lineno >= uncond.lineno:
        return "the uncond call comes before the cond call returns"
    for name, w in (("cond", cond), ("uncond", uncond)):
        (stmt, *more) = w.body
        value = getattr(stmt, "value", None)
        bare = value.value if isinstance(value, ast.Subscript) and getattr(value.slice, "value", None) == 0 else value
        if more or not isinstance(stmt, ast.Assign) or not isinstance(stmt.targets[0], ast.Name) \
                or bare not in transformer_calls(stmt):
            return f"the {name} context does not bind the transformer's output as it is to a name"
    first = cond.body[0].targets[0].id
    early = sorted(n.lineno for n in ast.walk(loop) if isinstance(n, ast.Name) and n.id == first
                   and isinstance(n.ctx, ast.Load) and n.lineno <= uncond.end_lineno)
    if early:
        return f"{first} (the cond prediction) is read before the uncond call returns"
    return None


def test_pipeline_cfg_is_the_pipelines_own_cfg():
    """``Family.pipeline_cfg`` (what the planner reads to plan parallel.cfg=2 and the runtime to
    split it) against each family's diffusers pipeline call: ``batched`` where it concatenates the
    latents of both passes into one batch; ``two_calls`` where its loop has the shape CFG parallel
    over two calls needs (:func:`_two_call_problem`: a future diffusers that reorders the calls or
    reads the first prediction early fails here); ``none`` only for a guidance-distilled family."""
    import inspect

    import diffusers

    from sporch.orchestrator.models.families import FAMILIES, PipelineCfg

    for fam in (f for f in FAMILIES if f.pipeline_class):
        src = inspect.getsource(getattr(diffusers, fam.pipeline_class).__call__)
        # the latents of both passes in one batch: concatenated, or repeated (ZImagePipeline's list entries)
        batched = "torch.cat([latents] * 2)" in src or "latents_typed.repeat(2, 1, 1, 1)" in src
        if fam.pipeline_cfg is PipelineCfg.BATCHED:
            assert batched and 'cache_context("uncond")' not in src, fam.name
        elif fam.pipeline_cfg is PipelineCfg.TWO_CALLS:
            assert not batched and _two_call_problem(src) is None, (fam.name, _two_call_problem(src))
        else:
            assert not fam.cfg, fam.name


def test_the_two_call_source_check_can_fail():
    """QwenImagePipeline's loop with its calls' contexts swapped, the cond prediction read before
    the uncond call, or copied as it is bound: each is refused by the source check."""
    import inspect

    from diffusers import QwenImagePipeline

    src = inspect.getsource(QwenImagePipeline.__call__)
    uncond_call = 'if do_true_cfg:\n                    with self.transformer.cache_context("uncond"):'
    cond_end = ")[0]\n\n                if do_true_cfg:"
    assert _two_call_problem(src) is None and uncond_call in src and cond_end in src
    cond, uncond = 'cache_context("cond")', 'cache_context("uncond")'
    swapped = src.replace(cond, "<cond>").replace(uncond, cond).replace("<cond>", uncond)
    read_early = src.replace(uncond_call, "noise_pred = noise_pred.float()\n                " + uncond_call)
    copied = src.replace(cond_end, ")[0].clone()\n\n                if do_true_cfg:")
    problems = [_two_call_problem(s) for s in (swapped, read_early, copied)]
    print(problems)
    assert "before the cond call" in problems[0] and "read before the uncond call" in problems[1]
    assert "does not bind the transformer's output as it is" in problems[2]


def test_cfg2_two_calls_frames_equal_the_diffusers_pipeline(four_ranks, references):
    """cfg 2 x U2 (4 gloo ranks) on Qwen-Image (true CFG, ``true_cfg_scale`` 4 with a negative
    prompt): the leader's frames equal QwenImagePipeline's; the pipeline still calls every rank's
    transformer twice per step, but each rank's blocks run once per step (one pass: its cfg rank's
    call), the other call computed on the other cfg rank (without the split: two passes per step,
    the same frames)."""
    leader = four_ranks[0]["cfg2 two-call"]
    err = float(np.abs(leader["frames"][0] - references[TWO_CALL_FAMILY][0]).max())
    calls = [(len(rank["cfg2 two-call"]["rows"]), rank["cfg2 two-call"]["passes"]) for rank in four_ranks]
    print(f"{TWO_CALL_FAMILY} cfg2xU2: max |frames - {leader['pipeline']}| = {err:.3g}; (transformer calls, passes) "
          f"per rank over {STEPS} steps: {calls}")
    assert err <= FRAME_TOL, err
    assert calls == [(2 * STEPS, STEPS)] * 4, calls
    assert len(leader["outputs"]) == 1 and leader["roles"] == ["text_encoder", "vae"]
    for rank in four_ranks[1:]:
        assert rank["cfg2 two-call"]["outputs"] == [] and len(rank["cfg2 two-call"]["step_ms"]) == STEPS


def test_fbcache_with_two_call_cfg2_skips_the_steps_diffusers_first_block_cache_skips(cache_reference, four_ranks):
    """fbcache on cfg 2 x U2 (Qwen-Image, two calls): each cfg rank's cache holds the one context it
    computes, its decision agreed over its sequence group: the steps computed per context are diffusers'
    First Block Cache's, the frames its frames, and each context's measured changes that context's own
    (those of the U2R2 run, which computes both on every rank; the two contexts' differ, so a decision
    mixed over the cfg ranks would not match), on every rank (the records shared over the cfg group)."""
    ref, ref_computed = cache_reference
    err = float(np.abs(four_ranks[0]["cfg2 two-call cache"]["frames"][0] - ref[0]).max())
    print(f"fbcache {CACHE_FAMILY} cfg2xU2 (two calls): diffusers computed {ref_computed}, max |frames - diffusers| "
          f"{err:.3g}")
    for rank in four_ranks:
        rec = rank["cfg2 two-call cache"]["step_cache"]["batches"][0]["contexts"]
        whole = rank["cache"]["step_cache"]["batches"][0]["contexts"]
        assert {name: rec[name]["computed"] for name in ref_computed} == ref_computed, rec
        for name in ref_computed:
            np.testing.assert_allclose(rec[name]["changes"][1:], whole[name]["changes"][1:], rtol=1e-5)
    assert max(abs(c - u) for c, u in zip(whole["cond"]["changes"][1:], whole["uncond"]["changes"][1:])) > 1e-3
    assert err <= FRAME_TOL, err


def test_fbcache_with_cfg2_skips_the_steps_diffusers_first_block_cache_skips(cfg_cache_reference, four_ranks):
    """fbcache on cfg 2 x U2 (LTX-Video): each cfg rank holds one row of the [uncond, cond] batch,
    and the skip decision, agreed over the sequence and cfg groups, is diffusers' on the whole
    batch: the same steps computed on every rank, the frames diffusers' First Block Cache's; the
    cache both skips and computes steps."""
    ref, ref_computed = cfg_cache_reference
    u2 = float(np.abs(four_ranks[0]["cfg2 cache"]["frames"][0] - ref[0]).max())
    print(f"fbcache {CFG_CACHE_FAMILY} cfg2xU2: diffusers computed {ref_computed}, max |frames - diffusers| {u2:.3g}")
    assert set(ref_computed) == {"cond_uncond"} and 2 <= len(ref_computed["cond_uncond"]) < CACHE_STEPS
    for rank in four_ranks:
        rec = rank["cfg2 cache"]["step_cache"]["batches"][0]["contexts"]
        assert rec["cond_uncond"]["computed"] == ref_computed["cond_uncond"], rec
        assert rank["cfg2 cache"]["rows"] == [1] * CACHE_STEPS
    assert u2 <= FRAME_TOL, u2


@pytest.mark.parametrize("fam", VAE_PARALLEL_FAMILIES)
def test_parallel_vae_frames_equal_the_diffusers_pipeline(four_ranks, references, fam):
    """pipeline.vae: parallel on U2R2: every rank of the leader's sequence group (all 4) runs the
    pipeline's decode tail with its band of the latent's rows through the row-parallel VAE; the
    leader's frames equal the pipeline's whole decode; only the leader writes."""
    name = f"vae-parallel {fam}"
    leader = four_ranks[0][name]
    err = float(np.abs(leader["frames"][0] - references[fam][0]).max())
    print(f"{fam} U2R2 pipeline.vae=parallel: max |frames - {leader['pipeline']}| = {err:.3g}")
    assert err <= FRAME_TOL, (fam, err)
    assert leader["vae"] == "parallel" and leader["roles"] == ["text_encoder", "vae"] and len(leader["outputs"]) == 1
    for rank in four_ranks[1:]:
        assert rank[name]["roles"] == ["vae"] and "decode" in rank[name]["stages"], rank[name]["roles"]
        assert rank[name]["outputs"] == [] and rank[name]["frames"] == {}
