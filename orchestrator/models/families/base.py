"""The record every family module fills (standard library only)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Mapping, Optional

from sporch.orchestrator.contract.vocab import CACHE_METHODS
from sporch.orchestrator.models.checkpoint_files import CheckpointError
from sporch.orchestrator.models.families.config_rules import Rule
from sporch.orchestrator.models.families.original_format import OriginalFormat
from sporch.orchestrator.models.families.plan_format import SplitPlan


#: the step caches (``workload.cache.method`` but none) and TeaCache's probes the one model path has
STEP_CACHES = tuple(m for m in CACHE_METHODS if m != "none")
TEACACHE_PROBES = ("timestep", "modulated")


class UnsupportedClass(CheckpointError):
    """A diffusers class no family covers."""


def no_pipeline_parts(preset: Optional[str]) -> Optional[Mapping[str, Any]]:
    """A family whose text encoder and VAE sizes sporch does not know."""
    return None


def no_image_input(config: Mapping[str, Any], expand_timesteps: bool) -> str:
    """A family whose generate takes no ``workload.image``."""
    return "none"


def no_image_folders(config: Mapping[str, Any]) -> tuple[str, ...]:
    """No folder beyond the pipeline's own for an image."""
    return ()


def no_image_tokens(config: Mapping[str, Any]) -> tuple[int, int]:
    """A transformer that attends to no image tokens besides the text."""
    return 0, 0


@dataclass(frozen=True)
class ParameterCount:
    """A transformer's parameters as the planner's memory lines split them: ``blocks`` (every
    block of the class's top-level block lists), ``largest_block`` (the biggest one), ``root``
    (the rest: embeddings, text refiner, head). Counted on the meta device from the preset's
    config (diffusers 0.42.1; tests/runtime/models/test_generic_parameters.py checks every preset)."""

    blocks: int
    largest_block: int
    root: int

    @property
    def total(self) -> int:
        return self.blocks + self.root

    def as_parts(self) -> dict[str, int]:
        return {"blocks": self.blocks, "largest_block": self.largest_block, "root": self.root}


#: T5 v1.1 XXL's encoder (24 layers x 4096, FFN 10240, vocabulary 32128; transformers' T5EncoderModel
#: counted on the meta device): the text encoder several families' pipelines share, in the
#: PARTS keys (plan/pipeline_estimate.py)
T5_XXL_PARAMETERS, T5_XXL_LAYERS, T5_XXL_EMBEDDING = 4_762_310_656, 24, 32_128 * 4096
#: its largest layer (the first block: 4 attention projections, the gated FFN, 2 norms, the relative
#: position bias), what a sharded encoder gathers at a time besides the embedding
T5_XXL_LAYER = 192_948_224
T5_XXL_ENCODER: dict[str, Any] = {"text_encoder": "T5-XXL encoder", "text_encoder_parameters": T5_XXL_PARAMETERS,
                                  "text_encoder_layers": T5_XXL_LAYERS, "text_encoder_embedding": T5_XXL_EMBEDDING,
                                  "text_encoder_layer": T5_XXL_LAYER}


def linear(n_in: int, n_out: int, bias: bool = True) -> int:
    """Parameters of ``nn.Linear(n_in, n_out, bias)`` (the families' parameter formulas)."""
    return n_in * n_out + (n_out if bias else 0)


def feed_forward(dim: int, inner: int) -> int:
    """Parameters of diffusers' ``FeedForward(dim, inner_dim=inner)`` (GELU: in and out linears, biases)."""
    return linear(dim, inner) + linear(inner, dim)


def qk_norm_parameters(kind: Optional[str], width: int) -> int:
    """Parameters of one of an attention's q/k norms (``qk_norm`` of diffusers' Attention) over ``width``."""
    return {None: 0, "": 0, "rms_norm": width, "rms_norm_across_heads": width, "layer_norm": 2 * width,
            "layer_norm_across_heads": 2 * width}[kind]


class PipelineCfg(str, Enum):
    """How a family's diffusers pipeline (``Family.pipeline_class``) applies classifier-free
    guidance as generate calls it, i.e. what ``parallel.cfg=2`` has to split.

    * ``BATCHED``: one transformer call per step on ``[uncond, cond]`` concatenated along the
      batch (SD3, CogVideoX, LTX-Video): each cfg rank computes its half of the rows
      (runtime/models/cfg_parallel.py);
    * ``TWO_CALLS``: true CFG, two transformer calls per step, the prompt's in
      ``cache_context("cond")`` then the negative prompt's in ``cache_context("uncond")``, neither
      output read before the second returns (Qwen-Image): cfg rank 0 computes the first, cfg rank 1
      the second, and the two are exchanged (runtime/models/cfg_two_calls.py);
    * ``NONE``: one pass per step (guidance-distilled, ``Family.cfg`` False: HunyuanVideo's
      embedded guidance), nothing to split.

    tests/runtime/pipelines/test_generate_generic.py checks each family's value against its
    pipeline's ``__call__`` source."""

    BATCHED = "batched"
    TWO_CALLS = "two_calls"
    NONE = "none"


