"""The campaign report: one folder holding the CSV table (:mod:`.report_csv`), the plots (PNG,
:mod:`.report_plot_images`, and their data in plots.json, :mod:`.report_plot_data`), one HTML page
(:mod:`.report_page`) and, with a history, history.json; its files' names: :mod:`.report_files`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from sporch.orchestrator.campaign.collect import Row
from sporch.orchestrator.campaign.report_csv import write_csv
from sporch.orchestrator.campaign.report_files import CSV_FILE, HISTORY_FILE, HTML_FILE, PLOT_DATA_FILE, write_text
from sporch.orchestrator.campaign.report_page import write_html
from sporch.orchestrator.campaign.report_plot_data import plot_data
from sporch.orchestrator.campaign.report_plot_images import draw_plots
from sporch.orchestrator.errors import SporchError


def build_report(rows: list[Row], folder: Path, title: str,
                 history: Sequence[dict[str, Any]] = (), published: Sequence[dict[str, Any]] = ()) -> dict[str, Path]:
    """CSV, plots and HTML page into ``folder`` (with ``history``, trends of points run more
    than once, also history.json); returns their paths by name. A file that cannot be written
    (a full disk) is a one-line SporchError; no file is left half-written."""
    try:
        csv_path = write_csv(rows, folder / CSV_FILE)
        plots = draw_plots(plot_data(rows), folder)
        html = write_html(rows, plots, folder / HTML_FILE, title, history, published)
        extra = {}
        if history:
            extra["history_json"] = write_text(folder / HISTORY_FILE, json.dumps(list(history), indent=1))
        else:
            (folder / HISTORY_FILE).unlink(missing_ok=True)  # an earlier report's, no longer true
    except OSError as exc:
        raise SporchError(f"cannot write the report into {folder} ({exc.strerror or exc}); "
                          "free some space or pick another folder with --out") from None
    return {"csv": csv_path, "html": html, "plots_json": folder / PLOT_DATA_FILE, **plots, **extra}
