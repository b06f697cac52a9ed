"""The cost model's leave-one-table-out validation on the published tables, and the shipped fit.

    python bench/published_validation.py [--write-fit]
    python bench/published_validation.py [--error log] [--loss huber --delta 0.1] [--table-weight 1]
                                         [--ratios-only --scale-rounds 6]

Prints, per published table (orchestrator/plan/data/published.yaml), the pairs measured more than
10% apart that a fit to all the *other* tables orders rightly and the largest ratio error against
the table's fastest point (the same table as ``sporch predict --validate``); an end-to-end table
(seconds per generation) is judged end to end (encode + steps + decode), and beside it by the same
fit's steps alone, with the points of error the other phases take off and their share of the
most parallel layout's prediction; then
the absolute check: each step measured on a GPU (plan/data/measured_steps.yaml) beside its
prediction (plan/absolute_check.py). ``--write-fit`` writes the one fit to every table, the defaults every GPU row carries, to
orchestrator/plan/data/fitted.yaml. The other options fit with another objective than the
shipped one (docs/plan.md, "Fourth pass": what each gave held out); they cannot be written as
the defaults. No GPU: the tables are public measurements.
"""

from __future__ import annotations

import argparse
import sys

from sporch.orchestrator.plan.calibration import LOSSES, Objective
from sporch.orchestrator.plan.absolute_check import measured_steps, ranges
from sporch.orchestrator.plan.cost_constants import FITTED_TABLE
from sporch.orchestrator.plan.validation import (
    DEFAULT_CHOICE,
    GOAL_RATIO_ERROR,
    FitChoice,
    all_tables_fit,
    as_written,
    fitted_text,
    leave_one_table_out,
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write-fit", action="store_true", help=f"write the fit to all tables to {FITTED_TABLE}")
    ap.add_argument("--error", choices=("relative", "log"), default=DEFAULT_CHOICE.objective.error,
                    help="each point's error: predicted / measured - 1, or log(predicted / measured)")
    ap.add_argument("--loss", choices=LOSSES, default=DEFAULT_CHOICE.objective.loss, help="the loss of each error")
    ap.add_argument("--delta", type=float, default=DEFAULT_CHOICE.objective.delta,
                    help="huber / soft_l1 / l4: the error where the loss bends")
    ap.add_argument("--table-weight", type=float, default=DEFAULT_CHOICE.table_weight,
                    help="weight each point 1 / (points of its table) ** this (1: every table weighs the same)")
    ap.add_argument("--ratios-only", action="store_true", help="every table lends only its ratios (a free scale each)")
    ap.add_argument("--scale-rounds", type=int, default=DEFAULT_CHOICE.scale_rounds,
                    help="rounds of the alternation between the fit and the tables' free scales")
    args = ap.parse_args()
    if not args.delta > 0 or args.scale_rounds < 1:
        print(f"error: --delta must be > 0 and --scale-rounds >= 1 (got {args.delta}, {args.scale_rounds})",
              file=sys.stderr)
        sys.exit(2)
    choice = FitChoice(objective=Objective(args.error, args.loss, args.delta), table_weight=args.table_weight,
                       ratios_only=args.ratios_only, scale_rounds=args.scale_rounds)
    if args.write_fit and choice != DEFAULT_CHOICE:
        print("error: --write-fit writes the shipped objective's fit only; drop --error/--loss/--delta/"
              "--table-weight/--ratios-only/--scale-rounds", file=sys.stderr)
        sys.exit(2)
    print(f"{'table':34s} {'gpu':8s} {'mode':9s} {'ordered':>8s} {'max ratio err':>14s} {'steps only':>10s} "
          f"{'phases':>7s} {'not denoising':>13s}")
    scores = leave_one_table_out(choice=choice)
    for s in scores:
        e2e = (f" {s.denoise_only_error:>10.0%} {s.explained * 100:>+7.0f} {s.phase_share:>13.0%}" if s.end_to_end
               else f" {'-':>10s} {'-':>7s} {'-':>13s}")
        print(f"{s.name:34s} {s.gpu:8s} {'compiled' if s.compiled else 'eager':9s} {s.ordered:>4d}/{s.pairs:<3d}"
              f" {s.max_ratio_error:>14.0%}{e2e}")
    at_goal = [s for s in scores if s.ordered == s.pairs and s.max_ratio_error <= GOAL_RATIO_ERROR]
    worst = max(scores, key=lambda s: s.max_ratio_error)
    print(f"at the goal: {len(at_goal)}/{len(scores)} tables; largest held-out ratio error "
          f"{worst.max_ratio_error:.1%} ({worst.name})")
    fit = as_written(all_tables_fit()) if args.write_fit else None
    points = measured_steps(fit)  # predicted by the fit about to be written, else by the shipped one
    print(f"\n{'measured step (absolute check)':40s} {'runtime':9s} {'measured':>9s} {'predicted':>9s} {'error':>7s}")
    for m in points:
        print(f"{m.name:40s} {m.runtime:9s} {m.measured_s * 1e3:8.1f}ms {m.predicted_s * 1e3:7.1f}ms {m.error:>+7.0%}")
    if fit is not None:
        FITTED_TABLE.write_text(fitted_text(fit, scores, ranges(points)), encoding="utf-8")
        print(f"wrote {FITTED_TABLE}")


if __name__ == "__main__":
    main()
