"""The report's table as CSV (table.csv): every column of every row, exact values."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from sporch.orchestrator.campaign.collect import Row, columns, format_value
from sporch.orchestrator.campaign.report_files import write_text


def write_csv(rows: list[Row], path: Path) -> Path:
    fh = io.StringIO(newline="")
    w = csv.writer(fh)
    cols = columns(rows)
    w.writerow(cols)
    for r in rows:
        w.writerow([format_value(r.cell(c)) for c in cols])
    return write_text(path, fh.getvalue())