@dataclass(frozen=True)
class FamilyPreset:
    """A published checkpoint's transformer config (the keys of its config.json that set the
    shape), where the numbers come from, its parameters (counted from that config), and what its
    pipeline folder adds: ``shape_overrides`` (``plan.model`` fields the config does not hold: the
    pipeline's text length, the VAE's strides), ``boundary_ratio`` (two experts: Wan2.2 A14B's
    model_index.json) and ``expand_timesteps`` (one timestep per token: Wan2.2 TI2V-5B)."""

    name: str
    config: Mapping[str, Any]
    source: str
    parameters: Optional[ParameterCount] = None
    shape_overrides: Mapping[str, Any] = field(default_factory=dict)
    boundary_ratio: Optional[float] = None
    expand_timesteps: bool = False
    #: a test model (``tiny``): no published release, so a pipeline folder beside it says whether it
    #: has two experts or per-token timesteps (a published preset and its folder must agree)
    test_model: bool = False


@dataclass(frozen=True)
class Family:
    name: str  # "qwen-image"
    title: str  # "Qwen-Image"
    classes: tuple[str, ...]  # diffusers transformer classes
    #: config.json -> plan.model shape fields (attention, depth, single_depth, hidden, num_heads,
    #: num_kv_heads, head_dim, ffn_dim, patch, in_channels, vae_stride, text_len, text_dim, qk_norm)
    shape: Callable[[Mapping[str, Any]], dict]
    #: diffusers' older, shared class names a published config.json may still carry for one of
    #: ``classes``, with the config values that select it: legacy ``_class_name`` -> (class, {key:
    #: value}), the remapping diffusers' loader applies itself (``model_loading_utils``
    #: ``_CLASS_REMAPPING_DICT``: ``Transformer2DModel`` with ``norm_type: ada_norm_single`` is built as
    #: ``PixArtTransformer2DModel``); read through ``families.config_class``
    legacy_classes: Mapping[str, tuple[str, Mapping[str, Any]]] = field(default_factory=dict)
    #: class -> the split plan sporch ships (classes without a ``_cp_plan``); absent: the class's own
    split_plans: Mapping[str, SplitPlan] = field(default_factory=dict)
    #: classes whose split plan sporch derives (neither a ``_cp_plan`` nor a table in
    #: ``split_plans``): from a tiny instance built from the runtime module's ``TINY``, checked exact
    #: against the unsharded class on 2 and 4 gloo ranks before first use, the verdict cached per
    #: class and diffusers version (``derived_plans.py``; runtime/models/derive.py). A derived
    #: plan needs no ``local_attention``: it splits nothing before the block stack, so attention
    #: outside the stack (a text refiner) runs whole.
    derived: tuple[str, ...] = ()
    #: module-name prefixes whose attention runs on whole (unsplit) tensors
    local_attention: tuple[str, ...] = ()
    #: the split plan cuts the text tokens over the sequence ranks like the image's (attention to
    #: them is sequence-parallel); False: the text stays whole on every rank (Wan's cross-attention).
    #: The planner's sequence section records it; tests/runtime/models/test_generic_split_facts.py
    #: checks it against the runtime's split plan of every class.
    text_split: bool = True
    presets: tuple[FamilyPreset, ...] = ()
    #: (a preset's config or {}, ``plan.model`` shape fields) -> the class's config with that shape:
    #: what lets a job change a preset's sizes (``model.depth=4``) or give a model by its shape alone
    #: (``model.attention: cross`` and sizes: the family of that attention kind); None: the family's
    #: presets run with their published shape only (a changed field is refused in one line)
    config_for: Optional[Callable[[Mapping[str, Any], Mapping[str, Any]], dict]] = None
    cfg: bool = True  # classifier-free guidance applies (False: guidance-distilled)
    #: The generate workload: the diffusers pipeline folder's sub-folders it reads (empty: no
    #: generate pipeline), whether it makes video (MP4) or images (PNG)
    pipeline_folders: tuple[str, ...] = ()
    video: bool = False
    #: The diffusers pipeline class the generate workload (runtime/pipelines/generate_run.py) runs around
    #: the sequence-parallel transformer (None: no generate for this family), and the one it runs
    #: when the job gives ``workload.image`` (image-to-video or an edit: ``WanImageToVideoPipeline``;
    #: None: the family takes no image)
    pipeline_class: Optional[str] = None
    image_pipeline_class: Optional[str] = None
    #: without ``pipeline_class``: why the family's diffusers pipeline does not run on the generic
    #: generate (one clause, in the planner's refusal of ``workload.kind generate``); None: not said
    pipeline_refusal: Optional[str] = None
    #: the pipeline's scheduler is a flow-matching one (FlowMatchEulerDiscrete, UniPC with flow
    #: sigmas), which ``workload.shift`` / ``sigmas`` / ``scheduler`` set (runtime/pipelines/schedulers.py);
    #: False: the folder's own scheduler only (PixArt's DPM-Solver, CogVideoX's DDIM)
    flow_scheduler: bool = True
    #: (config.json, expand_timesteps) -> whether a generate job gives ``workload.image``: "required"
    #: (image-to-video: a latent first-frame condition), "optional" (text- or image-to-video: Wan2.2
    #: TI2V-5B), "none"; and the pipeline folder's sub-folders an image needs besides
    #: (``image_encoder``: Wan2.1 I2V's CLIP encoder, where the config takes CLIP tokens)
    image_input: Callable[[Mapping[str, Any], bool], str] = no_image_input
    image_folders: Callable[[Mapping[str, Any]], tuple[str, ...]] = no_image_folders
    #: How that pipeline applies classifier-free guidance (:class:`PipelineCfg`: one batched call,
    #: two calls, or none), which decides how ``parallel.cfg=2`` splits its generate: the planner
    #: plans cfg 2 for ``BATCHED`` and ``TWO_CALLS`` (``NONE`` goes with ``cfg`` False), and
    #: runtime/pipelines/placement.py attaches the matching hooks.
    pipeline_cfg: PipelineCfg = PipelineCfg.NONE
    #: that pipeline's guidance scale counts from 0 (``pos + g (pos - neg)``: ZImagePipeline guides for
    #: any g > 0), sporch's from 1 (CFG for g > 1): generate refuses a scale in (0, 1] for it in one
    #: line (plan/family_checks.py), and the family module's ``call_arguments`` passes 0 with CFG off
    cfg_from_zero: bool = False
    #: Generate's ``pipeline.vae: tiled``: the family's diffusers VAE class has a tiled
    #: decode (``enable_tiling``), which the leader switches on with the class's own default tile
    #: sizes (diffusers' ``enable_tiling``); the planner's tiled
    #: decode estimate uses the PARTS fact ``vae_tile_pixels`` (those defaults for the published VAE).
    #: False: only ``pipeline.vae: leader`` is planned for its generic generate.
    vae_tiling: bool = False
    #: The diffusers VAE class of the family's pipelines (``vae/config.json`` ``_class_name``).
    vae_class: Optional[str] = None
    #: ``pipeline.vae: parallel``: ``vae_class`` decodes exactly with sporch's row-parallel decode
    #: (runtime/pipelines/vae_parallel/: halo convolutions, whole-image group norms, attention on
    #: the gathered rows), over the leader's sequence group; generate runs the pipeline's
    #: own decode tail around it (``row_parallel_vae``). False: the planner refuses it for the family
    #: in one line. tests/runtime/pipelines/test_vae_parallel_families.py checks it against
    #: ``parallelize_decoder`` on the family's tiny VAE and measures the decode against the whole one.
    vae_parallel: bool = False
    #: a pipeline folder's ``vae/config.json`` -> why that VAE does not decode exactly by rows although
    #: its class does (one clause; LTX-Video 0.9.1's ``decoder_inject_noise``), or None: the planner
    #: refuses ``pipeline.vae: parallel`` for that folder (``auto`` does not take it)
    vae_parallel_refusal: Optional[Callable[[Mapping[str, Any]], Optional[str]]] = None
    #: preset name -> the published text encoder / VAE / image encoder facts (plan/pipeline_estimate.py's
    #: memory estimate), or None where unknown
    pipeline_parts: Callable[[Optional[str]], Optional[Mapping[str, Any]]] = no_pipeline_parts
    #: config.json -> the transformer's parameters (blocks, largest block, root): a pure formula of
    #: the diffusers class's layers, for a config of a shape no preset has (plan/estimates.py
    #: ``parameter_parts``; tests/runtime/models/test_generic_parameters.py checks it against the class
    #: built on the meta device); None: the planner's generic shape formula
    count_parameters: Optional[Callable[[Mapping[str, Any]], ParameterCount]] = None
    notes: str = ""
    #: diffusers' LoRA loader mixin of the family's pipelines (``FluxLoraLoaderMixin``): its
    #: ``lora_state_dict`` converts the adapter formats it knows (kohya, the original release's
    #: names) to diffusers' keys on the one model path (runtime/models/lora.py); None: no LoRA
    lora_loader: Optional[str] = None
    #: ``workload.cache.method`` values the one model path runs for the family's classes
    #: (runtime/models/cache/apply.py: diffusers' cache hooks, the decision agreed over the ranks);
    #: each needs the class's blocks in diffusers' ``TransformerBlockRegistry``, and teacache a head
    #: block with what ``teacache_probe`` reads (tests/runtime/models/test_generic_cache_facts.py
    #: checks every family's classes)
    step_cache: tuple[str, ...] = STEP_CACHES
    #: why the methods of ``STEP_CACHES`` the family does not list cannot run on its classes (one
    #: clause naming what is missing; the planner's refusal and ``sporch models``' cache column)
    step_cache_refusal: Optional[str] = None
    #: What TeaCache compares across steps (runtime/models/cache/probe.py): ``timestep``, the
    #: head block's time embedding, or ``modulated``, the head block's ``norm1(hidden_states,
    #: emb=temb)``; the probe the family's published coefficients were fitted on
    teacache_probe: str = "timestep"
    #: preset (``plan.model.preset``) -> TeaCache's published rescale polynomial (highest degree
    #: first) for it, on ``teacache_probe``; a model without one uses the identity (a raw change)
    teacache_coefficients: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    #: preset -> MagCache's published per-step magnitude ratios (resampled to the run's steps);
    #: a model without them takes ``workload.cache.ratios`` or measures them (threshold 0)
    magcache_ratios: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    #: a pipeline folder's ``vae/config.json`` -> the latent strides (frames, height, width) its
    #: VAE gives the transformer beside it, or None for a VAE class it does not read (the shape's
    #: ``vae_stride`` stands; a ValueError, one line, for strides out of range); None: the family's
    #: strides do not depend on the folder's VAE
    vae_stride_from: Optional[Callable[[Mapping[str, Any]], Optional[list]]] = None
    #: a config.json -> why the family's generic generate pipeline cannot run that model (one
    #: line, the planner refuses generate with it), or None where it can; None: every config of
    #: the family's classes runs in its pipeline
    generate_refusal: Optional[Callable[[Mapping[str, Any]], Optional[str]]] = None
    #: The keys a config.json of the family's classes may hold, each with the type and range of its
    #: value (config_rules.py: every constructor argument of the class; tests check the list against
    #: the class), and the class's own rules across keys: config -> (key, why) or None
    #: (``families.config_problem`` applies both, for the planner, inspect and the runtime's loader)
    config_keys: Mapping[str, Rule] = field(default_factory=dict)
    config_rules: Optional[Callable[[Mapping[str, Any]], Optional[tuple[str, str]]]] = None
    #: The family's original release (Wan-Video's ``WanModel``, Black Forest Labs' Flux), where its
    #: checkpoints load into the diffusers class through diffusers' single-file converter: its
    #: markers, config mapping and LoRA names (original_format.py), or None
    original: Optional[OriginalFormat] = None
    #: config.json -> (width, count) of the image tokens the transformer attends to beside the text
    #: (Wan2.1 I2V's CLIP tokens: the planner's cross-attention work and memory), (0, 0) for none
    image_tokens: Callable[[Mapping[str, Any]], tuple[int, int]] = no_image_tokens
    #: a config.json -> why the family's split plan is not exact for that model (one clause: a config
    #: option the plan does not cover, e.g. Helios' ``is_amplify_history``), or None where it is; the
    #: planner refuses such a model on more than one sequence rank in one line
    #: (plan/family_checks.check_family), the runtime before it splits (models/runner.py). None: every
    #: config of the family's classes splits exactly
    split_refusal: Optional[Callable[[Mapping[str, Any]], Optional[str]]] = None

    def __post_init__(self) -> None:
        unknown = [m for m in self.step_cache if m not in STEP_CACHES]
        if unknown or self.teacache_probe not in TEACACHE_PROBES:
            raise ValueError(f"family {self.name}: step_cache {list(self.step_cache)} (of {list(STEP_CACHES)}), "
                             f"teacache_probe {self.teacache_probe!r} (of {list(TEACACHE_PROBES)})")
        odd = [c for c in self.derived if c not in self.classes or c in self.split_plans]
        if odd:
            raise ValueError(f"family {self.name}: derived classes {odd} must be its classes without a shipped table")
        if self.pipeline_class and (self.pipeline_cfg is PipelineCfg.NONE) == self.cfg:
            raise ValueError(f"family {self.name}: pipeline_cfg {self.pipeline_cfg.value} with cfg {self.cfg}: a "
                             "pipeline applies CFG (batched or two_calls) exactly when the family has a CFG branch")

    def split_plan_source(self, class_name: str) -> str:
        if class_name in self.split_plans:
            return "shipped table"
        return "derived (checked on gloo ranks, cached)" if class_name in self.derived else "the class's _cp_plan"
