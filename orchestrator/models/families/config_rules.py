"""What a family's config.json may hold: each key of its diffusers class with the type and range of
its value (:class:`Rule`), and the class's own rules across keys (a family's ``config_rules``:
RoPE axes summing to the head width, packed channels, ...). One checker for every family
(:func:`config_problem`), used by ``sporch plan``, ``sporch inspect`` and the runtime's loader, so
a folder the class would refuse (or silently mis-size) is refused in one line naming the key.

Standard library only. Bookkeeping keys (``_class_name``, ``_diffusers_version``, ...) are
skipped; a key the family does not declare is refused: it may change the computation, and sporch
never ignores one. tests/runtime/models/test_config_rules.py checks that every family declares
exactly its class's constructor arguments.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional

__all__ = ["MAX_SIZE", "BOOKKEEPING", "Rule", "Int", "Number", "Flag", "Ints", "Text", "Fixed", "Unchecked", "check_value",
           "key_problem", "head_dim_problem", "rope_axes_problem"]

#: The largest width, depth, length or channel count a config may state (a bound against typos and
#: overflow: the largest published models are far below it).
MAX_SIZE = 1 << 20
#: diffusers' and the releases' bookkeeping keys: no effect on the computation.
BOOKKEEPING = ("_class_name", "_diffusers_version", "_name_or_path", "_use_default_values", "model_type",
               "__module__", "architectures")


@dataclass(frozen=True)
class Rule:
    """One key's value: ``kind`` int | number | flag | ints | text | unchecked; ints and numbers
    from ``minimum`` to ``maximum`` (numbers: strictly above ``minimum`` when ``open_min``); ``ints``
    a list of ``length`` of them (None: any length) or, with ``scalar``, one int as well; ``text``
    one of ``choices`` (empty: any string); ``optional``: null is allowed."""

    kind: str
    minimum: float = 1
    maximum: float = MAX_SIZE
    optional: bool = False
    length: Optional[int] = None
    scalar: bool = False
    choices: tuple = ()
    open_min: bool = False
    fixed: Any = None


def Int(minimum: int = 1, maximum: int = MAX_SIZE, optional: bool = False) -> Rule:
    return Rule("int", minimum, maximum, optional)


def Number(minimum: float = -MAX_SIZE, maximum: float = MAX_SIZE, optional: bool = False,
           open_min: bool = False) -> Rule:
    return Rule("number", minimum, maximum, optional, open_min=open_min)


def Flag(optional: bool = False) -> Rule:
    return Rule("flag", optional=optional)


def Ints(length: Optional[int] = None, minimum: int = 1, scalar: bool = False, optional: bool = False) -> Rule:
    return Rule("ints", minimum, MAX_SIZE, optional, length=length, scalar=scalar)


def Text(*choices: Optional[str], optional: bool = False) -> Rule:
    return Rule("text", optional=optional or None in choices, choices=tuple(c for c in choices if c is not None))


def Fixed(value: Any) -> Rule:
    """A key whose value the class computes only as ``value`` (an older shared class's option the
    class sporch runs does not take: PixArt's legacy ``Transformer2DModel`` keys)."""
    return Rule("fixed", optional=value is None, fixed=value)


def Unchecked() -> Rule:
    """A key passed to the class as it is (its type is the class's business, no size depends on it)."""
    return Rule("unchecked", optional=True)


def _a(value: Any) -> str:
    """``value``'s kind as config.json says it: "a string", "a number", "a boolean", "a list", "null"."""
    if value is None:
        return "null"
    kinds = {bool: "a boolean", str: "a string", int: "an integer", float: "a number", list: "a list", dict: "an object"}
    return kinds.get(type(value), f"a {type(value).__name__}")


def _int_problem(value: Any, rule: Rule) -> Optional[str]:
    if isinstance(value, bool) or not isinstance(value, int):
        return f"must be an integer from {int(rule.minimum)} to {int(rule.maximum)}, not {_a(value)}"
    if not rule.minimum <= value <= rule.maximum:
        return f"must be an integer from {int(rule.minimum)} to {int(rule.maximum)}"
    return None


def check_value(rule: Rule, value: Any) -> Optional[str]:
    """Why ``value`` breaks ``rule`` (a clause: "must be ..."), or None."""
    if rule.kind == "fixed":
        same = type(value) is type(rule.fixed) and value == rule.fixed
        return None if same else f"must be {json_text(rule.fixed)} (the only value the class computes)"
    if value is None:
        return None if rule.optional else "must be set (null is not a value of this key)"
    if rule.kind == "unchecked":
        return None
    if rule.kind == "int":
        return _int_problem(value, rule)
    if rule.kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"must be a number, not {_a(value)}"
        if not math.isfinite(value):
            return "must be a finite number"
        low_ok = value > rule.minimum if rule.open_min else value >= rule.minimum
        if not low_ok or value > rule.maximum:
            return f"must be {'above' if rule.open_min else 'at least'} {rule.minimum:g} and at most {rule.maximum:g}"
        return None
    if rule.kind == "flag":
        return None if isinstance(value, bool) else "must be true or false"
    if rule.kind == "ints":
        if rule.scalar and isinstance(value, int) and not isinstance(value, bool):
            return _int_problem(value, rule)
        n = f"{rule.length} " if rule.length is not None else ""
        if not isinstance(value, (list, tuple)) or (rule.length is not None and len(value) != rule.length):
            return f"must be a list of {n}integers" + (" (or one integer)" if rule.scalar else "")
        for v in value:
            why = _int_problem(v, rule)
            if why:
                return f"must be a list of {n}integers from {int(rule.minimum)} to {int(rule.maximum)}"
        return None
    if rule.kind == "text":
        if not isinstance(value, str):
            return f"must be a string, not {_a(value)}"
        if rule.choices and value not in rule.choices:
            return f"must be one of {', '.join(map(repr, rule.choices))}"
        return None
    raise ValueError(f"unknown rule kind {rule.kind!r}")


def json_text(value: Any) -> str:
    """``value`` as config.json writes it (null, true, 3)."""
    return {None: "null", True: "true", False: "false"}.get(value, repr(value)) if not isinstance(value, (int, float)) \
        or isinstance(value, bool) else repr(value)


def key_problem(keys: Mapping[str, Rule], config: Mapping[str, Any], class_name: str) -> Optional[tuple[str, str]]:
    """(key, why) for the first key of ``config`` that ``keys`` does not declare or whose value
    breaks its rule; None when every key is fine."""
    for key, value in config.items():
        if key.startswith("_") or key in BOOKKEEPING:
            continue
        rule = keys.get(key)
        if rule is None:
            return key, (f"is not a {class_name} config key sporch knows; it may change the computation, so the "
                         "checkpoint is refused (a newer diffusers' key: upgrade sporch)")
        why = check_value(rule, value)
        if why is not None:
            return key, f"{value!r} {why}"
    return None


def head_dim_problem(config: Mapping[str, Any], key: str = "attention_head_dim",
                     default: Optional[int] = None) -> Optional[tuple[str, str]]:
    """A head width the rotary embedding cannot rotate (an odd number of channels)."""
    hd = config.get(key, default)
    if isinstance(hd, int) and hd % 2:
        return key, f"{hd} must be even (rotary position embedding rotates channel pairs)"
    return None


def rope_axes_problem(config: Mapping[str, Any], axes_key: str, default_axes: tuple,
                      head_key: str = "attention_head_dim", default_head: Optional[int] = None) -> Optional[tuple[str, str]]:
    """RoPE axes that are not even numbers summing to the head width (diffusers' rotary embedding
    concatenates one table per axis and rotates channel pairs)."""
    axes, hd = config.get(axes_key, default_axes), config.get(head_key, default_head)
    if axes is None or hd is None:
        return None
    if sum(axes) != hd or any(a % 2 for a in axes):
        return axes_key, f"{list(axes)} must be even numbers summing to {head_key} {hd}"
    return None
