"""The rules a diffusers class's own RoPE and heads impose on its config.json, read without torch
(standard library only), so ``sporch plan`` and ``sporch inspect`` refuse a config the class
would reject (or compute wrongly) before anything runs, in one line naming the key.

The families call these from their ``shape(config)``; each raises :class:`ClassRuleError` (a
ValueError: ``checkpoint_config.model_from_config`` adds the file). Only the rules the classes'
rotary embeddings and head splits rely on live here (head width, RoPE axes, query heads per key
head); the config's types and ranges in general are the config reader's (checkpoint_config.py).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

__all__ = ["ClassRuleError", "integer", "head_width", "rope_axes", "heads_per_kv_head"]


class ClassRuleError(ValueError):
    """A config value the class's own rules refuse (one line naming the key)."""


def integer(config: Mapping[str, Any], key: str, default: int) -> int:
    """``config[key]`` (or ``default``) as a positive integer."""
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ClassRuleError(f"{key} {value!r} must be a positive integer")
    return value


def head_width(config: Mapping[str, Any], key: str, default: int, *, multiple: int = 2, why: str = "") -> int:
    """The head width ``config[key]``, a multiple of ``multiple`` (2: RoPE rotates channel pairs;
    4: pairs over two axes of equal width, as CogView4's)."""
    width = integer(config, key, default)
    if width % multiple:
        raise ClassRuleError(f"{key} {width} must be a multiple of {multiple}"
                             f"{': ' + why if why else ' (RoPE rotates channel pairs)'}")
    return width


def rope_axes(config: Mapping[str, Any], key: str, default: Sequence[int], head_dim: int, *,
              head_key: str = "the head width") -> list[int]:
    """The RoPE axes widths ``config[key]``: even numbers summing to ``head_dim``."""
    axes = config.get(key, default)
    if not isinstance(axes, (list, tuple)) or not axes or any(
            isinstance(a, bool) or not isinstance(a, int) or a < 0 for a in axes):
        raise ClassRuleError(f"{key} {axes!r} must be a list of whole numbers (the RoPE width of each axis)")
    if any(a % 2 for a in axes):
        raise ClassRuleError(f"{key} {list(axes)} must hold even numbers (RoPE rotates channel pairs)")
    if sum(axes) != head_dim:
        raise ClassRuleError(f"{key} {list(axes)} sums to {sum(axes)}, not {head_key} {head_dim}: each head's "
                             "channels are the RoPE axes side by side")
    return list(axes)


def heads_per_kv_head(heads: int, kv_heads: int, *, heads_key: str, kv_key: str) -> int:
    """Query heads per key/value head (grouped-query attention): ``kv_heads`` must divide ``heads``."""
    if heads % kv_heads:
        raise ClassRuleError(f"{kv_key} {kv_heads} must divide {heads_key} {heads} (each key/value head serves a "
                             "whole group of query heads)")
    return heads // kv_heads
