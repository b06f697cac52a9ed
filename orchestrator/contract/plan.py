"""The Plan: the one contract between the orchestrator and the runtime.

Plain data, standard library only (the runtime imports this module; it must never pull
in omegaconf, jinja2 or torch). A Plan is frozen and round-trips through JSON:
``Plan.from_json(plan.to_json()) == plan``.

Rank order (fixed, documented, relied on by the runtime):
    rank = ((dp_i * cfg + cfg_i) * ring + ring_i) * ulysses + ulysses_i
dp outermost, then cfg, then ring, then ulysses innermost. With ``ulysses == gpus_per_node``
a Ulysses group is the contiguous ranks of one node, and a ring group takes the same local
GPU index on every node (one ring per NIC rail).

A rank's position in its *sequence group* (the ring x ulysses ranks that share one sample)
is ``ring_i * ulysses + ulysses_i``: ring-major, ulysses-minor. Its sequence chunk is the
chunk with that index.
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator, Optional

from sporch.orchestrator.contract.numbers import is_digits
from sporch.orchestrator.contract.estimates_section import Estimates
from sporch.orchestrator.safe_files import open_regular
from sporch.orchestrator.contract.parallel import DIMS, GROUP_DIMS
from sporch.orchestrator.contract.sections import (
    ClusterSpec,
    HeadsSection,
    JobSection,
    PlacementSection,
    ModelSection,
    SequenceSection,
    WorkloadSection,
    build,
)

#: 2: typed sections (model.weights, workload.shift added; unknown keys refused).
#: 3: ``estimates`` typed too (contract/estimates_section.py): the same JSON keys, now checked.
#: 4: ``cluster.measured_links``: which link figures a preflight measured (a plan of version 2 or 3
#: has none: its figures were the descriptor's, or the record was not kept).
SCHEMA_VERSION = 4
#: Versions :meth:`Plan.from_dict` still reads (migrated to SCHEMA_VERSION on load).
READABLE_VERSIONS = (2, 3, SCHEMA_VERSION)
#: Estimates keys a schema-2 plan may lack (written before they were added): the value the cost
#: model then took for the ones it reads, a neutral one for the display-only ones (weight_quant,
#: weight_gather_s_per_step_ideal). Any other missing key refuses the plan in one line.
V2_DEFAULTS = {"text_tokens_per_rank": 0, "context_flops_per_sample": 0, "weight_quant": "none",
               "weight_gather_bytes_per_rank_per_step": 0, "weight_gather_gb_per_s": 1.0,
               "weight_gather_s_per_step_ideal": 0.0}


@dataclass(frozen=True)
class Layout:
    """Sizes of the four parallel dimensions; ``world_size`` is their product."""

    dp: int = 1
    cfg: int = 1
    ring: int = 1
    ulysses: int = 1

    def __post_init__(self) -> None:
        for name in DIMS:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"layout.{name} must be a positive integer, got {value!r}")

    @property
    def world_size(self) -> int:
        return self.dp * self.cfg * self.ring * self.ulysses

    @property
    def sequence_degree(self) -> int:
        """Ranks that share one sample's sequence: ring x ulysses."""
        return self.ring * self.ulysses

    def sizes(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in DIMS}

    @property
    def name(self) -> str:
        """The layout's name, ``dpxcfgxringxulysses`` (e.g. ``1x2x1x4``): campaign points, reports,
        the planner's tables and the fault hooks all spell it so; :meth:`from_name` reads it back."""
        return "x".join(str(getattr(self, d)) for d in DIMS)

    @classmethod
    def from_name(cls, text: str) -> "Layout":
        """The layout :attr:`name` spells; ValueError when ``text`` is not four positive sizes joined by x."""
        parts = str(text).split("x")
        if len(parts) != len(DIMS) or not all(is_digits(p) for p in parts):
            raise ValueError(f"layout name {text!r} is not {'x'.join(DIMS)} (e.g. 1x1x2x4)")
        return cls(**{d: int(p) for d, p in zip(DIMS, parts)})

    def coords(self, rank: int) -> dict[str, int]:
        """The rank's coordinate on every dimension."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} outside world of {self.world_size}")
        out: dict[str, int] = {}
        rest = rank
        for name in reversed(DIMS):
            size = getattr(self, name)
            out[name] = rest % size
            rest //= size
        return {name: out[name] for name in DIMS}

    def rank_of(self, dp: int = 0, cfg: int = 0, ring: int = 0, ulysses: int = 0) -> int:
        return ((dp * self.cfg + cfg) * self.ring + ring) * self.ulysses + ulysses

    def sequence_index(self, rank: int) -> int:
        """Position of ``rank`` in its sequence group (ring-major, ulysses-minor)."""
        c = self.coords(rank)
        return c["ring"] * self.ulysses + c["ulysses"]

    def groups(self, dim: str) -> list[list[int]]:
        """All groups along ``dim`` ("dp", "cfg", "ring", "ulysses" or "sequence"), each a
        sorted list of ranks; groups are listed in order of their smallest rank."""
        if dim == "sequence":
            varying = ("ring", "ulysses")
        elif dim in DIMS:
            varying = (dim,)
        else:
            raise ValueError(f"unknown dimension {dim!r}; expected one of {GROUP_DIMS}")
        # Arithmetic, not a walk over every rank: along a dim of size n and stride s (the
        # product of the inner sizes) a group is range(start, start + n * s, s).
        if dim == "sequence":
            n, stride = self.ring * self.ulysses, 1
        else:
            n, stride = getattr(self, dim), 1
            for inner in DIMS[DIMS.index(dim) + 1:]:
                stride *= getattr(self, inner)
        block = n * stride
        return [list(range(outer + i, outer + block, stride))
                for outer in range(0, self.world_size, block) for i in range(stride)]

    def all_groups(self) -> dict[str, list[list[int]]]:
        return {dim: [list(g) for g in groups] for dim, groups in _all_groups(self).items()}

    def describe(self) -> str:
        return " x ".join(f"{name} {getattr(self, name)}" for name in DIMS)


@functools.lru_cache(maxsize=256)
def _all_groups(layout: Layout) -> dict[str, tuple[tuple[int, ...], ...]]:
    """Layout.all_groups, computed once per layout (callers get fresh lists)."""
    return {dim: tuple(tuple(g) for g in layout.groups(dim)) for dim in GROUP_DIMS}


@dataclass(frozen=True)
class RankInfo:
    rank: int
    node: int
    local_rank: int
    dp: int
    cfg: int
    ring: int
    ulysses: int
    sequence_index: int


@dataclass(frozen=True)
class Plan:
    """Everything a rank needs to run, and everything a person needs to check it.

    ``cluster``, ``job``, ``model``, ``workload``, ``sequence`` and ``heads`` are frozen
    dataclasses (:mod:`sporch.orchestrator.contract.sections`); ``estimates`` is the planner's
    :class:`~sporch.orchestrator.contract.estimates_section.Estimates` (None in a plan built by hand,
    written as ``{}``). Keys are documented in docs/plan.md.
    """

    layout: Layout
    world_size: int
    nodes: int
    gpus_per_node: int
    ranks: tuple[RankInfo, ...]
    groups: dict[str, list[list[int]]]
    cluster: ClusterSpec
    job: JobSection
    model: ModelSection
    workload: WorkloadSection
    sequence: SequenceSection
    heads: HeadsSection
    placement: PlacementSection = field(default_factory=PlacementSection)
    estimates: Optional[Estimates] = None
    warnings: tuple[str, ...] = ()
    schema_version: int = SCHEMA_VERSION

    # -- construction helpers -------------------------------------------------------
    @staticmethod
    @functools.lru_cache(maxsize=256)  # immutable result; campaigns plan many points per layout
    def rank_table(layout: Layout, gpus_per_node: int) -> tuple[RankInfo, ...]:
        R, U = layout.ring, layout.ulysses
        C = layout.cfg
        rows = []
        for rank in range(layout.world_size):  # the coords of Layout.coords, inline (big worlds)
            u, rest = rank % U, rank // U
            r, rest = rest % R, rest // R
            rows.append(RankInfo(rank=rank, node=rank // gpus_per_node, local_rank=rank % gpus_per_node,
                                 dp=rest // C, cfg=rest % C, ring=r, ulysses=u, sequence_index=r * U + u))
        return tuple(rows)

    def rank(self, rank: int) -> RankInfo:
        return self.ranks[rank]

    def iter_ranks(self) -> Iterator[RankInfo]:
        return iter(self.ranks)

    # -- JSON ---------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["layout"] = self.layout.sizes()
        d["ranks"] = [asdict(r) for r in self.ranks]
        d["warnings"] = list(self.warnings)
        d["estimates"] = self.estimates.to_dict() if self.estimates is not None else {}
        # Keys a reader looks for first come first.
        head = {k: d.pop(k) for k in ("schema_version", "layout", "world_size", "nodes", "gpus_per_node")}
        return {**head, **d}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Plan":
        version = d.get("schema_version")
        if version not in READABLE_VERSIONS:
            raise ValueError(
                f"plan schema_version {version!r} is not supported (expected {SCHEMA_VERSION}); "
                "re-create the plan with this version of sporch (sporch plan --json JOB.yaml > plan.json)"
            )
        d = dict(d)
        if version == 2:
            d = _from_v2(d)
        d["schema_version"] = SCHEMA_VERSION  # 2 and 3 lack only what has a default (cluster.measured_links)
        d["layout"] = Layout(**d["layout"])
        d["ranks"] = tuple(RankInfo(**r) for r in d["ranks"])
        d["warnings"] = tuple(d.get("warnings", ()))
        for key, section in _SECTIONS.items():
            d[key] = build(section, d[key], f"plan.{key}")
        d["placement"] = build(PlacementSection, d.get("placement", {}), "plan.placement")  # optional
        est = d.get("estimates") or None
        try:
            d["estimates"] = Estimates.from_dict(est, "plan.estimates") if est is not None else None
        except ValueError as exc:
            if version != 2:
                raise
            raise ValueError(f"plan schema_version 2 from an older sporch cannot be read ({exc}); re-create it "
                             "with this version (sporch plan --json JOB.yaml > plan.json)") from None
        return cls(**d)

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        return cls.from_dict(json.loads(text))

    @classmethod
    def load(cls, path: str) -> "Plan":
        with open_regular(path) as fh:  # a FIFO is refused (NotAFileError, a ValueError), never waited on
            return cls.from_json(fh.read().decode("utf-8"))


def _from_v2(d: dict[str, Any]) -> dict[str, Any]:
    """A schema-2 plan as schema 3: the same estimates keys, with the ones older plans lack filled
    in as the cost model read them then (``token_parameters``: every parameter per token)."""
    est = dict(d.get("estimates") or {})
    if est:
        for key, value in V2_DEFAULTS.items():
            est.setdefault(key, value)
        if "parameters" in est:
            est.setdefault("token_parameters", est["parameters"])
    return {**d, "estimates": est, "schema_version": SCHEMA_VERSION}


_SECTIONS = {"cluster": ClusterSpec, "job": JobSection, "model": ModelSection, "workload": WorkloadSection,
             "sequence": SequenceSection, "heads": HeadsSection}
