"""ModelConfig: the typed view of ``plan.model`` (see docs/contracts.md).

Only the keys the model needs are read; unknown keys are ignored so the orchestrator can add
keys freely. Missing optional keys get defaults.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

from sporch.orchestrator.models import find_preset, preset_knobs
from sporch.orchestrator.contract.vocab import ATTENTION_KINDS


@dataclass(frozen=True)
class ModelConfig:
    attention: str = "cross"
    depth: int = 2
    single_depth: int = 0
    hidden: int = 64
    num_heads: int = 4
    num_kv_heads: int = 4
    head_dim: int = 16
    ffn_dim: int = 128
    patch: tuple[int, int, int] = (1, 2, 2)
    in_channels: int = 4
    out_channels: int | None = None  # defaults to in_channels
    text_len: int = 8
    text_dim: int = 32
    qk_norm: bool = True
    freq_dim: int = 256  # sinusoidal timestep embedding width
    num_classes: int = 1000  # attention == "self" only (class-conditional DiT); +1 null class
    eps: float = 1e-6
    preset: str | None = None
    # -- architecture knobs of the published models (sporch.orchestrator.models) --
    rope_axes: tuple[int, int, int] | None = None  # head_dim split (t, h, w); None: Wan's split
    rope_theta: float = 10000.0
    pooled_dim: int = 0  # width of a pooled text vector added to the time embedding (Flux: 768)
    guidance_embed: bool = False  # guidance scale is an input embedded like the timestep (Flux.1-dev)
    distilled: bool = False  # guidance-distilled: one pass per step, no two-pass CFG (Flux.1)
    image_dim: int = 0  # width of CLIP image tokens for image conditioning (Wan I2V: 1280)
    image_len: int = 257  # CLIP image tokens (Wan I2V)
    boundary_ratio: float | None = None  # Wan2.2 A14B: the expert switch (generate's; one expert's model ignores it)
    expand_timesteps: bool = False  # Wan2.2 TI2V-5B: one timestep per token (generate's; the model takes either)

    def __post_init__(self) -> None:
        if self.attention not in ATTENTION_KINDS:
            raise ValueError(f"model.attention must be one of {ATTENTION_KINDS}, got {self.attention!r}")
        if self.hidden != self.num_heads * self.head_dim:
            raise ValueError(
                f"model.hidden ({self.hidden}) must equal num_heads*head_dim "
                f"({self.num_heads}*{self.head_dim})"
            )
        if self.num_heads % self.num_kv_heads != 0:
            raise ValueError(
                f"model.num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})"
            )
        if len(self.patch) != 3 or any(int(p) < 1 for p in self.patch):
            raise ValueError(f"model.patch must be three positive ints, got {self.patch!r}")
        if self.attention != "joint" and self.single_depth:
            raise ValueError("model.single_depth is only used with attention 'joint'")
        if self.head_dim % 2:
            raise ValueError("model.head_dim must be even (rotary embedding)")
        if self.rope_axes is not None and (len(self.rope_axes) != 3 or sum(self.rope_axes) != self.head_dim
                                           or any(a % 2 for a in self.rope_axes)):
            raise ValueError(f"model.rope_axes {self.rope_axes} must be three even ints summing to "
                             f"head_dim {self.head_dim}")
        if self.out_dim > self.in_channels:
            raise ValueError(f"model.out_channels {self.out_dim} > in_channels {self.in_channels}")

    @property
    def out_dim(self) -> int:
        return self.out_channels if self.out_channels is not None else self.in_channels

    @property
    def patch_volume(self) -> int:
        pt, ph, pw = self.patch
        return pt * ph * pw

    @property
    def patch_in(self) -> int:
        """Features of one flattened input patch (C * pt * ph * pw)."""
        return self.in_channels * self.patch_volume

    @property
    def patch_out(self) -> int:
        return self.out_dim * self.patch_volume

    @property
    def cond_channels(self) -> int:
        """Latent channels of a per-pixel condition concatenated to the noisy latents (Wan I2V:
        mask + first-frame latents, in_channels - out_channels)."""
        return self.in_channels - self.out_dim

    @property
    def uses_cfg(self) -> bool:
        """Two-pass classifier-free guidance applies (not for guidance-distilled models)."""
        return not self.distilled

    @property
    def has_text(self) -> bool:
        return self.attention in ("cross", "joint")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ModelConfig":
        """Build from a ``plan.model`` dict. ``ffn_dim`` falls back to ``mlp_ratio*hidden``,
        ``head_dim`` to ``hidden // num_heads``, ``num_kv_heads`` to ``num_heads``. A published
        preset (``d["preset"]``, sporch.orchestrator.models) contributes its
        architecture knobs; keys given in ``d`` win."""
        knobs = preset_knobs(d.get("preset"))
        if "rope_axes" in knobs and d.get("head_dim") not in (None, sum(knobs["rope_axes"])):
            knobs.pop("rope_axes")  # a resized preset: the published split no longer fits
        d = {**knobs, **dict(d.get("knobs") or {}), **dict(d)}  # a checkpoint's knobs (plan.model.knobs)
        kw: dict[str, Any] = {}
        names = {f for f in cls.__dataclass_fields__}
        for k, v in d.items():
            if k in names and v is not None:
                kw[k] = v
        if "hidden" in kw and "num_heads" in kw and "head_dim" not in kw:
            kw["head_dim"] = int(kw["hidden"]) // int(kw["num_heads"])
        if "num_kv_heads" not in kw and "num_heads" in kw:
            kw["num_kv_heads"] = kw["num_heads"]
        if "ffn_dim" not in kw and d.get("mlp_ratio") is not None and "hidden" in kw:
            kw["ffn_dim"] = int(round(float(d["mlp_ratio"]) * int(kw["hidden"])))
        for k in ("patch", "rope_axes"):
            if k in kw:
                kw[k] = tuple(int(p) for p in kw[k])
        for k in ("depth", "single_depth", "hidden", "num_heads", "num_kv_heads", "head_dim",
                  "ffn_dim", "in_channels", "out_channels", "text_len", "text_dim", "freq_dim", "num_classes",
                  "pooled_dim", "image_dim", "image_len"):
            if k in kw:
                kw[k] = int(kw[k])
        for k in ("qk_norm", "guidance_embed", "distilled", "expand_timesteps"):
            if k in kw:
                kw[k] = bool(kw[k])
        if kw.get("attention", "cross") != "joint":
            kw["single_depth"] = 0
        return cls(**kw)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["patch"] = list(self.patch)
        if self.rope_axes is not None:
            d["rope_axes"] = list(self.rope_axes)
        d["mlp_ratio"] = self.ffn_dim / self.hidden
        return d


def tiny_model_dict(attention: str = "cross", **overrides: Any) -> dict[str, Any]:
    """The tiny preset's ``plan.model`` dict (tests, CPU smoke runs), named ``tiny-<attention>``;
    a joint model gets one double- and one single-stream block."""
    shape = find_preset("tiny").shape
    joint = attention == "joint"
    d: dict[str, Any] = {k: v for k, v in shape.items() if k != "joint_single_depth"}
    d.update(preset=f"tiny-{attention}", attention=attention, depth=1 if joint else shape["depth"],
             single_depth=shape["joint_single_depth"] if joint else 0, mlp_ratio=shape["ffn_dim"] / shape["hidden"],
             patch=list(shape["patch"]), vae_stride=list(shape["vae_stride"]))
    d.update(overrides)
    return d
