"""Points' trends over time (:mod:`.history_view`) drawn as one PNG: ``campaign history --plot``
and the report page's history section."""

from __future__ import annotations

from typing import Any, Sequence


def draw_history(docs: Sequence[dict[str, Any]], out: Any, *, small: bool = False) -> None:
    """Trends (:func:`.history_view.trend_doc`) as one PNG written to ``out`` (a path or a file
    object): one panel per point, its runs in time order (ticks: date and git revision), the
    rolling baseline dashed, runs worse than it by more than the threshold in red."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
        n = max(len(docs), 1)
        fig, axes = plt.subplots(n, 1, figsize=(5, 2.6) if small else (8, 3.2 * n), layout="constrained",
                                 squeeze=False)
        for ax, doc in zip(axes[:, 0], docs):
            runs = doc["runs"]
            xs = list(range(len(runs)))
            ys = [r["value"] if r["value"] is not None else float("nan") for r in runs]
            base = [r["baseline"] if r["baseline"] is not None else float("nan") for r in runs]
            ax.plot(xs, ys, marker="o", label=doc["metric"])
            ax.plot(xs, base, linestyle="--", marker="_", markersize=12, color="gray", label=f"baseline (median of last {doc['k']})")
            bad = [(x, y) for x, y, r in zip(xs, ys, runs) if r["regressed"]]
            if bad:
                ax.plot(*zip(*bad), linestyle="none", marker="o", color="red", label="regressed")
            ax.set_xticks(xs, [f"{r['when'][5:10]}\n{(r['git_revision'] or '')[:7]}" for r in runs],
                          fontsize=6 if small else 7)
            ax.set_ylabel(f"{doc['metric']} ({doc['unit']})", fontsize=7 if small else 9)
            ax.set_title(f"{doc['id']} ({doc['campaign']})", fontsize=8 if small else 10)
            ax.legend(fontsize=6 if small else 7)
        try:
            fig.savefig(out, dpi=100, format="png")
        finally:
            plt.close(fig)
