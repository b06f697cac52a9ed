"""Does the shipped shared fit reach the optimum of its own objective? A second solver's answer.

    python bench/fit_optimum.py [--starts 12] [--seed 1] [--held-out] [--per-run-cost]

``calibration.fit_shared`` alternates regimes and weighted least squares and holds a constant at
its bound for good once it crosses it, which could stop short of the optimum. This bench solves the
same problem with a bounded trust-region solver (``scipy.optimize.least_squares``; scipy is not a
sporch dependency: ``pip install scipy``): the relative errors of every point of every published
table, the efficiencies as multipliers of each GPU row's prior (at most 1 of peak on any GPU), the
other shared constants >= 0, and the free scale of each ``absolute: false`` table as a parameter.
It prints the objective (sum of squared relative errors) of the shipped fit, of the solver started
from it and of the solver from ``--starts`` random starts, and the constants that differ by more
than 1%. ``--held-out`` also repeats the leave-one-table-out validation with the solver (started
from the shipped fit) and prints its table beside the shipped one. ``--per-run-cost`` gives every
table timed as whole runs a free additive cost per run (>= 0, what its source leaves unstated), which
the held-out table is predicted without. docs/plan.md, "Sixth pass",
has the figures. No GPU.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any, Iterator, Sequence

from sporch.orchestrator.plan import validation
from sporch.orchestrator.plan.calibration import predicted_s
from sporch.orchestrator.plan.cost_constants import SHARED_FIT
from sporch.orchestrator.plan.cost_features import INVERSE

try:
    import numpy as np
    from scipy.optimize import least_squares
except ImportError:  # pragma: no cover - the bench says what it needs
    np = least_squares = None


class Problem:
    """The shared fit's objective over ``tables`` as a vector of parameters: the efficiency
    multipliers, the shared values, then one log-scale per ``absolute: false`` table."""

    def __init__(self, tables: Sequence[tuple[dict[str, Any], list, dict[str, float]]], per_run_cost: bool = False):
        self.tables = tables
        self.inverse = [k for k in SHARED_FIT if k in INVERSE]
        self.values = [k for k in SHARED_FIT if k not in INVERSE]
        self.free = [c["name"] for c, _, _ in tables if c.get("absolute") is False]
        self.per_run = [c["name"] for c, obs, _ in tables if per_run_cost and all(o.level == "job" for o in obs)]
        self.points = [(c["name"], o, base) for c, obs, base in tables for o in obs]
        bases = [base for _, _, base in self.points]
        top = {k: max(b[k] for b in bases) for k in self.inverse}
        self.lower = [1e-3] * len(self.inverse) + [0.0] * len(self.values) + [-5.0] * len(self.free) + [0.0] * len(self.per_run)
        self.upper = ([1.0 / top[k] for k in self.inverse] + [math.inf] * len(self.values) + [5.0] * len(self.free)
                      + [math.inf] * len(self.per_run))
        self.median = [sorted(b[k] for b in bases)[len(bases) // 2] for k in self.values]

    @property
    def names(self) -> list[str]:
        return self.inverse + self.values + [f"scale:{n}" for n in self.free] + [f"per-run:{n}" for n in self.per_run]

    def constants(self, x: Sequence[float], base: dict[str, float]) -> dict[str, float]:
        c = dict(base)
        for i, k in enumerate(self.inverse):
            c[k] = base[k] * x[i]
        for j, k in enumerate(self.values):
            c[k] = x[len(self.inverse) + j]
        return c

    def residuals(self, x: Sequence[float]) -> "np.ndarray":
        shift = len(self.inverse) + len(self.values)
        log_scale = dict(zip(self.free, x[shift:shift + len(self.free)]))
        per_run = dict(zip(self.per_run, x[shift + len(self.free):]))
        return np.array([(predicted_s(o, self.constants(x, base)) + per_run.get(name, 0.0))
                         / (o.measured_s * math.exp(log_scale.get(name, 0.0))) - 1 for name, o, base in self.points])

    def shipped(self) -> list[float]:
        """The shipped fit (validation's alternation) as this problem's parameters."""
        fit = validation._fit(self.tables, SHARED_FIT)
        x = [fit.scales.get(k, 1.0) for k in self.inverse] + [fit.values.get(k, 0.0) for k in self.values]
        for c, obs, base in self.tables:
            if c["name"] in self.free:
                consts = fit.constants(base)
                x.append(-sum(math.log(o.measured_s / predicted_s(o, consts)) for o in obs) / len(obs))
        return x + [0.0] * len(self.per_run)

    def random_start(self, rng: "np.random.Generator") -> list[float]:
        eff = [rng.uniform(0.5, 1.0) * u for u in self.upper[:len(self.inverse)]]
        vals = [max(m, 1e-9) * rng.uniform(0.3, 2.0) for m in self.median]
        return eff + vals + [0.0] * len(self.free) + [0.0] * len(self.per_run)

    def solve(self, x0: Sequence[float]) -> tuple[float, "np.ndarray"]:
        finite_upper = [u if math.isfinite(u) else 1e30 for u in self.upper]
        start = np.clip(np.array(x0, dtype=float), self.lower, finite_upper)
        r = least_squares(self.residuals, start, bounds=(self.lower, self.upper), x_scale="jac", diff_step=1e-4,
                          max_nfev=4000)
        return float(np.sum(r.fun ** 2)), r.x


def held_out_table(per_run_cost: bool) -> Iterator[tuple[validation.TableScore, float, float]]:
    """Per table, as each is done: its held-out score with the solver's fit to the other tables
    (started from the alternation's), and the objective of the alternation's fit and of the solver's."""
    tables = validation._tables()
    for i, (case, obs, base) in enumerate(tables):
        rest = Problem(tables[:i] + tables[i + 1:], per_run_cost)
        start = rest.shipped()
        cost, x = rest.solve(start)
        score = validation.score(case, obs, [predicted_s(o, rest.constants(x, base)) for o in obs])
        yield score, float(np.sum(rest.residuals(start) ** 2)), cost


def at_goal(s: validation.TableScore) -> bool:
    return s.ordered == s.pairs and s.max_ratio_error <= validation.GOAL_RATIO_ERROR


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=12, help="random starts besides the shipped fit")
    ap.add_argument("--seed", type=int, default=1, help="the random starts' seed")
    ap.add_argument("--held-out", action="store_true", help="also the leave-one-table-out table with the solver")
    ap.add_argument("--per-run-cost", action="store_true",
                    help="a free additive cost per run for every table timed as whole runs")
    args = ap.parse_args()
    if least_squares is None:
        print("error: this bench needs scipy (pip install scipy); sporch itself does not", file=sys.stderr)
        sys.exit(2)
    if args.starts < 0:
        print(f"error: --starts must be >= 0 (got {args.starts})", file=sys.stderr)
        sys.exit(2)
    problem = Problem(validation._tables(), args.per_run_cost)
    x_shipped = problem.shipped()
    shipped_cost = float(np.sum(problem.residuals(x_shipped) ** 2))
    cost, x = problem.solve(x_shipped)
    print(f"{'start':24s} {'objective':>10s}")
    print(f"{'shipped fit (no solve)':24s} {shipped_cost:10.4f}")
    print(f"{'solver from shipped':24s} {cost:10.4f}")
    rng = np.random.default_rng(args.seed)
    for i in range(args.starts):
        c, _ = problem.solve(problem.random_start(rng))
        print(f"{'solver from random ' + str(i + 1):24s} {c:10.4f}", flush=True)
    moved = [(n, a, b) for n, a, b in zip(problem.names, x_shipped, x)
             if max(abs(a), abs(b)) > 1e-9 and abs(b - a) > 0.01 * max(abs(a), abs(b))]
    print("\nconstants the solver moves by more than 1% from the shipped fit:")
    for n, a, b in moved:
        print(f"  {n:48s} {a:12.5g} -> {b:12.5g}")
    if args.held_out:
        shipped_scores = {s.name: s for s in validation.leave_one_table_out()}
        print(f"\n{'held out':34s} {'shipped':>11s} {'solver':>11s} {'objective of the rest: shipped -> solver':>42s}")
        rows = []
        for s, before, after in held_out_table(args.per_run_cost):
            rows.append((s, before, after))
            a = shipped_scores[s.name]
            print(f"{s.name:34s} {f'{a.ordered}/{a.pairs} {a.max_ratio_error:.0%}':>11s} "
                  f"{f'{s.ordered}/{s.pairs} {s.max_ratio_error:.0%}':>11s} {before:32.4f} -> {after:.4f}", flush=True)
        print(f"at the goal: shipped {sum(map(at_goal, shipped_scores.values()))}/{len(shipped_scores)}, "
              f"solver {sum(at_goal(s) for s, _, _ in rows)}/{len(rows)}")


if __name__ == "__main__":
    main()
