"""Fit the cost model's constants to measured points; write the calibration file.

The model (sporch.orchestrator.plan.cost) is linear in its parameters (1 / efficiency, latencies,
overheads, fixed cost) once each point's ring regime is known (transfer hidden behind the
attention block or exposed). :func:`fit` alternates: fix the regimes with the current constants,
solve the weighted least squares (relative errors: each point weighted by 1 / measured), repeat
until the regimes stop changing. Columns are scaled to unit norm and a weak ridge pulls each
parameter towards its prior (the GPU table's value), so a parameter the points cannot
determine (no ring point: no p2p latency) stays at its prior instead of wandering. Parameters
that come out past their bounds are held there (costs at 0, efficiencies at 1) and the rest
refitted.

Pure Python: a handful of parameters, normal equations, Gaussian elimination. The file it makes
is written by :mod:`.calibration_output`, read (what a cluster descriptor's ``calibration:``
loads) by :mod:`sporch.orchestrator.config.calibration_file`; the observations of a campaign's measured
points come from :mod:`sporch.orchestrator.campaign.calibration_points`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence

from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.plan.measured_links import LinkFigures
from sporch.orchestrator.plan.cost import predict
from sporch.orchestrator.plan.cost_features import (
    FITTED,
    INVERSE,
    constants_from,
    features,
    parameters,
    unfitted_s,
)
from sporch.orchestrator.plan.cost_inputs import CostInputs
from sporch.orchestrator.plan.phase_cost import phases_of

#: Ridge weight towards the prior, in units of a unit-norm column (tiny: breaks ties only).
RIDGE = 1e-6
MAX_ITERATIONS = 50
#: An iterative objective's fit has converged when no parameter moved by more than this (relative).
CONVERGED = 1e-6
#: Measured times the fit accepts (seconds): a step takes more than a nanosecond and less than a day.
MIN_MEASURED_S = 1e-9
MAX_MEASURED_S = 86400.0


def with_links(x: CostInputs, links: LinkFigures, nominal_intra_gb_per_s: float, nominal_inter_gb_per_s: float,
               gpus_per_node: int) -> CostInputs:
    """``x`` (read from a plan made with the descriptor's nominal figures) with the links' measured
    rates in their place, by the rule the estimate uses (plan/estimates.py): a Ulysses group inside
    a node when it divides GPUs per node, a ring group when ring x ulysses does; a weight gather's
    rate is the in-node one unless the plan recorded the between-nodes one."""
    rates = links.rates()
    intra = rates.get("intra_node_gb_per_s", nominal_intra_gb_per_s) * 1e9
    inter = rates.get("inter_node_gb_per_s", nominal_inter_gb_per_s) * 1e9 / gpus_per_node
    crossing = min(intra, inter)
    U, R, gpn = x.ulysses, x.ring, gpus_per_node
    nominal_cross = min(nominal_intra_gb_per_s, nominal_inter_gb_per_s / gpn) * 1e9
    gather_crosses = x.gather_bytes > 0 and nominal_cross < nominal_intra_gb_per_s * 1e9 and x.gather_bw == nominal_cross
    return dataclasses.replace(
        x, a2a_bw=intra if gpn % U == 0 else crossing,
        ring_bw=intra if R * U <= gpn and gpn % (R * U) == 0 else crossing,
        gather_bw=crossing if gather_crosses else intra)


# -- fitting ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Observation:
    inputs: CostInputs
    measured_s: float
    level: str = "step"  # cost_features.LEVELS: "step" (seconds per step), "job" (one generation), a phase
    label: str = ""
    #: what the residual is relative to (None: ``measured_s``, a relative error). A phase measured on
    #: several runs is relative to its mean over them (calibration_points), so that runs of one job
    #: fit their mean, which a budget adds up, not the fastest run
    scale_s: Optional[float] = None

    @property
    def scale(self) -> float:
        return self.scale_s if self.scale_s else self.measured_s


def _regime(p: Any) -> tuple[bool, bool]:
    """What the linear form of a prediction depends on: ring transfer exposed, eager layer host-bound."""
    return p.ring_comm_bound, p.host_bound


def predicted_s(o: Observation, constants: Mapping[str, float]) -> float:
    p = predict(o.inputs, constants)
    if o.level == "step":
        return p.step_s
    if o.level == "job":
        return p.generation_s
    return p.job_s if o.level == "all" else p.phase(o.level)


@dataclass
class FitResult:
    constants: dict[str, float]
    fitted: tuple[str, ...]
    held: tuple[str, ...]
    observations: tuple[Observation, ...]
    predictions: list[float] = field(default_factory=list)

    @property
    def relative_errors(self) -> list[float]:
        return [p / o.measured_s - 1 for p, o in zip(self.predictions, self.observations)]

    @property
    def scaled_errors(self) -> list[float]:
        """What the fit minimises: each residual relative to its observation's scale."""
        return [(p - o.measured_s) / o.scale for p, o in zip(self.predictions, self.observations)]

    @property
    def rms_relative_error(self) -> float:
        e = self.relative_errors
        return math.sqrt(sum(x * x for x in e) / len(e)) if e else 0.0

    @property
    def max_relative_error(self) -> float:
        return max((abs(x) for x in self.relative_errors), default=0.0)


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Solve the square system a x = b (Gaussian elimination, partial pivoting)."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[piv][col]) < 1e-300:
            raise SporchError("calibration: the points do not determine the constants (singular system)")
        m[col], m[piv] = m[piv], m[col]
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            if f:
                for k in range(col, n + 1):
                    m[r][k] -= f * m[col][k]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (m[r][n] - sum(m[r][k] * x[k] for k in range(r + 1, n))) / m[r][r]
    return x


def _least_squares(rows: list[dict[str, float]], targets: list[float], names: list[str],
                   prior: Mapping[str, float]) -> dict[str, float]:
    """argmin sum (row . p - target)^2 + RIDGE |scaled (p - prior)|^2 over ``names``."""
    norms = {k: math.sqrt(sum(r[k] ** 2 for r in rows)) or 1.0 for k in names}
    n = len(names)
    ata = [[0.0] * n for _ in range(n)]
    aty = [0.0] * n
    for r, y in zip(rows, targets):
        v = [r[k] / norms[k] for k in names]
        for i in range(n):
            aty[i] += v[i] * y
            for j in range(n):
                ata[i][j] += v[i] * v[j]
    for i, k in enumerate(names):
        ata[i][i] += RIDGE
        aty[i] += RIDGE * prior[k] * norms[k]
    q = _solve(ata, aty)
    return {k: q[i] / norms[k] for i, k in enumerate(names)}


def fit(observations: Sequence[Observation], base: Mapping[str, float],
        names: Iterable[str] = FITTED) -> FitResult:
    """Constants that minimise the relative error of the predictions of ``observations``;
    ``base`` gives the priors and every constant not fitted."""
    obs = tuple(observations)
    if not obs:
        raise SporchError("calibration: no measured points to fit")
    for o in obs:
        if not (MIN_MEASURED_S <= o.measured_s <= MAX_MEASURED_S):
            raise SporchError(f"calibration: point {o.label or '?'} has no plausible measured time ({o.measured_s} s; "
                              f"between {MIN_MEASURED_S:g} and {MAX_MEASURED_S:g} s); leave it out with --exclude")
    try:
        names = list(names)
        fits = [_fit(obs, base, names)]
        # the alternation enters a host-bound regime only from constants that predict one: also
        # start from host floors (as fit_shared) and keep the fit with the smallest errors
        if "eager_layer_s" in names and any(not o.inputs.compiled for o in obs):
            fits += [_fit(obs, {**base, "eager_layer_s": v}, names) for v in host_starts(obs)]
        return min(fits, key=lambda f: sum(e * e for e in f.scaled_errors))
    except (OverflowError, ZeroDivisionError) as exc:
        raise SporchError(f"calibration: the fit does not converge on these points ({exc}); leave outliers out "
                          "with --exclude") from None


def _fit(obs: tuple[Observation, ...], base: Mapping[str, float], names: Iterable[str]) -> FitResult:
    prior = parameters(base)
    wanted = [k for k in FITTED if k in set(names)]
    consts = dict(base)
    held: set[str] = set()
    regimes: Optional[list[bool]] = None
    for _ in range(MAX_ITERATIONS):
        rows = [features(o.inputs, consts, o.level) for o in obs]
        active = [k for k in wanted if k not in held and any(r[k] for r in rows)]
        params = parameters(consts)
        # weighted by 1 / measured (o.scale): the residuals are relative errors
        wrows = [{k: r[k] / o.scale for k in active} for r, o in zip(rows, obs)]
        targets = [(o.measured_s - sum(r[k] * params[k] for k in FITTED if k not in active)
                    - unfitted_s(o.inputs, o.level)) / o.scale
                   for r, o in zip(rows, obs)]
        solved = _least_squares(wrows, targets, active, prior) if active else {}
        # bounds: efficiencies <= 1 (1 / e >= 1), costs >= 0; a parameter past its bound is held there
        out = {k: (1.0 if k in INVERSE else 0.0) for k, v in solved.items() if (v < 1 if k in INVERSE else v < 0)}
        if out:
            held.update(out)
            consts.update(out)
            continue
        consts = constants_from(solved, consts)
        now = [_regime(predict(o.inputs, consts)) for o in obs]
        if now == regimes:
            break
        regimes = now
    rows = [features(o.inputs, consts, o.level) for o in obs]
    fitted = tuple(k for k in wanted if k not in held and any(r[k] for r in rows))
    result = FitResult(constants=consts, fitted=fitted, held=tuple(k for k in FITTED if k not in fitted),
                       observations=obs)
    result.predictions = [predicted_s(o, consts) for o in obs]
    return result


# -- one fit over several GPUs (the published tables) -----------------------------------------
@dataclass
class SharedFit:
    """Constants fitted over observations of several GPU models at once: each efficiency of
    ``scales`` multiplies every GPU's own prior (an Ada GPU keeps its lower fraction of peak),
    each constant of ``values`` is one value for all of them (bytes per element, latencies,
    host time: properties of the software, not of the chip)."""

    scales: dict[str, float]
    values: dict[str, float]
    held: tuple[str, ...]
    observations: tuple[Observation, ...]
    predictions: list[float] = field(default_factory=list)

    def constants(self, base: Mapping[str, float]) -> dict[str, float]:
        """``base`` (one GPU's prior constants) with the fit applied."""
        out = dict(base)
        for k, s in self.scales.items():
            out[k] = base[k] * s
        out.update(self.values)
        return out


#: The losses :class:`Objective` knows.
LOSSES = ("l2", "huber", "soft_l1", "l4")


@dataclass(frozen=True)
class Objective:
    """What :func:`fit_shared` minimises: sum over observations of weight x rho(residual).

    ``error``: "relative" (predicted / measured - 1, the fit's since issue 13) or "log"
    (log(predicted / measured): over- and under-prediction by the same factor cost the same; solved
    by Gauss-Newton steps, the prediction linearised at the current constants). ``loss``: "l2"
    (r^2, least squares), "huber" (r^2 within ``delta``, linear past it), "soft_l1"
    (2 delta^2 (sqrt(1 + (r / delta)^2) - 1): r^2 near 0, linear far out) or "l4" (r^4 / delta^2:
    leans towards the largest error); the last three by iteratively reweighted least squares
    inside the alternation."""

    error: str = "relative"
    loss: str = "l2"
    delta: float = 0.1

    def __post_init__(self) -> None:
        if self.error not in ("relative", "log") or self.loss not in LOSSES or not self.delta > 0:
            raise ValueError(f"objective: error relative or log, loss one of {', '.join(LOSSES)}, delta > 0 "
                             f"(got {self.error}, {self.loss}, {self.delta})")

    def residual(self, predicted: float, measured: float) -> float:
        return math.log(predicted / measured) if self.error == "log" else predicted / measured - 1

    def rho(self, r: float) -> float:
        a, d = abs(r), self.delta
        if self.loss == "huber":
            return r * r if a <= d else 2 * d * a - d * d
        if self.loss == "soft_l1":
            return 2 * d * d * (math.sqrt(1 + (r / d) ** 2) - 1)
        if self.loss == "l4":
            return r ** 4 / (d * d)
        return r * r

    def irls_weight(self, r: float) -> float:
        """rho'(r) / (2 r): the weight of the residual in the next least-squares step."""
        a, d = abs(r), self.delta
        if self.loss == "huber":
            return 1.0 if a <= d else d / a
        if self.loss == "soft_l1":
            return 1.0 / math.sqrt(1 + (r / d) ** 2)
        if self.loss == "l4":
            return 2 * max(a, 1e-3) ** 2 / (d * d)
        return 1.0

    @property
    def iterative(self) -> bool:
        """Whether one step's solution moves the next step's system (beyond the regimes)."""
        return self.error != "relative" or self.loss != "l2"


#: The shared fit's objective: relative errors, least squares.
RELATIVE_L2 = Objective()


def fit_shared(observations: Sequence[Observation], bases: Sequence[Mapping[str, float]],
               names: Iterable[str] = FITTED, *, weights: Optional[Sequence[float]] = None,
               objective: Objective = RELATIVE_L2) -> SharedFit:
    """Fit ``names`` to ``observations``, the i-th timed on a GPU whose prior constants are
    ``bases[i]``: INVERSE constants (efficiencies) as one multiplier of every GPU's prior, the
    others as one shared value (``objective``: relative errors, least squares, as :func:`fit`;
    ``weights``: one per observation, default 1; bounds: an efficiency reaches 1 on no GPU,
    costs >= 0)."""
    obs, bases = tuple(observations), [dict(b) for b in bases]
    if not obs or len(obs) != len(bases):
        raise SporchError("calibration: no measured points to fit")
    w = [1.0] * len(obs) if weights is None else [float(x) for x in weights]
    if len(w) != len(obs):
        raise SporchError("calibration: one weight per measured point")
    wanted = [k for k in FITTED if k in set(names)]
    # The alternating fit enters a regime only where its current constants predict it: from a
    # host floor of 0 no eager layer is ever host-bound. So it also starts from HOST_STARTS and
    # keeps the start whose fit has the smallest objective.
    starts: list[dict[str, float]] = [{}]
    if "eager_layer_s" in wanted and any(not o.inputs.compiled for o in obs):
        starts += [{"eager_layer_s": v} for v in HOST_STARTS]
    fits = [_fit_shared(obs, bases, wanted, start, objective, w) for start in starts]
    return min(fits, key=lambda f: sum(wi * objective.rho(objective.residual(p, o.measured_s))
                                       for wi, p, o in zip(w, f.predictions, obs)))


#: Host floors per eager layer (seconds) the shared fit also starts from (see fit_shared).
HOST_STARTS = (1e-3, 2e-3, 4e-3)


def host_starts(obs: Sequence[Observation]) -> list[float]:
    """Host floors :func:`fit` also starts from: half and nine tenths of the fastest measured
    eager layer (a floor cannot exceed it), and HOST_STARTS."""
    steps = {"step": lambda x: 1, "job": lambda x: x.steps, "denoise": lambda x: phases_of(x).loop_steps}
    per_layer = [o.measured_s / (o.inputs.layers * steps[o.level](o.inputs))
                 for o in obs if o.level in steps and not o.inputs.compiled and o.inputs.gather_bytes == 0]
    fastest = min(per_layer, default=0.0)
    return sorted({*HOST_STARTS, *((0.5 * fastest, 0.9 * fastest) if fastest > 0 else ())})


def _fit_shared(obs: tuple[Observation, ...], bases: list[dict[str, float]], wanted: list[str],
                start: Mapping[str, float], objective: Objective, weights: list[float]) -> SharedFit:
    # the prior of a shared value: the median of the GPUs' priors
    prior_values = {k: sorted(b[k] for b in bases)[len(bases) // 2] for k in wanted if k not in INVERSE}
    scales = {k: 1.0 for k in wanted if k in INVERSE}
    values = {**prior_values, **start}
    held: set[str] = set()
    regimes: Optional[list[bool]] = None

    def consts_of(i: int) -> dict[str, float]:
        c = dict(bases[i])
        for k, s in scales.items():
            c[k] = bases[i][k] * s
        c.update(values)
        return c

    for _ in range(MAX_ITERATIONS):
        cs = [consts_of(i) for i in range(len(obs))]
        rows, fulls = [], []
        for o, c, b in zip(obs, cs, bases):
            f = features(o.inputs, c, o.level)
            fulls.append(f)
            rows.append({k: (f[k] / b[k] if k in INVERSE else f[k]) for k in FITTED if k in f})
        active = [k for k in wanted if k not in held and any(r[k] for r in rows)]
        # each residual linearised at the current prediction p0: relative, (p - m) / m exactly;
        # log, log(p0 / m) + (p - p0) / p0; times sqrt(weight x IRLS weight)
        wrows, targets = [], []
        for r, full, o, c, wi in zip(rows, fulls, obs, cs, weights):
            p0 = predicted_s(o, c)
            denom, offset = (p0, math.log(p0 / o.measured_s) - 1.0) if objective.error == "log" else (o.measured_s, -1.0)
            sw = math.sqrt(wi * objective.irls_weight(objective.residual(p0, o.measured_s)))
            pc = parameters(c)
            rest = sum(full[k] * pc[k] for k in FITTED if k not in active) + unfitted_s(o.inputs, o.level)
            wrows.append({k: sw * r[k] / denom for k in active})
            targets.append(sw * (-offset - rest / denom))
        prior = {k: (1.0 if k in INVERSE else prior_values[k]) for k in active}
        solved = _least_squares(wrows, targets, active, prior) if active else {}
        out = {}
        for k, v in solved.items():
            if k in INVERSE:
                top = max(b[k] for b in bases)  # the efficiency of the GPU with the highest prior reaches 1
                if v < top:
                    out[k] = ("scale", 1.0 / top)
            elif v < 0:
                out[k] = ("value", 0.0)
        if out:
            for k, (kind, v) in out.items():
                held.add(k)
                (scales if kind == "scale" else values)[k] = v
            continue
        moved = 0.0
        for k, v in solved.items():
            old = 1.0 / scales[k] if k in INVERSE else values[k]
            moved = max(moved, abs(v - old) / max(abs(v), abs(old), 1e-12))
            if k in INVERSE:
                scales[k] = 1.0 / v
            else:
                values[k] = v
        now = [_regime(predict(o.inputs, consts_of(i))) for i, o in enumerate(obs)]
        if now == regimes and (not objective.iterative or moved < CONVERGED):
            break
        regimes = now
    result = SharedFit(scales=scales, values=values, held=tuple(sorted(held)), observations=obs)
    result.predictions = [predicted_s(o, consts_of(i)) for i, o in enumerate(obs)]
    return result
