"""The report's one self-contained HTML page (report.html).

It opens with the summary (:mod:`.summary`), then the table, the plots as data URIs, the
reference checks and the points that repeat a published measurement. With a history
(:mod:`.history_store`: points the store holds more than one run of), the page also gets a
history section: per point its runs' values, rolling baseline and ratio, and a small plot
(:mod:`.history_plot`).
"""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any, Sequence

from sporch.orchestrator.campaign import summary
from sporch.orchestrator.campaign.collect import Row, columns, format_value, short_value
from sporch.orchestrator.campaign.history_plot import draw_history
from sporch.orchestrator.campaign.reference_checks import checks, counts
from sporch.orchestrator.campaign.report_cells import check_cells, published_cells
from sporch.orchestrator.campaign.report_columns import COLUMN_GROUPS, column_group
from sporch.orchestrator.campaign.report_files import write_text
from sporch.orchestrator.paths import templates_dir

HTML_TEMPLATE = "campaign_report.html.j2"
#: Points whose history the page shows (those with a regressed last run first).
HISTORY_POINTS = 50


def _history_section(history: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The page's history entries: a plot (base64 PNG) and the rows of each point's table."""
    out = []
    ordered = sorted(history, key=lambda d: (not d["runs"][-1]["regressed"], d["id"]))
    for doc in ordered[:HISTORY_POINTS]:
        png = io.BytesIO()
        draw_history([doc], png, small=True)
        out.append({"doc": doc, "image": base64.b64encode(png.getvalue()).decode("ascii"),
                    "runs": [{**r, "value_text": short_value(r["value"]), "baseline_text": short_value(r["baseline"]),
                              "ratio_text": f"{r['ratio']:.3f}" if r["ratio"] is not None else "",
                              "revision": (r["git_revision"] or "")[:10]} for r in doc["runs"]]})
    return out


def _summary_lines(rows: list[Row]) -> list[dict[str, Any]]:
    """The summary's lines (:mod:`.summary`) with their cells as text for people."""
    out = []
    for s in summary.sizes(rows):
        out.append({"s": s, "best_text": short_value(s.best_ms), "default_text": short_value(s.default_ms),
                     "one_text": short_value(s.one_gpu_ms), "vs_default": summary.ratio_text(s.vs_default),
                     "vs_one": summary.ratio_text(s.vs_one_gpu)})
    return out


def write_html(rows: list[Row], plots: dict[str, Path], path: Path, title: str,
               history: Sequence[dict[str, Any]] = (), published: Sequence[dict[str, Any]] = ()) -> Path:
    """One self-contained page: the summary (:mod:`.summary`), the table (same cells as the CSV,
    in column groups a reader shows or hides, sortable by any column), the plots as data URIs,
    the history of the points with more than one run, and the points that repeat a published
    measurement (:mod:`.published_points`)."""
    import jinja2

    cols = columns(rows)
    found = checks(rows)
    table = []
    for r in rows:
        cells = []
        for c in cols:
            group = column_group(c)
            value = r.cell(c)
            bound = r.bounds.get(c)
            cells.append({
                "text": short_value(value), "exact": format_value(value),
                "verdict": r.verdicts.get(c, "") if c not in ("reference",) else value,
                "title": f"reference {bound.text()}" if bound else "", "group": group,
            })
        table.append({"id": r.id, "cells": cells, "error": r.error})
    images = {name: base64.b64encode(p.read_bytes()).decode("ascii") for name, p in plots.items()}
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    groups = [{"name": n, "what": w, "shown": shown} for n, w, shown in COLUMN_GROUPS
              if any(column_group(c) == n for c in cols)]
    html = env.get_template(HTML_TEMPLATE).render(title=title, columns=[
                                                      {"name": c, "group": column_group(c), "parts": c.split("_")}
                                                      for c in cols],
                                                  rows=table, images=images, groups=groups,
                                                  sizes=_summary_lines(rows), fingerprint=summary.fingerprint(rows),
                                                  history=_history_section(history),
                                                  history_more=max(len(history) - HISTORY_POINTS, 0),
                                                  published=[published_cells(p) for p in published],
                                                  checks=[check_cells(c) for c in found], check_counts=counts(found))
    return write_text(path, html)
