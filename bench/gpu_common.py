"""What the GPU benches share: the device check, a one-GPU Plan, timing, the header that names
the machine (device, driver, torch, CUDA, cuDNN), diffusers models with random weights drawn on
the device, and one forward through diffusers' class beside the same class run as sporch runs it
(:func:`compare_forwards`)."""

from __future__ import annotations

import dataclasses
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

#: Exit status when there is no CUDA device and --cpu-smoke was not given.
EXIT_NO_GPU = 2


def pick_device(cpu_smoke: bool, prog: str):
    """cuda:0, or the CPU with --cpu-smoke; without either, one line and exit 2."""
    import torch

    if cpu_smoke:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        print(f"{prog}: no CUDA device here (torch {torch.__version__}); run it on a GPU machine, "
              f"or pass --cpu-smoke to check the code path at a tiny shape", file=sys.stderr)
        raise SystemExit(EXIT_NO_GPU)
    return torch.device("cuda", 0)


def one_gpu_plan(cluster: str, job: dict[str, Any]):
    """The Plan for ``job`` on one GPU of ``cluster`` (a cluster name or file): the cluster's GPU
    (its peak TFLOP/s, memory) with nodes = gpus_per_node = 1, every parallel degree 1."""
    from sporch.orchestrator.config.cluster import find_cluster
    from sporch.orchestrator.config.job import job_from_dict
    from sporch.orchestrator.plan.planner import make_plan

    one = dataclasses.replace(find_cluster(cluster), nodes=1, gpus_per_node=1)
    job = {**job, "parallel": {"dp": 1, "cfg": 1, "ring": 1, "ulysses": 1}}
    return make_plan(one, job_from_dict(job, source="bench"))


