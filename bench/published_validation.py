"""The cost model's leave-one-table-out validation on the published tables, and the shipped fit.

    python bench/published_validation.py [--write-fit]

Prints, per published table (orchestrator/plan/data/published.yaml), the pairs measured more than
10% apart that a fit to all the *other* tables orders rightly and the largest step-time ratio
error against the table's fastest point (the same table as ``sporch predict --validate``).
``--write-fit`` writes the one fit to every table, the defaults every GPU row carries, to
orchestrator/plan/data/fitted.yaml. No GPU: the tables are public measurements.
"""

from __future__ import annotations

import argparse

from sporch.orchestrator.plan.cost import FITTED_TABLE
from sporch.orchestrator.plan.validation import all_tables_fit, fitted_text, leave_one_table_out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write-fit", action="store_true", help=f"write the fit to all tables to {FITTED_TABLE}")
    args = ap.parse_args()
    print(f"{'table':34s} {'gpu':8s} {'mode':9s} {'ordered':>8s} {'max ratio err':>14s}")
    scores = leave_one_table_out()
    for s in scores:
        print(f"{s.name:34s} {s.gpu:8s} {'compiled' if s.compiled else 'eager':9s} {s.ordered:>4d}/{s.pairs:<3d}"
              f" {s.max_ratio_error:>14.0%}")
    if args.write_fit:
        fit = all_tables_fit()
        FITTED_TABLE.write_text(fitted_text(fit, scores), encoding="utf-8")
        print(f"wrote {FITTED_TABLE}")


if __name__ == "__main__":
    main()
