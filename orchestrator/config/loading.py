"""OmegaConf plumbing shared by cluster and job loading, and the plain path that skips it.

Everything that can go wrong while reading user YAML (syntax, unknown key, wrong type,
broken interpolation, malformed override) becomes a one-line :class:`SporchError` that
names the file and the key.

Importing OmegaConf is most of the CLI's start-up (~50 ms of a ~200 ms dry run). A file that
needs none of it -- no interpolation, no override, every value already of its key's type --
is read by :func:`read_plain` and :func:`plain_typed` instead, to the same typed record (what
OmegaConf would build; tests/config/test_plain_loading.py holds the two equal). Whatever the plain
path cannot vouch for (a ``${...}``, a value OmegaConf would convert or refuse, an unknown key,
a YAML feature OmegaConf reads its own way, a syntax error) makes it answer ``None``, and the
caller takes the OmegaConf path: its result and its error messages are unchanged.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import typing
from pathlib import Path
from typing import Any, Optional, Sequence, TypeVar

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


# -- the plain path: no OmegaConf ---------------------------------------------------------------
class _NotPlain(Exception):
    """The plain path cannot vouch for this document: take the OmegaConf path."""


#: A plain scalar starting with one of these may be read differently by OmegaConf's YAML loader:
#: it drops YAML 1.1's timestamps and adds, after PyYAML's own forms, a YAML 1.2 float form
#: (``1e-3``, ``1_000.5``) for scalars starting with them ...
_OMEGACONF_RESOLVED_FIRST = frozenset("-+0123456789.")
#: ... written with these characters only (or an ``.inf``/``.nan`` spelling): a scalar PyYAML
#: leaves a string and that has another character stays a string for OmegaConf too.
_FLOAT_FORM_CHARS = frozenset("0123456789_.eE+-:")
#: Documents bigger than this go to OmegaConf (which limits how many nodes a document expands to).
_MAX_PLAIN_NODES = 1000
_STR_TAG = "tag:yaml.org,2002:str"
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"
_MERGE_TAG = "tag:yaml.org,2002:merge"


@functools.lru_cache(maxsize=1)
def _plain_loader() -> type:
    """PyYAML's safe loader (libyaml's where PyYAML has it, as OmegaConf's loader uses), made to
    refuse what OmegaConf's loader reads otherwise: plain scalars whose type its extra float form
    or its missing timestamps would change, duplicate keys (OmegaConf refuses them), merge keys."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class PlainLoader(base):  # type: ignore[misc, valid-type]
        def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
            tag = super().resolve(kind, value, implicit)
            if kind is yaml.ScalarNode and implicit[0] and value[:1] in _OMEGACONF_RESOLVED_FIRST and value:
                floatish = set(value) <= _FLOAT_FORM_CHARS or value.lower().lstrip("+-") in (".inf", ".nan")
                if tag == _TIMESTAMP_TAG or (tag == _STR_TAG and floatish):
                    raise _NotPlain(f"plain scalar {value!r}")
            return tag

        def flatten_mapping(self, node: Any) -> Any:
            keys = [k.value for k, _ in node.value]
            if len(set(keys)) != len(keys) or any(k.tag == _MERGE_TAG for k, _ in node.value):
                raise _NotPlain("duplicate or merge key")
            return super().flatten_mapping(node)

    return PlainLoader


def _count_tree(node: Any) -> int:
    """Nodes of a composed document; an anchor used twice (an alias) is refused."""
    import yaml

    seen: set[int] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            raise _NotPlain("alias")
        seen.add(id(n))
        if len(seen) > _MAX_PLAIN_NODES:
            raise _NotPlain("large document")
        if isinstance(n, yaml.SequenceNode):
            stack.extend(n.value)
        elif isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                stack.extend((k, v))
    return len(seen)


def read_plain(path: str | Path) -> Optional[dict]:
    """The top-level mapping of the YAML file ``path`` as plain Python values, exactly as
    OmegaConf's YAML loader reads it, or None (read it with :func:`read_yaml`: the file is
    missing or not a regular file, not UTF-8, not valid YAML, not a mapping, or holds something
    the two loaders might read differently)."""
    if os.environ.get("OMEGACONF_MAX_YAML_EXPANDED_NODES") is not None:
        return None  # OmegaConf's own document-size limit, changed: let it apply it
    try:
        text = read_regular(Path(path)).decode("utf-8")
    except (OSError, NotAFileError, UnicodeDecodeError):
        return None
    try:
        loader = _plain_loader()(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _count_tree(node)
            data = loader.construct_document(node)
        finally:
            loader.dispose()
    except Exception:  # _NotPlain, yaml.YAMLError: OmegaConf's path says it its way
        return None
    return data if isinstance(data, dict) else None


def plain_typed(schema: type[T], data: dict, source: str) -> Optional[T]:
    """``data`` (from :func:`read_plain`, defaults filled in) as the dataclass ``schema``, as
    :func:`to_typed` would type it, or None where OmegaConf might convert, resolve or refuse
    something (a ``${...}`` or ``???`` string, a key the schema lacks, a value not already of its
    key's type but for an int where a float or a string goes). Checked like :func:`to_typed`
    (:func:`check_values`)."""
    try:
        obj = _typed(schema, data)
    except _NotPlain:
        return None
    check_values(obj, source)
    return obj


def _typed(hint: Any, value: Any) -> Any:
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise _NotPlain("not a mapping")
        fields = {f.name: f for f in dataclasses.fields(hint)}
        hints = typing.get_type_hints(hint)
        kw = {}
        for key, item in value.items():
            if not isinstance(key, str) or key not in fields or not fields[key].init:
                raise _NotPlain(f"key {key!r}")
            kw[key] = _typed(hints[key], item)
        return hint(**kw)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:
            return _typed(options[0], value)
        if set(options) == {int, str} and type(value) in (int, str):
            return _typed(type(value), value)
        raise _NotPlain("union")
    if origin is list:
        if not isinstance(value, list):
            raise _NotPlain("not a list")
        return [_typed(args[0], v) for v in value]
    if origin is dict:
        if not isinstance(value, dict) or args[0] is not str:
            raise _NotPlain("not a mapping")
        return {_plain_str(k): _typed(args[1], v) for k, v in value.items()}
    if hint is Any:
        return _any(value)
    if hint is str and type(value) is str:
        return _plain_str(value)
    if hint is str and type(value) is int and abs(value) < 10**18:  # OmegaConf: str(value) (``mem: 0``)
        return str(value)
    if hint is bool and type(value) is bool:
        return value
    if hint is int and type(value) is int:
        return value
    if hint is float and type(value) is float:
        return value
    if hint is float and type(value) is int and abs(value) <= 2**53:  # OmegaConf: float(value)
        return float(value)
    raise _NotPlain(f"{value!r} as {hint}")


def _plain_str(value: Any) -> str:
    if type(value) is not str or "${" in value or value == "???":  # interpolation, OmegaConf's MISSING
        raise _NotPlain(f"string {value!r}")
    return value


def _any(value: Any) -> Any:
    """A value of an ``Any`` key: kept as it is (copied), if OmegaConf keeps it as it is."""
    if isinstance(value, dict):
        return {_plain_str(k): _any(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_any(v) for v in value]
    if type(value) is str:
        return _plain_str(value)
    if value is None or type(value) in (int, float, bool):
        return value
    raise _NotPlain(f"{type(value).__name__} value")


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