def world_of_one(device):
    """A ParallelContext over a one-rank process group (gloo on a private store: nothing listens),
    for the sequence-parallel hooks run on one process."""
    import torch.distributed as dist

    from sporch.runtime.parallel import ParallelContext

    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    return ParallelContext.from_layout(device=device)


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_ms(fn: Callable[[], Any], device, warmup: int, repeat: int) -> float:
    """Median wall milliseconds of ``fn`` over ``repeat`` synchronised calls after ``warmup``."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def fill_random(model):
    """Every parameter of ``model`` drawn on its own device (fan-in scaled weights, norm scales
    near 1, small biases): for timing, where the values do not matter but a model of 12 B
    parameters must not be drawn on the host."""
    import math

    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 1.0 / math.sqrt(p.shape[-1]))
            elif name.endswith("weight") or name.endswith("scale"):
                p.normal_(1.0, 0.1)
            else:
                p.normal_(0.0, 0.02)
    return model.eval().requires_grad_(False)


def kept_in_float32(class_name: str) -> tuple[str, ...]:
    """The module names diffusers keeps in float32 when it loads ``class_name`` in a lower dtype
    (the class's ``_keep_in_fp32_modules``: Wan's norms, time embedder, RoPE, modulation tables)."""
    from sporch.runtime.models.build import diffusers_class

    return tuple(getattr(diffusers_class(class_name), "_keep_in_fp32_modules", None) or ())


def stays_float32(name: str, keep: tuple[str, ...]) -> bool:
    """diffusers' rule (``from_pretrained(torch_dtype=...)``): a parameter stays float32 when one
    of ``keep`` is a component of its dotted name."""
    return any(k in name.split(".") for k in keep)


def _empty_model(class_name: str, config: dict):
    """The class from ``config`` with its parameters on the meta device, buffers real (the tables
    some classes compute at init, e.g. RoPE's, which meta would lose)."""
    from accelerate import init_empty_weights

    from sporch.runtime.models.build import diffusers_class

    with init_empty_weights(include_buffers=False):
        return diffusers_class(class_name).from_config(config)


def device_model(class_name: str, config: dict, device, dtype, *, keep_float32: bool = True, seed: int = 0):
    """diffusers' ``class_name`` from ``config`` with random values drawn on ``device``
    (:func:`fill_random`; a 12 B model in seconds, never on the host), each parameter in ``dtype``
    except, with ``keep_float32``, those diffusers keeps in float32 (:func:`stays_float32`: the
    dtypes ``from_pretrained(torch_dtype=dtype)`` gives); buffers as the class builds them. Ready
    to run as sporch runs it (eval, no grad, diffusers' ``native`` attention backend)."""
    import torch

    from sporch.runtime.models.build import prepare_model

    keep = kept_in_float32(class_name) if keep_float32 else ()
    model = _empty_model(class_name, config)
    for module_name, module in model.named_modules():
        for leaf, p in list(module._parameters.items()):
            if p is None:
                continue
            full = f"{module_name}.{leaf}" if module_name else leaf
            dt = torch.float32 if stays_float32(full, keep) or not p.is_floating_point() else dtype
            module._parameters[leaf] = torch.nn.Parameter(torch.empty(p.shape, dtype=dt, device=device),
                                                          requires_grad=False)
        for leaf, b in list(module._buffers.items()):
            if b is not None:
                module._buffers[leaf] = b.to(device)
    torch.manual_seed(seed)
    return prepare_model(fill_random(model))


def twin(model, class_name: str, config: dict, dtype, *, keep_float32: bool):
    """A second instance of ``model``'s class on the same tensors (no copy), except parameters
    whose dtype differs under ``keep_float32`` (see :func:`device_model`), which are cast copies:
    the same weights in the dtypes another builder gives them. Its own modules, so hooks and
    compiled blocks on one do not touch the other."""
    import torch

    from sporch.runtime.models.build import prepare_model

    keep = kept_in_float32(class_name) if keep_float32 else ()
    other = _empty_model(class_name, config)
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    for module_name, module in other.named_modules():
        for leaf, p in list(module._parameters.items()):
            if p is None:
                continue
            full = f"{module_name}.{leaf}" if module_name else leaf
            src = params[full]
            dt = torch.float32 if stays_float32(full, keep) or not src.is_floating_point() else dtype
            module._parameters[leaf] = src if src.dtype == dt else torch.nn.Parameter(src.detach().to(dt),
                                                                                      requires_grad=False)
        for leaf in list(module._buffers):
            if module._buffers[leaf] is not None:
                module._buffers[leaf] = buffers[f"{module_name}.{leaf}" if module_name else leaf]
    return prepare_model(other)


def runtime_keeps_float32(class_name: str) -> bool:
    """Whether sporch's builder (``build_transformer``, what a run's verify / benchmark /
    inference / generate load the transformer with) keeps diffusers' float32 modules in a
    bfloat16 build, probed on the family's tiny config (no download, under a second). True for a
    class that keeps none."""
    import torch

    from sporch.orchestrator.models.families import require_family
    from sporch.runtime.models.families import family_module
    from sporch.runtime.models.placed import build_transformer

    keep = kept_in_float32(class_name)
    if not keep:
        return True
    config = dict(family_module(require_family(class_name).name).TINY)
    built = build_transformer(weights=None, class_name=class_name, config=config, ctx=None, dtype=torch.bfloat16)
    return all(p.dtype == torch.float32 for n, p in built.named_parameters() if stays_float32(n, keep))


def float32_line(class_name: str, keeps: bool) -> str:
    """One header line: what diffusers keeps in float32 for the class and whether sporch does."""
    keep = kept_in_float32(class_name)
    if not keep:
        return f"# {class_name}: diffusers keeps no module in float32; both sides run every parameter in the dtype"
    return (f"# {class_name}: diffusers keeps {', '.join(keep)} in float32 (_keep_in_fp32_modules); sporch's "
            f"build_transformer {'keeps them too' if keeps else 'casts them to the run dtype'} (the sporch rows)")


def peak_step_mib(step: Callable[[], Any], device) -> float | None:
    """Peak memory one call of ``step`` allocates above what is allocated before it (MiB);
    None off CUDA."""
    import torch

    if device.type != "cuda":
        return None
    sync(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    step()
    sync(device)
    return (torch.cuda.max_memory_allocated(device) - base) / 2**20


def profile_top(step: Callable[[], Any], device, rows: int = 15) -> str:
    """torch.profiler's table of one call of ``step``: the ``rows`` ops with the most device
    (or, on the CPU, self CPU) time."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sync(device)
    with profile(activities=acts) as prof:
        step()
        sync(device)
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    return prof.key_averages().table(sort_by=key, row_limit=rows)


def _driver() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def machine_line(device) -> str:
    """``# device ..., driver ..., torch ..., CUDA ..., cuDNN ...``"""
    import torch

    if device.type != "cuda":
        return f"# device: CPU ({os.cpu_count()} cores), torch {torch.__version__} -- smoke run, not a measurement"
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    cap = ".".join(map(str, torch.cuda.get_device_capability(device)))
    return (f"# device: {torch.cuda.get_device_name(device)} (sm {cap}), driver {_driver()}, "
            f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {cudnn}")


def first(out):
    """A diffusers forward's output tensor (``return_dict=False``'s tuple, or ``.sample``)."""
    return out[0] if isinstance(out, (tuple, list)) else getattr(out, "sample", out)


def rel_diff(got, ref) -> float:
    """max |got - ref| / max |ref|, in float32."""
    return float((got.float() - ref.float()).abs().max()) / max(float(ref.float().abs().max()), 1e-30)


def timed_first(step: Callable[[], Any], device) -> tuple[Any, float]:
    """(``step()``'s output, its wall seconds): the first call of compiled blocks compiles them."""
    sync(device)
    start = time.perf_counter()
    out = step()
    sync(device)
    return out, time.perf_counter() - start


def diffusers_compile(model, backend: str, mode: str | None = None) -> str:
    """diffusers' regional compile: ``compile_repeated_blocks``, or where the class declares no
    ``_repeated_blocks`` (SD3, CogVideoX, PixArt in diffusers 0.42) the same call by hand on each
    block of its block lists (``Module.compile``). Returns which of the two it did."""
    from sporch.runtime.models.blocks import block_lists

    if getattr(model, "_repeated_blocks", None):
        model.compile_repeated_blocks(backend=backend, mode=mode)
        return "compile_repeated_blocks"
    for _, blocks in block_lists(model):
        for block in blocks:
            block.compile(backend=backend, mode=mode)
    return "Module.compile per block"


def sporch_hooks(model, ctx, kernel: str):
    """sporch's ``SequenceParallel`` on ``model`` over ``ctx`` (a world of one rank here: what a
    sharded run adds on the critical path, the hooks, the routed attention and sporch's
    kernel ``kernel``), entered per forward as the runtime's runner enters it."""
    from sporch.orchestrator.models.families import require_family
    from sporch.runtime.models.split_plans import diffusers_type, split_plan
    from sporch.runtime.models.sequence_parallel import SequenceParallel

    cls = diffusers_type(type(model))
    return SequenceParallel(model, ctx, split_plan(cls), local_attention=require_family(cls.__name__).local_attention,
                            backend=kernel)


#: the rows :func:`compare_forwards` fills, in order
MODES = ("diffusers eager", "sporch eager", "diffusers compiled", "sporch compiled")


def compare_forwards(theirs, ours, inputs: dict, ctx, kernel: str, device, *, warmup: int, repeat: int,
                     compile: bool = True, backend: str = "inductor", mode: str | None = None,
                     profile: Callable[[Callable[[], Any]], str] | None = None) -> dict[str, dict]:
    """One forward of ``inputs`` through diffusers' model ``theirs`` as diffusers ships it, and
    through ``ours`` (the same weights, sporch's dtypes) with sporch's hooks over ``ctx``; then
    (``compile``) ``theirs`` under diffusers' regional compile and ``ours`` under sporch's
    ``compile_blocks`` (the runtime's ``workload.compile``). Per row of :data:`MODES`: ``ms``
    (median of ``repeat`` after ``warmup``), ``compile_s`` (the first compiled call's extra time),
    ``peak_mib`` (one step's peak allocation above the weights; None off CUDA), ``diff``
    (:func:`rel_diff` against diffusers' eager output), ``how`` (the compile call), and with
    ``profile`` (e.g. :func:`profile_top` with the device bound) ``profile``: its text for one step
    of each row, taken right after the row's timing (the compiled rows: while their code is
    cached)."""
    import torch
    import torch._dynamo

    from sporch.runtime.compile import compile_blocks

    hooks = sporch_hooks(ours, ctx, kernel)

    def diffusers_step():
        return first(theirs(**inputs))

    def sporch_step():
        with hooks:
            return first(ours(**inputs))

    rows: dict[str, dict] = {}

    def measure(name, step, out, compile_s=None, how=None):
        ms = median_ms(step, device, warmup, repeat)
        rows[name] = {"ms": ms, "compile_s": None if compile_s is None else max(0.0, compile_s - ms / 1e3),
                      "peak_mib": peak_step_mib(step, device), "diff": rel_diff(out, ref), "how": how,
                      "profile": profile(step) if profile is not None else None}

    with torch.no_grad():
        ref = diffusers_step()
        measure("diffusers eager", diffusers_step, ref)
        measure("sporch eager", sporch_step, sporch_step())
        if compile:
            how = diffusers_compile(theirs, backend, mode)
            out, secs = timed_first(diffusers_step, device)
            measure("diffusers compiled", diffusers_step, out, secs, how)
            torch._dynamo.reset()  # sporch's compile starts from an empty cache, as in a run
            info = compile_blocks(ours, backend=backend, mode=mode)
            out, secs = timed_first(sporch_step, device)
            measure("sporch compiled", sporch_step, out, secs, f"compile_blocks ({info.blocks} blocks)")
            torch._dynamo.reset()
    return rows
