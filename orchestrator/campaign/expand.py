"""The campaign matrix -> points, each planned by the planner (``make_plan``).

A point is one run: cluster x node count x layout x preset x shape x dtype x cache x quant x
attention precision x steps x recipe x repeat (each lever is a parameter only when the matrix
sweeps it: ``caches``, ``quants``, ``attention_precisions``, ``steps``, ``recipes``). Its id
is a hash of the canonical JSON of those parameters, so adding values to the matrix keeps
the ids (and results) of the points that were already there. Combinations the planner
refuses (a layout that does not divide, a shape the VAE stride does not allow, a model that
does not fit) become :class:`Skipped` with the planner's one-line reason.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import hashlib
import itertools
import json
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Optional

from sporch.orchestrator.campaign.spec import MAX_POINTS
from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.config.job_checks import validate_job
from sporch.orchestrator.config.job_spec import CacheSpec, ParallelSpec
from sporch.orchestrator.contract.parallel import DIMS
from sporch.orchestrator.contract.sections import CacheSection
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.plan.layouts import compact, feasible_layouts
from sporch.orchestrator.plan.planner import job_context, make_plan, plan_basis, resolve_job_model

#: Length of a point id (hex digits of sha256).
ID_LEN = 12


#: The canonical JSON of a point's parameters (what its id is a hash of): keys sorted, no spaces.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


def point_id(params: dict[str, Any]) -> str:
    text = _CANONICAL.encode(params)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:ID_LEN]


def shape_label(shape: Optional[dict[str, Any]]) -> str:
    """``81x720x1280`` (frames x height x width), ``720x1280`` (image), ``seq4096``."""
    if not shape:
        return "base"
    if shape.get("seq_len") is not None:
        return f"seq{shape['seq_len']}"
    dims = [shape.get("frames"), shape["height"], shape["width"]]
    return "x".join(str(d) for d in dims if d is not None)


@dataclass(frozen=True)
class Point:
    """One planned run. ``params`` are what the id is computed from; ``plan`` the Plan."""

    id: str
    params: dict
    plan: Any  # sporch.orchestrator.contract.plan.Plan

    def match_values(self) -> dict[str, Any]:
        """Values reference ``where`` clauses and the report select on (resolved by the planner)."""
        return point_values(self.params, self.plan)


def point_values(params: dict[str, Any], plan) -> dict[str, Any]:
    """The point's identifying values: from its parameters and its Plan."""
    w = plan.workload
    if w.seq_len is not None:
        shape = {"seq_len": w.seq_len}
    else:
        shape = {k: getattr(w, k) for k in ("frames", "height", "width") if getattr(w, k) is not None}
    return {
        "cluster": params["cluster"],
        "nodes": plan.nodes,
        "gpus": plan.world_size,
        "layout": compact(plan.layout),
        "preset": plan.model.preset or "custom",
        "shape": shape_label(shape),
        "dtype": w.dtype,
        "repeat": params["repeat"],
        **({"cache": cache_value(params["cache"])} if "cache" in params else {}),
        **({"quant": params["quant"]} if "quant" in params else {}),
        **({"attention": params["attention"]} if "attention" in params else {}),
        **({"steps": w.steps} if "steps" in params or "recipe" in params else {}),
        **({"recipe": params["recipe"]} if "recipe" in params else {}),
    }


def cache_value(cache: Optional[dict[str, Any]]) -> str:
    """A point's cache as a report value: ``none`` or ``fbcache@0.1`` (threshold), with the
    non-default warm-up and cap appended (``/w2``, ``/max3``)."""
    if not cache or cache.get("method", "none") == "none":
        return "none"
    out = f"{cache['method']}@{cache.get('threshold'):g}"
    if cache.get("warmup_steps", CacheSection.warmup_steps) != CacheSection.warmup_steps:
        out += f"/w{cache['warmup_steps']}"
    if cache.get("max_consecutive", CacheSection.max_consecutive) != CacheSection.max_consecutive:
        out += f"/max{cache['max_consecutive']}"
    return out


@dataclass(frozen=True)
class Skipped:
    params: dict
    reason: str


@dataclass
class Expansion:
    campaign: Any
    points: list = field(default_factory=list)  # list[Point], in matrix order
    skipped: list = field(default_factory=list)  # list[Skipped]

    def by_id(self) -> dict[str, Point]:
        return {p.id: p for p in self.points}


def node_counts(nodes_axis: Any, base_nodes: Optional[int], cluster_nodes: int) -> list[int]:
    if nodes_axis is None:
        return [base_nodes or cluster_nodes]
    if nodes_axis == "pow2":
        out, n = [], 1
        while n <= cluster_nodes:
            out.append(n)
            n *= 2
        return out
    return list(nodes_axis)


