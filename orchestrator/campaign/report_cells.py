"""Records of the report with their cells as text for people: the reference checks and the points
that repeat a published measurement (the page, and the terminal's published table)."""

from __future__ import annotations

from typing import Any

from sporch.orchestrator.campaign.collect import short_value
from sporch.orchestrator.campaign.reference_checks import Check


def check_cells(c: Check) -> dict[str, Any]:
    """A reference check with its cells as text for people."""
    return {**{k: getattr(c, k) for k in ("id", "gpus", "layout", "metric", "reference", "band", "measured",
                                          "verdict", "ratio", "why")},
            "measured_text": short_value(c.measured) if c.measured is not None else "-",
            "ratio_text": f"{c.ratio:.3g}x" if c.ratio is not None else "-"}


def published_cells(p: dict[str, Any]) -> dict[str, Any]:
    """A published-measurement entry with its cells as text for people."""
    err = p.get("predicted_error")
    return {**p, "published_text": short_value(p["published_s"]), "predicted_text": short_value(p.get("predicted_s")),
            "error_text": f"{err:+.1%}" if err is not None else "",
            "measured_text": short_value(p.get("measured_denoise_s"))}
