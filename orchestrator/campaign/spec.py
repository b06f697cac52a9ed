"""The campaign file (``campaign.yaml``): typed with OmegaConf like job specs.

Top-level keys: ``name``, ``output_dir``, ``base`` (a job spec inline, or a path to a job
YAML relative to the campaign file), ``matrix`` (what varies), ``run`` (array throttle,
retries, packing) ``references`` (expected values per metric) and ``compare_outputs`` (the reference
point of the same-output metrics). docs/campaigns.md is the reference.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from sporch.orchestrator.campaign.references import parse_references
from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.config.job_spec import CacheSpec
from sporch.orchestrator.config.loading import read_yaml, to_typed
from sporch.orchestrator.config.presets import PRESETS
from sporch.orchestrator.contract.durations import is_valid_time
from sporch.orchestrator.contract.numbers import digits_value
from sporch.orchestrator.contract.parallel import DIMS
from sporch.orchestrator.contract.vocab import ATTENTION_PRECISIONS, DTYPES, MAX_NAME, QUANT_MODES
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.slurm.directives import check_directive_path

#: Keys a shape entry may have (a video/image shape, or a sequence length).
SHAPE_KEYS = ("frames", "height", "width", "seq_len")
#: Special values of ``matrix.layouts``.
LAYOUT_MODES = ("all", "auto")
#: Special value of ``matrix.nodes``.
POW2 = "pow2"
#: The most points one campaign may have (docs/campaigns.md); a bigger sweep is several campaigns.
MAX_POINTS = 10_000


@dataclass
class ShapeSpec:
    frames: Optional[int] = None
    height: Optional[int] = None
    width: Optional[int] = None
    seq_len: Optional[int] = None


@dataclass
class RecipeSpec:
    """One value of ``matrix.recipes``: a name (the report's ``recipe`` column) and the job keys
    it sets, dotted (``{workload.steps: 4, workload.shift: 5.0, model.lora: [...]}``); the recipe
    named ``base`` sets nothing and is the full-quality reference."""

    name: str = ""
    set: Dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LayoutEntry:
    """One value of a ``matrix.layouts`` list: the parallel dimensions it asks for (a positive
    integer or "auto" each) and, when given, the only GPU count it applies to (``gpus``): on a
    descriptor (or node count) of another size the entry makes no point, so one campaign can run
    a table whose layout changes with the GPU count (Wan2.1's 8-GPU row is ring 8, its others
    Ulysses)."""

    dims: Dict[str, Any]
    gpus: Optional[int] = None
    #: its place in the file's list (``matrix.layouts[index]``), for messages; not part of what it asks for
    index: int = field(default=0, compare=False)

    def applies_to(self, gpus: int) -> bool:
        return self.gpus is None or self.gpus == gpus


@dataclass
class MatrixSpec:
    clusters: List[str] = field(default_factory=list)
    nodes: Any = None  # list of ints, "pow2", or unset (the base job's / the cluster's nodes)
    layouts: Any = None  # list of {dp,cfg,ring,ulysses}, "all", "auto", or unset (the base job's)
    presets: List[str] = field(default_factory=list)  # empty: the base job's model
    shapes: List[ShapeSpec] = field(default_factory=list)  # empty: the base job's shape
    dtypes: List[str] = field(default_factory=list)  # empty: the base job's dtype
    #: workload.cache values (docs/performance.md, "Step caching"); empty: the base job's
    caches: List[CacheSpec] = field(default_factory=list)
    #: model.quant values (docs/performance.md, "Low-bit weights"); empty: the base job's
    quants: List[str] = field(default_factory=list)
    #: workload.attention_precision values (exact | lossy); empty: the base job's
    attention_precisions: List[str] = field(default_factory=list)
    #: workload.steps values; empty: the base job's
    steps: List[int] = field(default_factory=list)
    #: named sets of job overrides (a few-step recipe: LoRA, steps, shift, guidance); empty: none
    recipes: List[RecipeSpec] = field(default_factory=list)
    repeats: int = 1  # independent runs of every point


@dataclass
class RunSpec:
    throttle: Optional[int] = None  # at most this many array tasks at once (sbatch --array=...%N)
    retries: int = 2  # failed or lost points are resubmitted up to this many times
    #: groups of one cluster run one after another (each array waits for the one before it,
    #: ``--dependency=afterany``): with ``throttle: 1``, one point at a time on the cluster
    serial: bool = False
    #: the points of a group that share nodes x GPUs run inside one array task (one launch, one
    #: weight load, the process groups re-formed per layout); false: one array task per point
    pack: bool = True
    #: at most this many points in one pack (unset: no count limit)
    pack_size: Optional[int] = None
    #: a pack's time limit is its points' limits added up, at most this (a Slurm time): keep it
    #: under the partition's MaxTime
    pack_time: str = "08:00:00"


@dataclass
class ReferenceSpec:
    cluster: str = "*"  # a cluster name or glob
    where: Dict[str, Any] = field(default_factory=dict)  # point parameters that must match
    metrics: Dict[str, Any] = field(default_factory=dict)  # metric -> [value, lower, upper, unit]


@dataclass
class CompareOutputsSpec:
    #: the point generate outputs are compared with: a point id or a layout (``1x1x1x1``);
    #: unset: the point with the fewest GPUs of each cluster/preset/shape/dtype group
    reference: Optional[str] = None


@dataclass
class CampaignSpec:
    name: str = ""
    output_dir: str = "campaigns"
    base: Any = None  # inline job mapping, or a path to a job YAML
    matrix: MatrixSpec = field(default_factory=MatrixSpec)
    run: RunSpec = field(default_factory=RunSpec)
    references: List[ReferenceSpec] = field(default_factory=list)
    compare_outputs: CompareOutputsSpec = field(default_factory=CompareOutputsSpec)
    source: str = ""  # the file it was loaded from


@dataclass
class Campaign:
    """A loaded campaign: the spec, its base job (typed) and the parsed references."""

    spec: CampaignSpec
    base: Any  # sporch.orchestrator.config.job_spec.JobSpec
    layouts: Any  # "all" | "auto" | None | list of dicts (dims: int or "auto")
    nodes: Any  # "pow2" | None | list of ints
    references: list  # list of sporch.orchestrator.campaign.references.Reference

    @property
    def name(self) -> str:
        return self.spec.name

    def directory(self) -> Path:
        """Default campaign directory: ``<output_dir>/<name>`` (relative to the working dir)."""
        return Path(self.spec.output_dir) / self.spec.name


def load_campaign(path: str | Path) -> Campaign:
    """Read, type-check and validate ``path``. Errors are one-line :class:`SporchError`."""
    p = Path(path)
    cfg = read_yaml(p)
    if "name" not in cfg:
        cfg["name"] = p.stem
    spec = to_typed(CampaignSpec, [(cfg, str(p))])
    spec.source = str(p.resolve())
    return validate(spec, str(p))


def campaign_from_dict(data: dict[str, Any], source: str = "<dict>") -> Campaign:
    """A Campaign from a plain dict (tests, programmatic use); relative base paths resolve
    against the working directory."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(dict(data))
    if "name" not in cfg:
        cfg["name"] = "campaign"
    return validate(to_typed(CampaignSpec, [(cfg, source)]), source)


def matrix_size(m: MatrixSpec, layouts: Any, nodes: Any) -> int:
    """Points of the matrix before any is skipped, counting an axis given by name (``layouts: all``,
    ``nodes: pow2``) or left unset as one value."""
    size = len(m.clusters) * max(1, len(m.presets)) * max(1, len(m.shapes)) * max(1, len(m.dtypes)) * m.repeats
    for lever in (m.caches, m.quants, m.attention_precisions, m.steps, m.recipes):
        size *= max(1, len(lever))
    for axis in (layouts, nodes):
        if isinstance(axis, (list, tuple)):
            size *= max(1, len(axis))
    return size


def _bad(source: str, key: str, msg: str) -> SporchError:
    return SporchError(f"{source}: '{key}' {msg}")


def validate(spec: CampaignSpec, source: str) -> Campaign:
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", spec.name or ""):
        raise _bad(source, "name", f"must be letters, digits, '-', '_' or '.', got {spec.name!r}")
    if set(spec.name) == {"."}:  # the campaign directory is <output_dir>/<name>
        raise _bad(source, "name", f"{spec.name!r} is not a folder name of its own; use letters or digits")
    if len(spec.name) > MAX_NAME:
        raise _bad(source, "name", f"is {len(spec.name)} characters long; use at most {MAX_NAME}")
    check_directive_path(f"{source}: 'output_dir'", spec.output_dir)
    m = spec.matrix
    if not m.clusters:
        raise _bad(source, "matrix.clusters", "needs at least one cluster name (see `sporch clusters list`)")
    for key in ("clusters", "presets", "dtypes"):
        for entry in getattr(m, key):
            if not isinstance(entry, str):
                raise _bad(source, f"matrix.{key}", f"entries must be names (text), got {entry!r}")
    if m.repeats < 1:
        raise _bad(source, "matrix.repeats", f"must be >= 1, got {m.repeats}")
    if m.repeats > MAX_POINTS:
        raise _bad(source, "matrix.repeats", f"is {m.repeats}; a campaign has at most {MAX_POINTS} points")
    if spec.run.throttle is not None and spec.run.throttle < 1:
        raise _bad(source, "run.throttle", f"must be >= 1, got {spec.run.throttle}")
    if spec.run.pack_size is not None and spec.run.pack_size < 1:
        raise _bad(source, "run.pack_size", f"must be >= 1, got {spec.run.pack_size}")
    if not is_valid_time(str(spec.run.pack_time)):
        raise _bad(source, "run.pack_time", f"must be a Slurm time such as 08:00:00, got {spec.run.pack_time!r}")
    if spec.run.retries < 0:
        raise _bad(source, "run.retries", f"must be >= 0, got {spec.run.retries}")
    for d in m.dtypes:
        if d not in DTYPES:
            raise _bad(source, "matrix.dtypes", f"entry {d!r} is not one of {', '.join(DTYPES)}")
    for i, s in enumerate(m.shapes):
        if s.seq_len is None and (s.height is None or s.width is None):
            raise _bad(source, f"matrix.shapes[{i}]", "needs height and width (and frames for video), or seq_len")
        if s.seq_len is not None and any(getattr(s, k) is not None for k in ("frames", "height", "width")):
            raise _bad(source, f"matrix.shapes[{i}]", "gives seq_len and frames/height/width; give one of them")
        for k in SHAPE_KEYS:
            v = getattr(s, k)
            if v is not None and v < 1:
                raise _bad(source, f"matrix.shapes[{i}].{k}", f"must be >= 1, got {v}")
    _validate_levers(m, source)
    if m.presets:
        for name in m.presets:
            if name.strip().lower() not in PRESETS:
                raise _bad(source, "matrix.presets", f"unknown preset {name!r}; presets: {', '.join(PRESETS)}")
    layouts, nodes = _parse_layouts(m.layouts, source), _parse_nodes(m.nodes, source)
    size = matrix_size(m, layouts, nodes)
    if size > MAX_POINTS:
        raise _bad(source, "matrix", f"gives {size} points (axes multiplied, times repeats); a campaign has at most "
                   f"{MAX_POINTS}: split it or shorten an axis")
    references = parse_references(spec.references, source)
    return Campaign(spec=spec, base=_load_base(spec, source), layouts=layouts, nodes=nodes, references=references)


def _validate_levers(m: MatrixSpec, source: str) -> None:
    """The speed-lever axes: known values, no repeats, recipes with names and dotted keys."""
    for key, allowed in (("quants", QUANT_MODES), ("attention_precisions", ATTENTION_PRECISIONS)):
        values = getattr(m, key)
        for v in values:
            if v not in allowed:
                raise _bad(source, f"matrix.{key}", f"entry {v!r} is not one of {', '.join(allowed)}")
        if len(set(values)) != len(values):
            raise _bad(source, f"matrix.{key}", f"repeats a value: {values}")
    for v in m.steps:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise _bad(source, "matrix.steps", f"entries must be integers >= 1, got {v!r}")
    if len(set(m.steps)) != len(m.steps):
        raise _bad(source, "matrix.steps", f"repeats a value: {m.steps}")
    names = []
    for i, r in enumerate(m.recipes):
        if not re.fullmatch(r"[A-Za-z0-9_.\-]+", r.name or ""):
            raise _bad(source, f"matrix.recipes[{i}].name", f"must be letters, digits, '-', '_' or '.', got {r.name!r}")
        if r.name in names:
            raise _bad(source, f"matrix.recipes[{i}].name", f"{r.name!r} is given twice")
        names.append(r.name)
        for key in r.set:
            if not re.fullmatch(r"(model|workload|parallel|pipeline)\.[A-Za-z_][\w.]*", str(key)):
                raise _bad(source, f"matrix.recipes[{i}].set", f"keys are dotted job keys such as workload.steps, "
                           f"got {key!r}")
        if r.name == "base" and r.set:
            raise _bad(source, f"matrix.recipes[{i}]", "'base' is the unchanged job (the reference); give it no keys")


def _load_base(spec: CampaignSpec, source: str):
    """The base job, typed and validated. Without a shape of its own it takes the matrix's
    first shape (every point sets its shape anyway)."""
    from omegaconf import DictConfig, OmegaConf

    base, path = spec.base, None
    if base is None:
        raise _bad(source, "base", "is missing: give a job spec inline (model:, workload: ...) or a path to a job YAML")
    if isinstance(base, str):
        folder = Path(spec.source).parent if spec.source else Path.cwd()
        path = Path(base).expanduser()
        path = path if path.is_absolute() else folder / path
        if not path.is_file():
            raise _bad(source, "base", f"job file {base!r} not found (relative paths start at {folder})")
        base = read_yaml(path)
    if not isinstance(base, (dict, DictConfig)):
        raise _bad(source, "base", f"must be a job mapping or a path, got {type(base).__name__}")
    data = OmegaConf.to_container(base) if isinstance(base, DictConfig) else copy.deepcopy(dict(base))
    data.setdefault("name", path.stem if path else spec.name)
    workload = data.setdefault("workload", {}) or {}
    if spec.matrix.shapes and not any(workload.get(k) is not None for k in SHAPE_KEYS):
        first = spec.matrix.shapes[0]
        workload.update({k: getattr(first, k) for k in SHAPE_KEYS if getattr(first, k) is not None})
        data["workload"] = workload
    job = job_from_dict(data, str(path) if path else f"{source}: base")
    job.source = str(path.resolve()) if path else ""
    return job


def _positive_int(value: Any) -> Optional[int]:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and value >= 1:
        return value
    if isinstance(value, str):
        number = digits_value(value)
        return number if number is not None and number >= 1 else None
    return None


def _parse_nodes(value: Any, source: str) -> Any:
    if value is None or value == POW2:
        return value
    items = value if isinstance(value, (list, tuple)) else [value]
    out: list[int] = []
    for v in items:
        n = _positive_int(v)
        if n is None:
            raise _bad(source, "matrix.nodes", f"must be a list of positive integers or '{POW2}', got {v!r}")
        if n not in out:
            out.append(n)
    return out


def _parse_layouts(value: Any, source: str) -> Any:
    if value is None or value in LAYOUT_MODES:
        return value
    if isinstance(value, str):
        raise _bad(source, "matrix.layouts", f"must be a list of {{dp,cfg,ring,ulysses}}, 'all' or 'auto', got {value!r}")
    out: list[LayoutEntry] = []
    for i, entry in enumerate(value):
        if not hasattr(entry, "items"):
            raise _bad(source, f"matrix.layouts[{i}]", f"must be a mapping like {{ring: 2, ulysses: 4}}, got {entry!r}")
        lay: dict[str, Any] = {}
        gpus: Optional[int] = None
        for k, v in entry.items():
            if k == "gpus":
                gpus = _positive_int(v)
                if gpus is None:
                    raise _bad(source, f"matrix.layouts[{i}].gpus", f"must be a positive integer, got {v!r}")
                continue
            if k not in DIMS:
                raise _bad(source, f"matrix.layouts[{i}]", f"unknown dimension {k!r}; use {', '.join(DIMS)} (or gpus)")
            if v == "auto":
                lay[k] = "auto"
            elif _positive_int(v) is not None:
                lay[k] = _positive_int(v)
            else:
                raise _bad(source, f"matrix.layouts[{i}].{k}", f"must be a positive integer or 'auto', got {v!r}")
        if not lay:
            raise _bad(source, f"matrix.layouts[{i}]", "is empty; give at least one of dp, cfg, ring, ulysses")
        if gpus is not None and len(lay) == len(DIMS) and "auto" not in lay.values():
            asked = math.prod(lay.values())
            if asked != gpus:
                raise _bad(source, f"matrix.layouts[{i}]", f"asks for {asked} GPUs but says gpus: {gpus}; "
                           "drop gpus or make the dimensions multiply to it")
        parsed = LayoutEntry(dims=lay, gpus=gpus, index=i)
        if parsed not in out:
            out.append(parsed)
    if not out:
        raise _bad(source, "matrix.layouts", "is an empty list; leave it out to use the base job's layout")
    return out