def _with_levers(base, levers: dict[str, Any], recipes: dict[str, Any]):
    """The job with the speed-lever values of one point (``quant``, ``attention``, ``steps``,
    ``recipe``: its dotted keys set on the job, validated as a job file would be)."""
    job = base
    if "recipe" in levers and recipes[levers["recipe"]]:
        data = job.to_dict()
        for key, value in recipes[levers["recipe"]].items():
            node = data
            *path, leaf = str(key).split(".")
            for part in path:
                if not isinstance(node.get(part), dict):
                    node[part] = {}
                node = node[part]
            node[leaf] = copy.deepcopy(value)
        source = job.source
        job = job_from_dict(data, f"recipe {levers['recipe']}")
        job.source = source
    if "quant" in levers:
        job = replace(job, model=replace(job.model, quant=levers["quant"]))
    if "attention" in levers:
        job = replace(job, workload=replace(job.workload, attention_precision=levers["attention"]))
    if "steps" in levers:
        job = replace(job, workload=replace(job.workload, steps=levers["steps"]))
    return job


def _with_axes(base, preset: Optional[str], shape: Optional[dict], dtype: Optional[str],
               cache: Optional[dict] = None):
    model, workload = base.model, base.workload
    if cache is not None:
        workload = replace(workload, cache=CacheSpec(**cache))
    if preset is not None:
        model = replace(model, preset=preset)
    if shape is not None:
        workload = replace(workload, **{k: shape.get(k) for k in ("frames", "height", "width", "seq_len")})
    if dtype is not None:
        workload = replace(workload, dtype=dtype)
    return replace(base, model=model, workload=workload)


def _layouts_for(campaign, cluster, job, model=None) -> Iterator[tuple[Any, dict]]:
    """(param value, requested parallel dims) for every layout of this point's axes (``model``:
    the job's, resolved)."""
    mode = campaign.layouts
    if mode is None:
        yield "base", {d: getattr(job.parallel, d) for d in DIMS}
    elif mode == "auto":
        yield "auto", {d: "auto" for d in DIMS}
    elif mode == "all":
        for lay in feasible_layouts(job_context(cluster, job, model)):
            yield lay.sizes(), lay.sizes()
    else:
        gpus = job.resources.nodes * cluster.gpus_per_node
        for entry in mode:  # spec.LayoutEntry; its gpus (when given) is not a point parameter
            if entry.applies_to(gpus):
                yield dict(entry.dims), dict(entry.dims)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """An expansion keeps every plan it makes: up to 10,000 plans of small objects and no cycles
    among them. The cyclic garbage collector would walk all of them again at each of its
    collections (a quarter of a 10,000-point expansion); it is paused while the plans are made
    and resumes (if it ran before) when they are."""
    running = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if running:
            gc.enable()


def expand(campaign, clusters: Optional[dict[str, Any]] = None) -> Expansion:
    """Every point of ``campaign`` (a spec.Campaign), planned; refused ones in ``skipped``.

    ``clusters``: name -> ClusterSpec to use instead of looking names up (tests, benches).
    An unknown cluster name is bad input for the whole campaign (SporchError). The plans of one
    job's layouts share its resolved model and job dict (planner.PlanBasis).
    """
    with _collector_paused():
        return _expand(campaign, clusters)


