"""The cost model's prediction in words: the step beside the peak-rate one (and why it may be
below it), the terms per step, every phase of the job, its GPU-hours (``sporch plan``'s estimates,
``campaign plan``'s budget)."""

from __future__ import annotations

from sporch.orchestrator.contract.estimates_section import Estimates, PredictedTime
from sporch.orchestrator.plan.cost import TERMS
from sporch.orchestrator.plan.phase_cost import PHASES

#: What each phase is, after its seconds (``sporch plan``).
PHASE_WORDS = {
    "startup": "process start, imports, process-group init",
    "stage": "weights copied to each node's disk",
    "load": "weights read and moved to the GPUs",
    "encode": "text encoders",
    "denoise": "denoising",
    "switch": "expert switch (offloaded)",
    "decode": "VAE decode",
    "save": "media written",
}
#: Phases shown only when the job has them.
OPTIONAL_PHASES = ("stage", "switch")


def band_text(pred: PredictedTime) -> str:
    """' ± 9% (held-out H100 compiled tables)': the validation's band of a prediction, or ''."""
    return f" ± {pred.band:.0%} ({pred.band_basis})" if pred.band else ""


def seconds_text(s: float) -> str:
    """Seconds for people, never in exponent notation: ``0.123 s``, ``86.5 s``, ``5.3 min``, ``2.1 h``."""
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    if s >= 600:
        return f"{s / 60:.1f} min"
    if s >= 10:
        return f"{s:.1f} s"
    return f"{s:.3f} s"


def ms_text(ms: float) -> str:
    """Milliseconds (or seconds) for a table column, never in exponent notation: ``0.520``, ``86.5``,
    ``10,360``."""
    if ms >= 1000:
        return f"{ms:,.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    if ms == 0:
        return "0"
    text = f"{ms:#.3g}"
    return text if "e" not in text else f"{ms:.6f}".rstrip("0")


def gpu_hours_text(h: float) -> str:
    """GPU-hours for people: ``0.0021``, ``2.81``, ``1,234``."""
    if h >= 99.95:  # what 3 significant digits would round to 100
        return f"{h:,.0f}"
    if h == 0:
        return "0"
    text = f"{h:#.3g}" if h >= 0.01 else f"{h:#.2g}"
    return text if "e" not in text else f"{h:.8f}".rstrip("0")


def peak_rate_text(e: Estimates) -> str:
    """The planner's peak-rate step (compute at peak FLOP/s + all-to-all + ring at nominal link
    rates, added up) and, when the prediction is below it, why: the ring's transfers hide behind
    the attention blocks, which the peak-rate step counts in full."""
    comm, ideal = e.communication, e.ideal_s_per_step
    text = (f"{ideal:.3f} s: compute {e.compute.compute_s_per_step_ideal:.3f} + all-to-all "
            f"{comm.all_to_all_s_per_step_ideal:.3f} + ring {comm.ring_s_per_step_ideal:.3f} s at peak and "
            "nominal rates, added up")
    pred = e.predicted
    if pred is not None and pred.step_s < ideal:
        hidden = comm.ring_s_per_step_ideal - pred.breakdown_s_per_step.ring_exposed
        text += (f"; the prediction is below it: {hidden:.3f} s of ring transfers hide behind the attention "
                 "blocks (only the exposed part counts)" if hidden > 0 else
                 "; the prediction is below it: the fitted efficiencies exceed the peak-rate assumptions")
    return text


def prediction_rows(e: Estimates, world_size: int = 0) -> list[tuple[str, str]]:
    """The cost model's prediction beside the peak-rate step, its terms per step and the job's
    phases (sporch.orchestrator.plan.cost, plan/phase_cost.py)."""
    pred = e.predicted
    if pred is None:
        return []
    rows = [("predicted step", f"{pred.step_s:.3f} s" + band_text(pred) + f", {pred.constants}")]
    if e.ideal_s_per_step:
        rows.append(("  peak-rate step", peak_rate_text(e)))
    for term in TERMS:
        rows.append((f"  {term.replace('_', ' ')}", f"{getattr(pred.breakdown_s_per_step, term):.3f} s"))
    return rows + job_rows(pred, world_size)


def job_rows(pred: PredictedTime, world_size: int = 0) -> list[tuple[str, str]]:
    """The predicted job: its wall time and GPU-hours, then each phase's seconds."""
    hours = f"; {gpu_hours_text(pred.gpu_hours)} GPU-hours on {world_size} GPUs" if pred.gpu_hours and world_size else ""
    band = f" ± {pred.band:.0%}" if pred.band else ""
    rows = [("predicted job", f"{seconds_text(pred.job_s)}{band}{hours}")]
    phases = pred.phases_s
    if phases is None:  # a plan written before the phases: its job is steps, fixed costs and decode
        extra = [f"fixed {pred.fixed_s:.3g} s"] if pred.fixed_s else []
        extra += [f"expert switch {pred.switch_s:.3g} s"] if pred.switch_s else []
        return [("predicted job", f"{pred.job_s:.1f} s" + (f" incl. {', '.join(extra)}" if extra else ""))]
    for ph in PHASES:
        s = getattr(phases, ph)
        if ph in OPTIONAL_PHASES and not s:
            continue
        steps = round(s / pred.step_s) if ph == "denoise" and pred.step_s else 0
        words = f"{steps} steps x {pred.step_s:.3f} s" if steps else PHASE_WORDS[ph]
        rows.append((f"  {ph}", f"{seconds_text(s)} ({words})"))
    if pred.fixed_s:
        rows.append(("  fixed", f"{seconds_text(pred.fixed_s)} (the calibration's per-job cost)"))
    return rows
