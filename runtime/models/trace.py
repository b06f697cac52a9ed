"""What a diffusers transformer's forward passes where: the evidence a split plan is derived from
(``derive.py``).

:func:`trace` runs one unsharded forward of a (tiny) model with hooks on every top-level module
and on every block of its top-level ``ModuleList`` s (the block stacks), and records, in call
order, each call's bound arguments and output (:class:`Call`), the attention modules' calls, and
the order in which the forward concatenates image and text tokens (``torch.cat`` of one tensor of
``image`` tokens and one of ``text`` tokens along their token dimension: which stream comes first
in a joint sequence). ``perturb``: a module whose output gets noise added (every floating-point
tensor in it), so a second trace shows which later arguments depend on that output.

Nothing here splits anything: the forward runs as diffusers ships it.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

import torch
from torch.overrides import TorchFunctionMode

from sporch.runtime.models.sequence_parallel import is_attention

__all__ = ["Call", "Trace", "trace", "tensors_in", "block_lists"]

_CATS = {torch.cat, torch.concat, torch.concatenate}


@dataclass
class Call:
    """One module call of the forward: ``name`` (``"rope"``, ``"transformer_blocks.3"``),
    ``block_list`` (``"transformer_blocks"`` for a block of a top-level ModuleList, else None),
    ``order`` (its position among every recorded call), bound ``args`` and ``output``."""

    name: str
    block_list: Optional[str]
    order: int
    args: dict[str, Any]
    output: Any


@dataclass
class Trace:
    """One forward's record: module ``calls`` and ``attention`` calls (order, module name) in
    call order, ``cats`` (the kinds, ``image`` / ``text``, of two-tensor concatenations along
    their token dimension, in order), the model's ``output`` (its first tensor), and the token
    counts of the inputs: ``image`` and ``text``."""

    image: int
    text: int
    calls: list[Call] = field(default_factory=list)
    attention: list[tuple[int, str]] = field(default_factory=list)
    cats: list[tuple[str, str]] = field(default_factory=list)
    output: Optional[torch.Tensor] = None

    def named(self, name: str) -> list[Call]:
        return [c for c in self.calls if c.name == name]


def block_lists(model: torch.nn.Module) -> list[str]:
    """The names of the model's top-level ``ModuleList`` s (its block stacks)."""
    return [n for n, m in model.named_children() if isinstance(m, torch.nn.ModuleList)]


def tensors_in(value: Any, path: tuple = ()) -> Iterator[tuple[tuple, torch.Tensor]]:
    """(path, tensor) for every tensor in ``value`` (a tensor, or tuples / lists of them):
    ``()`` for a tensor, ``(i,)`` for element i of a tuple."""
    if torch.is_tensor(value):
        yield path, value
    elif isinstance(value, (tuple, list)):
        for i, v in enumerate(value):
            yield from tensors_in(v, path + (i,))


class _Cats(TorchFunctionMode):
    """Records the order of image and text tokens in two-tensor concatenations."""

    def __init__(self, record: Trace) -> None:
        super().__init__()
        self.record = record

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _CATS:
            tensors = args[0] if args else kwargs.get("tensors", kwargs.get("input"))
            dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
            if isinstance(tensors, (list, tuple)) and len(tensors) == 2 and all(torch.is_tensor(t) for t in tensors):
                kinds = tuple(_kind(t, dim, self.record) for t in tensors)
                if set(kinds) == {"image", "text"}:
                    self.record.cats.append(kinds)
        return func(*args, **kwargs)


def _kind(t: torch.Tensor, dim: int, record: Trace) -> Optional[str]:
    if t.dim() == 0:
        return None
    n = t.shape[dim]
    return "image" if n == record.image else "text" if n == record.text else None


def _first_tensor(out: Any) -> torch.Tensor:
    if torch.is_tensor(out):
        return out
    if isinstance(out, (tuple, list)):
        return _first_tensor(out[0])
    return out.sample


def _noisy(value: Any, generator: torch.Generator) -> Any:
    if torch.is_tensor(value):
        if not value.is_floating_point():
            return value
        return value + 0.5 * torch.randn(value.shape, generator=generator, dtype=value.dtype).to(value.device)
    if isinstance(value, (tuple, list)):
        return type(value)(_noisy(v, generator) for v in value)
    return value


@torch.no_grad()
def trace(model: torch.nn.Module, inputs: dict, *, image: int, text: int, perturb: Optional[str] = None) -> Trace:
    """One unsharded forward of ``model(**inputs)``, recorded (module docstring). ``image`` /
    ``text``: the inputs' token counts; ``perturb``: the name of a recorded module whose output
    gets noise added."""
    record = Trace(image=image, text=text)
    counter = [0]
    lists = set(block_lists(model))
    handles = []
    generator = torch.Generator().manual_seed(0)

    def watch(name: str, module: torch.nn.Module, block_list: Optional[str]) -> None:
        params = inspect.signature(module.forward)
        pending: list[Call] = []

        def before(mod, args, kwargs):
            try:
                bound = dict(params.bind_partial(*args, **kwargs).arguments)
            except TypeError:
                bound = {f"arg{i}": a for i, a in enumerate(args)} | dict(kwargs)
            bound = {k: v for k, v in bound.items() if not k.startswith("*")}
            call = Call(name=name, block_list=block_list, order=counter[0], args=bound, output=None)
            counter[0] += 1
            pending.append(call)
            record.calls.append(call)

        def after(mod, args, kwargs, output):
            pending.pop().output = output
            if name == perturb:
                return _noisy(output, generator)
            return None

        handles.append(module.register_forward_pre_hook(before, with_kwargs=True))
        handles.append(module.register_forward_hook(after, with_kwargs=True))

    for name, child in model.named_children():
        if name in lists:
            for i, block in enumerate(child):
                watch(f"{name}.{i}", block, name)
        else:
            watch(name, child, None)

    for name, m in model.named_modules():
        if is_attention(m):
            def seen(mod, args, _name=name):
                record.attention.append((counter[0], _name))
                counter[0] += 1
            handles.append(m.register_forward_pre_hook(seen))
    try:
        with _Cats(record):
            record.output = _first_tensor(model(**inputs))
    finally:
        for h in handles:
            h.remove()
    return record
