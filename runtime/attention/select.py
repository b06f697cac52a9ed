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

__all__ = ["Facts", "KernelSpec", "SPECS", "PREFERENCE", "LOSSY_PREFERENCE", "Choice", "arch_family",
           "rank_kernels", "choose_kernel", "choose_for_precision", "run_choice", "probe", "selected_kernel"]

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
    lossy: bool = False  # 8-bit inside (SageAttention): only with workload.attention_precision lossy
    lse: bool = True  # returns the log-sum-exp the ring merge needs

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
    # SageAttention 1.0.6 (PyPI sageattention, Triton): Q and K in int8 per block, P V in half
    # precision; its sageattn returns the output only (no log-sum-exp)
    "sage": KernelSpec("cuda", HALF, module="sageattention", min_capability=(8, 0), lossy=True, lse=False),
}

#: ``workload.attention_precision``: lossy kernels run first where they can, else the exact row.
LOSSY_PREFERENCE: tuple[str, ...] = ("sage",)

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


def rank_kernels(f: Facts, lossy: bool = False) -> list[str]:
    """Usable exact kernels for ``f``, preferred first (``math`` last when usable); ``lossy``:
    the usable lossy kernels (:data:`LOSSY_PREFERENCE`) before them."""
    first = [n for n in LOSSY_PREFERENCE if SPECS[n].usable(f)] if lossy else []
    return first + [name for name in PREFERENCE[arch_family(f)] if SPECS[name].usable(f)]


def choose_kernel(f: Facts) -> str:
    """The preferred usable kernel; ValueError when none is (a non-float dtype)."""
    ranked = rank_kernels(f)
    if not ranked:
        raise ValueError(f"no attention kernel takes {f.dtype} on {f.device}; use a floating dtype")
    return ranked[0]


@dataclass(frozen=True)
class Choice:
    """The kernel a run uses and why (result.json's ``attention_kernel`` and ``attention_choice``)."""

    kernel: str
    reason: str


def choose_for_precision(f: Facts, precision: str = "exact", blocks: int = 1) -> Choice:
    """The kernel for ``workload.attention_precision``: ``exact`` is :func:`choose_kernel`;
    ``lossy`` takes the first usable kernel of :data:`LOSSY_PREFERENCE` when every attention call
    merges at most ``blocks == 1`` block (a kernel without a log-sum-exp cannot be merged in a
    ring or with joint text keys), else the exact kernel, saying why."""
    exact = choose_kernel(f)
    if precision == "exact":
        return Choice(exact, "exact (workload.attention_precision)")
    if precision != "lossy":
        raise ValueError(f"workload.attention_precision must be exact or lossy, got {precision!r}")
    for name in LOSSY_PREFERENCE:
        spec = SPECS[name]
        if not spec.usable(f):
            continue
        if not spec.lse and blocks > 1:
            return Choice(exact, f"lossy asked, but {name} returns no log-sum-exp and each attention call merges "
                                 f"{blocks} blocks (ring or joint text): {exact}")
        return Choice(name, f"lossy (workload.attention_precision): {name}")
    why = "; ".join(_unusable(SPECS[n], f, n) for n in LOSSY_PREFERENCE)
    return Choice(exact, f"lossy asked, but no lossy kernel runs here ({why}): {exact}, exact")


def _unusable(spec: KernelSpec, f: Facts, name: str) -> str:
    if spec.device is not None and f.device != spec.device:
        return f"{name} needs {spec.device}, this is {f.device}"
    if f.dtype not in spec.dtypes:
        return f"{name} needs float16/bfloat16, not {f.dtype}"
    if spec.module is not None and spec.module not in f.modules:
        return f"{name} needs the {spec.module} package"
    return f"{name} needs compute capability {spec.min_capability[0]}.{spec.min_capability[1]}+"


# -- probing the running machine ---------------------------------------------------------

OPTIONAL_MODULES = ("flash_attn", "flash_attn_interface", "sageattention")


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


def run_choice(precision: str, device, dtype, *, ring: int = 1, joint_sharded: bool = False) -> Choice:
    """:func:`choose_for_precision` on this machine for a run whose attention calls merge
    ``ring`` blocks, plus one for joint text keys when the sequence is sharded (unsharded, the
    text is concatenated into the one call)."""
    return choose_for_precision(probe(device, dtype), precision or "exact", ring + (1 if joint_sharded else 0))


def selected_kernel(device, dtype) -> str:
    """The kernel ``backend="auto"`` runs for ``device`` and ``dtype`` (a torch dtype or a
    name such as ``"bfloat16"``): the value to record in result.json."""
    return choose_kernel(probe(device, dtype))
