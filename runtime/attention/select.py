"""Which attention kernel runs: a pure rule over facts about the machine, and the probe that
collects those facts.

The rule (:func:`rank_kernels`) takes a :class:`Facts` record (device type, dtype, CUDA compute
capability, cuDNN version, which optional kernel packages import and which aten ops exist) and
returns the usable kernels, preferred first, in the order of the GPU architecture's row of
:data:`PREFERENCE`. Tests feed it facts as data; :func:`probe` fills them in from torch.

The same name is used for the sharded path (``usp_attention``) and the unsharded reference
(``sporch.runtime.attention.local_attention``), so both run the same kernel; :func:`selected_kernel`
is what a run records in its result.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from dataclasses import dataclass, field

__all__ = ["Facts", "KernelSpec", "SPECS", "PREFERENCE", "arch_family", "rank_kernels", "choose_kernel",
           "probe", "selected_kernel"]

HALF = frozenset({"float16", "bfloat16"})


@dataclass(frozen=True)
class Facts:
    """What the kernel choice depends on. ``dtype`` is a torch dtype name (``"bfloat16"``);
    ``capability`` the CUDA compute capability (None on CPU); ``modules`` the optional kernel
    packages that import here (``flash_attn``, ``flash_attn_interface``); ``ops`` the
    ``torch.ops.aten`` attention ops this torch has; ``cudnn_version`` as torch reports it
    (e.g. 91900), None without cuDNN."""

    device: str
    dtype: str
    capability: tuple[int, int] | None = None
    cudnn_version: int | None = None
    modules: frozenset[str] = field(default_factory=frozenset)
    ops: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class KernelSpec:
    """When one kernel can run: device type, dtypes, and what must be present."""

    device: str | None  # None: any device
    dtypes: frozenset[str]
    op: str | None = None  # aten op that must exist
    module: str | None = None  # optional package that must import
    min_capability: tuple[int, int] = (0, 0)
    capability_major: int | None = None  # only this architecture (flash-attn 3: Hopper)
    min_cudnn: int | None = None

    def usable(self, f: Facts) -> bool:
        if self.device is not None and f.device != self.device:
            return False
        if f.dtype not in self.dtypes:
            return False
        if self.op is not None and self.op not in f.ops:
            return False
        if self.module is not None and self.module not in f.modules:
            return False
        if f.device == "cuda":
            cap = f.capability or (0, 0)
            if cap < self.min_capability:
                return False
            if self.capability_major is not None and cap[0] != self.capability_major:
                return False
        if self.min_cudnn is not None and (f.cudnn_version or 0) < self.min_cudnn:
            return False
        return True


FLOATS = HALF | {"float32", "float64"}

SPECS: dict[str, KernelSpec] = {
    "cudnn": KernelSpec("cuda", HALF, op="_scaled_dot_product_cudnn_attention", min_capability=(8, 0),
                        min_cudnn=90000),
    "flash_attn3": KernelSpec("cuda", HALF, module="flash_attn_interface", capability_major=9),
    "flash_attn": KernelSpec("cuda", HALF, module="flash_attn", min_capability=(8, 0)),
    "cuda_flash": KernelSpec("cuda", HALF, op="_scaled_dot_product_flash_attention", min_capability=(8, 0)),
    "cuda_efficient": KernelSpec("cuda", HALF | {"float32"}, op="_scaled_dot_product_efficient_attention",
                                 min_capability=(5, 0)),
    "cpu_flash": KernelSpec("cpu", FLOATS, op="_scaled_dot_product_flash_attention_for_cpu"),
    "math": KernelSpec(None, FLOATS),
}

#: Preference per architecture family, fastest first. Hopper: cuDNN measured fastest
#: (issue 13: 23.0 ms vs 36.6 ms for torch's flash at S=32,760, H=24, D=128, bf16, H100);
#: flash-attn 3 is next (Hopper-only, not yet measured here). Blackwell: cuDNN ships
#: kernels for it, torch's flash is the Ampere-era FA2. Ampere/Ada: FA2 (package, then
#: torch's copy), then cuDNN. Older GPUs: only the memory-efficient kernel.
#: `python bench/gpu_attention.py` measures every usable candidate on the running GPU.
PREFERENCE: dict[str, tuple[str, ...]] = {
    "hopper": ("cudnn", "flash_attn3", "cuda_flash", "flash_attn", "cuda_efficient", "math"),
    "blackwell": ("cudnn", "cuda_flash", "flash_attn", "cuda_efficient", "math"),
    "ampere": ("flash_attn", "cuda_flash", "cudnn", "cuda_efficient", "math"),
    "older": ("cuda_efficient", "math"),
    "cpu": ("cpu_flash", "math"),
}


def arch_family(f: Facts) -> str:
    """The row of :data:`PREFERENCE` for these facts."""
    if f.device != "cuda":
        return "cpu"
    major = (f.capability or (0, 0))[0]
    if major == 9:
        return "hopper"
    if major >= 10:
        return "blackwell"
    if major == 8:
        return "ampere"
    return "older"


def rank_kernels(f: Facts) -> list[str]:
    """Usable kernels for ``f``, preferred first (``math`` last when usable)."""
    return [name for name in PREFERENCE[arch_family(f)] if SPECS[name].usable(f)]


def choose_kernel(f: Facts) -> str:
    """The preferred usable kernel; ValueError when none is (a non-float dtype)."""
    ranked = rank_kernels(f)
    if not ranked:
        raise ValueError(f"no attention kernel takes {f.dtype} on {f.device}; use a floating dtype")
    return ranked[0]


# -- probing the running machine ---------------------------------------------------------

OPTIONAL_MODULES = ("flash_attn", "flash_attn_interface")


@functools.lru_cache(maxsize=None)
def _importable(name: str) -> bool:
    """True when ``name`` is installed and imports (a broken build counts as absent). Nothing
    is imported when the package is not installed."""
    if importlib.util.find_spec(name) is None:
        return False
    try:
        importlib.import_module(name)
    except Exception:  # noqa: BLE001 - e.g. built for another torch / CUDA
        return False
    return True


_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32",
            "double": "float64"}


def probe(device, dtype) -> Facts:
    """The facts for ``device`` (torch.device or str) and ``dtype`` (torch dtype or name) here."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    dtype_name = str(dtype).removeprefix("torch.")
    return _probe(dev, _ALIASES.get(dtype_name, dtype_name))


@functools.lru_cache(maxsize=None)
def _probe(dev, dtype_name: str) -> Facts:
    import torch

    ops = frozenset(name for name in (s.op for s in SPECS.values() if s.op) if hasattr(torch.ops.aten, name))
    if dev.type != "cuda":
        return Facts(dev.type, dtype_name, ops=ops)
    index = dev.index
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    modules = frozenset(m for m in OPTIONAL_MODULES if _importable(m))
    return Facts("cuda", dtype_name, capability=tuple(torch.cuda.get_device_capability(index)),
                 cudnn_version=cudnn, modules=modules, ops=ops)


def selected_kernel(device, dtype) -> str:
    """The kernel ``backend="auto"`` runs for ``device`` and ``dtype`` (a torch dtype or a
    name such as ``"bfloat16"``): the value to record in result.json."""
    return choose_kernel(probe(device, dtype))
