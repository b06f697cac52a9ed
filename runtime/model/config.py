"""ModelConfig: the typed view of ``plan.model`` (see docs/contracts.md).

Only the keys the model needs are read; unknown keys are ignored so the orchestrator can add
keys freely. Missing optional keys get defaults.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

from orchestrator.plan.rules import ATTENTION_KINDS


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
    def has_text(self) -> bool:
        return self.attention in ("cross", "joint")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ModelConfig":
        """Build from a ``plan.model`` dict. ``ffn_dim`` falls back to ``mlp_ratio*hidden``,
        ``head_dim`` to ``hidden // num_heads``, ``num_kv_heads`` to ``num_heads``."""
        d = dict(d)
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
        if "patch" in kw:
            kw["patch"] = tuple(int(p) for p in kw["patch"])
        for k in ("depth", "single_depth", "hidden", "num_heads", "num_kv_heads", "head_dim",
                  "ffn_dim", "in_channels", "text_len", "text_dim", "freq_dim", "num_classes"):
            if k in kw:
                kw[k] = int(kw[k])
        if "qk_norm" in kw:
            kw["qk_norm"] = bool(kw["qk_norm"])
        if kw.get("attention", "cross") != "joint":
            kw["single_depth"] = 0
        return cls(**kw)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["patch"] = list(self.patch)
        d["mlp_ratio"] = self.ffn_dim / self.hidden
        return d


def tiny_model_dict(attention: str = "cross", **overrides: Any) -> dict[str, Any]:
    """The tiny preset's ``plan.model`` dict (tests, CPU smoke runs)."""
    d: dict[str, Any] = {
        "preset": f"tiny-{attention}",
        "attention": attention,
        "depth": 1 if attention == "joint" else 2,
        "single_depth": 1 if attention == "joint" else 0,
        "hidden": 64,
        "num_heads": 4,
        "num_kv_heads": 4,
        "head_dim": 16,
        "ffn_dim": 128,
        "mlp_ratio": 2.0,
        "patch": [1, 2, 2],
        "in_channels": 4,
        "vae_stride": [4, 8, 8],
        "text_len": 8,
        "text_dim": 32,
        "qk_norm": True,
    }
    d.update(overrides)
    return d