def _expand(campaign, clusters: Optional[dict[str, Any]]) -> Expansion:
    spec, base = campaign.spec, campaign.base
    m = spec.matrix
    out = Expansion(campaign=campaign)
    presets = list(m.presets) or [None]
    shapes = [{k: v for k, v in vars(s).items() if v is not None} for s in m.shapes] or [None]
    dtypes = list(m.dtypes) or [None]
    caches = [{k: v for k, v in vars(c).items() if v is not None} for c in m.caches] or [None]
    recipes = {r.name: dict(r.set) for r in m.recipes}
    axes = [("quant", list(m.quants)), ("attention", list(m.attention_precisions)), ("steps", list(m.steps)),
            ("recipe", list(recipes))]
    lever_sets = [dict(zip([k for k, v in axes if v], combo))
                  for combo in itertools.product(*[v for _, v in axes if v])]
    seen: set[str] = set()
    found = {cname: (clusters or {}).get(cname) or find_cluster(cname) for cname in m.clusters}
    _check_layout_gpus(campaign, found)
    for cname in m.clusters:
        cluster = found[cname]
        for preset in presets:
            for shape in shapes:
                for dtype, cache, levers in ((d, c, lv) for d in dtypes for c in caches for lv in lever_sets):
                    common = {"cluster": cname, "preset": preset, "shape": shape,
                              "dtype": dtype, **({"cache": cache} if m.caches else {}), **levers}
                    try:
                        job0 = _with_levers(_with_axes(base, preset, shape, dtype, cache), levers, recipes)
                    except SporchError as e:
                        out.skipped.append(Skipped({**common, "layout": "base", "repeat": None}, str(e)))
                        continue
                    model = None  # the job's model, resolved once for every node count and layout
                    for nodes in node_counts(campaign.nodes, base.resources.nodes, cluster.nodes):
                        common = {**common, "nodes": nodes}
                        job1 = replace(job0, resources=replace(job0.resources, nodes=nodes))
                        try:
                            validate_job(job1, spec.source or spec.name)
                            if model is None:
                                model = resolve_job_model(job1)
                            basis = plan_basis(cluster, job1, model)  # what its layouts' plans share
                            layouts = list(_layouts_for(campaign, cluster, job1, model))
                        except SporchError as e:
                            params = {**common, "layout": campaign.layouts if isinstance(campaign.layouts, str)
                                      else "base", "repeat": None}
                            out.skipped.append(Skipped(params, str(e)))
                            continue
                        for lay_param, requested in layouts:
                            params = {**common, "layout": lay_param}
                            pids = [point_id({**params, "repeat": rep}) for rep in range(m.repeats)]
                            # named after the campaign and its first point (result.json job_name)
                            job = replace(job1, name=f"{spec.name}-{pids[0]}", parallel=ParallelSpec(**requested))
                            try:
                                plan = make_plan(cluster, job, basis=basis)
                            except SporchError as e:
                                out.skipped.append(Skipped({**params, "repeat": None}, str(e)))
                                continue
                            if not plan.estimates.memory.fits:
                                why = next((m for m in plan.warnings if m.startswith("estimated")), "does not fit")
                                out.skipped.append(Skipped({**params, "repeat": None}, why))
                                continue
                            if len(out.points) + m.repeats > MAX_POINTS:  # `layouts: all`, `nodes: pow2`
                                raise SporchError(f"{spec.source or spec.name}: 'matrix' gives more than {MAX_POINTS} "
                                                  "points; a campaign has at most that many: split it or shorten "
                                                  "an axis")
                            for rep, pid in enumerate(pids):
                                if pid in seen:  # e.g. two layout entries that resolve alike
                                    continue
                                seen.add(pid)
                                out.points.append(Point(id=pid, params={**params, "repeat": rep},
                                                        plan=plan if rep == 0 else _named(plan, spec.name, pid)))
    _check_output_reference(spec, out.points)
    _check_references(campaign, out.points)
    return out


def _check_layout_gpus(campaign, clusters: dict[str, Any]) -> None:
    """A layout entry's ``gpus`` must be a GPU count some cluster and node count of the campaign
    has: one that none has would make no point and say nothing (a mistyped count, a descriptor
    left out), and a campaign of only such entries would plan nothing and pass. Refused before
    anything is planned."""
    entries = [e for e in campaign.layouts if e.gpus] if isinstance(campaign.layouts, list) else []
    if not entries:
        return
    counts = sorted({c.gpus_per_node * n for c in clusters.values()
                     for n in node_counts(campaign.nodes, campaign.base.resources.nodes, c.nodes)})
    for e in entries:
        if e.gpus not in counts:
            src = campaign.spec.source or campaign.spec.name
            raise SporchError(f"{src}: matrix.layouts[{e.index}] (gpus: {e.gpus}) matches no point: the campaign's "
                              f"clusters and node counts give {', '.join(map(str, counts))} GPUs; change its gpus, or "
                              f"add a cluster or node count of {e.gpus} GPUs")


def _check_references(campaign, points: list) -> None:
    """Every reference must apply to a point of the campaign: one that applies to none (a
    mistyped layout, a GPU count the clusters lack) would never be checked, and a report that
    shows no failure would pass it without a measurement. Refused before anything is prepared."""
    if not points:
        return
    values = [p.match_values() for p in points]
    for ref in campaign.references:
        if not any(ref.applies(v) for v in values):
            where = ", ".join(f"{k}={v}" for k, v in ref.where.items()) or "any point"
            seen = {k: sorted({str(v[k]) for v in values}) for k in ("cluster", *ref.where)}
            have = "; ".join(f"{k}: {', '.join(vs)}" for k, vs in seen.items())
            src = campaign.spec.source or campaign.spec.name
            raise SporchError(f"{src}: references[{ref.index}] ({where} on cluster {ref.cluster}) applies to no point "
                              f"of the campaign, so it would never be checked; the points have {have}")


def _check_output_reference(spec, points: list) -> None:
    """``compare_outputs.reference`` must name a point of the campaign (its id or its layout),
    or the report would compare nothing: refused before anything is prepared or submitted."""
    ref = spec.compare_outputs.reference
    if not ref or not points or any(p.id == ref or compact(p.plan.layout) == ref for p in points):
        return
    layouts = sorted({compact(p.plan.layout) for p in points})
    raise SporchError(f"{spec.source or spec.name}: compare_outputs.reference {ref!r} is no point of the campaign; "
                      f"name a point id or one of its layouts: {', '.join(layouts)}")


def _named(plan, campaign_name: str, pid: str):
    """The plan with the job named after the campaign and the point (result.json job_name)."""
    return replace(plan, job=replace(plan.job, name=f"{campaign_name}-{pid}"))
