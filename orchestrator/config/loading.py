"""OmegaConf plumbing shared by cluster and job loading.

Everything that can go wrong while reading user YAML (syntax, unknown key, wrong type,
broken interpolation, malformed override) becomes a one-line :class:`SporchError` that
names the file and the key.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence, TypeVar

from sporch.orchestrator.safe_files import NotAFileError, read_regular
from sporch.orchestrator.errors import SporchError

T = TypeVar("T")


def _first_line(text: str) -> str:
    return str(text).strip().splitlines()[0] if str(text).strip() else ""


def _oc_error(err: Exception, source: str) -> SporchError:
    """Translate an OmegaConf error into a one-line SporchError."""
    from omegaconf import errors as oe

    key = getattr(err, "full_key", None) or ""
    msg = _first_line(getattr(err, "msg", None) or str(err))
    where = f"{source}: " if source else ""
    if isinstance(err, oe.ConfigKeyError) and not isinstance(err, oe.InterpolationKeyError):
        parent, _, leaf = key.rpartition(".")
        section = f" in section '{parent}'" if parent else ""
        return SporchError(f"{where}unknown key '{key}'{section} ({msg}); check the spelling in docs")
    if isinstance(err, (oe.InterpolationResolutionError,)):
        return SporchError(f"{where}cannot resolve interpolation in '{key}': {msg}")
    if isinstance(err, oe.ValidationError):
        return SporchError(f"{where}wrong type for '{key}': {msg}")
    return SporchError(f"{where}invalid configuration at '{key}': {msg}")


def read_yaml(path: str | Path) -> Any:
    """Parse a YAML file into an OmegaConf DictConfig (not yet typed)."""
    from omegaconf import DictConfig, OmegaConf

    p = Path(path)
    try:
        raw = read_regular(p)  # a regular file only: a FIFO would block, a device never end
    except (FileNotFoundError, NotADirectoryError):
        raise SporchError(f"{p}: no such file") from None
    except NotAFileError as e:
        raise SporchError(str(e)) from None
    except OSError as e:
        raise SporchError(f"{p}: cannot read ({e.strerror or e})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SporchError(f"{p}: not UTF-8 text") from None
    try:
        cfg = OmegaConf.create(text) if text.strip() else OmegaConf.create({})
    except Exception as e:  # yaml.YAMLError and OmegaConf's own errors
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or _first_line(str(e))
        loc = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        raise SporchError(f"{p}{loc}: YAML syntax error: {problem}") from e
    if not isinstance(cfg, DictConfig):
        raise SporchError(f"{p}: expected a mapping of keys at the top level, got a {type(cfg).__name__}")
    return cfg


def parse_overrides(overrides: Sequence[str]) -> Any:
    """``["parallel.ring=2", ...]`` -> DictConfig. Malformed items raise SporchError."""
    from omegaconf import OmegaConf

    for item in overrides:
        key, eq, _ = item.partition("=")
        if not eq or not key.strip() or " " in key.strip():
            raise SporchError(f"override {item!r} is not KEY=VALUE (for example parallel.ring=2)")
    try:
        return OmegaConf.from_dotlist(list(overrides))
    except Exception as e:
        raise SporchError(f"bad override: {_first_line(str(e))}") from e


def to_typed(schema: type[T], layers: Sequence[tuple[Any, str]]) -> T:
    """Merge ``layers`` (config, source-name) onto the structured ``schema`` in struct mode
    and return the resolved dataclass instance (interpolations resolved)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    merged = OmegaConf.structured(schema)
    source = ""
    try:
        for cfg, source in layers:
            merged = OmegaConf.merge(merged, cfg)
        source = layers[0][1] if layers else ""
        obj = OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:
        raise _oc_error(e, source) from e
    check_values(obj, layers[0][1] if layers else "")
    return obj  # type: ignore[return-value]


#: Integers beyond this cannot be a count, a size or a seed (and overflow floats downstream).
MAX_INT = 2**63 - 1


def check_values(obj: Any, source: str, key: str = "") -> None:
    """What OmegaConf's typing lets through: NaN/inf floats, integers past 64 bits, and lists or
    mappings as the values of a ``Dict[str, str]`` (an env value must be one word, not '[1, 2]')."""
    import math

    where = f"{source}: " if source else ""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        hints = _hints(type(obj))
        for f in dataclasses.fields(obj):
            sub = f"{key}.{f.name}" if key else f.name
            value = getattr(obj, f.name)
            if isinstance(value, dict) and _is_str_dict(hints.get(f.name)):
                for k, v in value.items():
                    if isinstance(v, (dict, list, tuple)):
                        raise SporchError(f"{where}'{sub}.{k}' must be a single value (a string or a number), "
                                          f"got a {'list' if isinstance(v, (list, tuple)) else 'mapping'}")
            check_values(value, source, sub)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            check_values(v, source, f"{key}.{k}" if key else str(k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            check_values(v, source, f"{key}[{i}]")
    elif isinstance(obj, float) and not math.isfinite(obj):
        raise SporchError(f"{where}'{key}' must be a finite number, got {obj}")
    elif isinstance(obj, int) and not isinstance(obj, bool) and abs(obj) > MAX_INT:
        raise SporchError(f"{where}'{key}' is too large ({len(str(abs(obj)))} digits); use a realistic value")


def _hints(cls: type) -> dict:
    import typing

    try:
        return typing.get_type_hints(cls)
    except Exception:  # unresolvable annotations: no per-field hints
        return {}


def _is_str_dict(hint: Any) -> bool:
    import typing

    return typing.get_origin(hint) is dict and typing.get_args(hint)[1:] == (str,)


def to_plain(obj: Any) -> Any:
    """Dataclass (possibly nested) -> plain JSON-able dict/list values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    return obj
