"""Human-readable views of a Plan (rich), shared by ``plan`` and ``submit --dry-run``."""

from __future__ import annotations

from typing import Any, Optional

from sporch.orchestrator.cli.common import fmt_int, human_bytes, plain_table
from sporch.orchestrator.cli.show_prediction import prediction_rows, seconds_text
from sporch.orchestrator.cli.terminal import labelled
from sporch.orchestrator.plan.cost import TERMS
from sporch.orchestrator.plan.cost_constants import cluster_constants
from sporch.orchestrator.plan.layouts import compact, short
from sporch.orchestrator.slurm.container import describe as describe_container
from sporch.orchestrator.contract.parallel import GROUP_DIMS
from sporch.orchestrator.contract.estimates_section import (
    ExpertsEstimate,
    PipelineEstimate,
    PipelinePart,
)
from sporch.orchestrator.contract.plan import Plan
from sporch.orchestrator.contract.sections import MEASURABLE_LINK_FIGURES
from sporch.orchestrator.contract.numbers import counted

#: Worlds up to this size print every rank; bigger ones print the first and last node.
FULL_RANK_TABLE = 32
#: Where the text of a summary line starts (``job       ...``): its label is padded to it.
LABEL = 10


def summary_lines(plan: Plan) -> list[str]:
    m, w, s, h = plan.model, plan.workload, plan.sequence, plan.heads
    c = plan.cluster
    name = m.preset or "custom"
    blocks = counted(m.depth, "block") + (f" + {m.single_depth} single" if m.single_depth else "")
    if w.seq_len is not None:
        shape = f"seq_len {fmt_int(w.seq_len)}"
    else:
        shape = f"{w.frames}x{w.height}x{w.width}"
    grid = "x".join(str(g) for g in s.grid)
    cfg = "CFG on" if w.cfg_enabled else "CFG off"
    lay = plan.layout
    pad = f", padded to {fmt_int(s.padded_len)} (+{s.pad})" if s.pad else ""
    if s.pad and getattr(s, "split", "padded") == "uneven":
        pad = f", split unevenly (unpadded; the attention pads the shorter chunks to {fmt_int(s.tokens_per_rank)})"
    per_rank = f"{fmt_int(s.tokens_per_rank)} per rank" if not s.pad or getattr(s, "split", "padded") != "uneven" \
        else f"{fmt_int(s.seq_len // s.degree)}-{fmt_int(s.tokens_per_rank)} per rank"
    text = f" + {fmt_int(s.text_len)} text tokens split with them" if getattr(s, "text_len", 0) else ""
    return [
        f"job       {plan.job.name} on {c.name}: {counted(plan.nodes, 'node')} x {counted(plan.gpus_per_node, 'GPU')} "
        f"({c.gpu.model}) = {plan.world_size} ranks",
        f"model     {name}: {m.attention} attention, {blocks}, hidden {m.hidden}, "
        f"{m.num_heads} heads x {m.head_dim} (kv {m.num_kv_heads}), ffn {m.ffn_dim}"
        + (f"; family {m.family}" if getattr(m, "family", None) else "")
        + (f", {m.diffusers_class}" if getattr(m, "diffusers_class", None) else ""),
        f"workload  {w.kind}, batch {w.batch}, {shape} -> grid {grid} = {fmt_int(s.seq_len)} tokens, "
        f"{w.steps} steps, guidance {w.guidance_scale:g} ({cfg}), {w.dtype}"
        + (f", low-noise guidance {w.guidance_scale_2:g}" if w.guidance_scale_2 is not None else ""),
        f"layout    dp {lay.dp} x cfg {lay.cfg} x ring {lay.ring} x ulysses {lay.ulysses} = {plan.world_size}"
        f"  ({short(lay)})",
        f"sequence  {fmt_int(s.seq_len)} tokens{pad}, {per_rank}{text}",
        f"heads     {h.num_heads} over ulysses {lay.ulysses}: {_runs(h.q_heads_per_rank)} per rank, "
        f"kv {h.num_kv_heads} ({h.kv_mode})",
        "weights   " + ("on every rank" if plan.placement.shard_degree <= 1 else
                        f"sharded over {plan.placement.shard_degree} ranks ({_shard_group(plan.placement)}), "
                        "FSDP2, one unit per block"),
    ] + ([f"experts   {_expert_words(m, plan.placement, w.kind)}"] if m.boundary_ratio is not None else []) \
      + ([f"timesteps one per token{_first_frame_words(w)}"] if m.expand_timesteps else []) \
      + ([f"pipeline  {_pipeline_words(plan.placement)}"] if w.kind == "generate" else []) \
      + [f"links     {links_words(c)}"] \
      + ([f"container {describe_container(c.container)}"] if c.container is not None else []) \
      + ([f"lossy     {'; '.join(lossy_options(plan))}"] if lossy_options(plan) else [])


def links_words(c: Any) -> str:
    """Where the plan's link figures come from, in one line: the ones a preflight measured (when,
    where, the calibration file: ``cluster.measured_links``), the rest the descriptor's rates and
    the cost model's latencies."""
    consts = cluster_constants(c)[0]
    words = {"intra_node_gb_per_s": f"intra-node {c.intra_node.gb_per_s:.4g} GB/s",
             "inter_node_gb_per_s": f"inter-node {c.inter_node.gb_per_s:.4g} GB/s",
             "a2a_latency_s": f"a2a latency {_latency(consts['a2a_latency_s'])}",
             "p2p_latency_s": f"hop latency {_latency(consts['p2p_latency_s'])}"}
    m = c.measured_links
    measured = m.figures if m is not None else []
    rest = [k for k in MEASURABLE_LINK_FIGURES if k not in measured]
    rates = [words[k] for k in rest if k.endswith("gb_per_s")]
    lats = [words[k] for k in rest if k.endswith("latency_s")]
    unmeasured = "; ".join(([f"descriptor's {', '.join(rates)}"] if rates else [])
                           + ([f"model's {', '.join(lats)}"] if lats else []))
    if m is None:
        return f"none measured: {unmeasured} (measure: `sporch preflight`, `sporch calibrate --links`)"
    return (f"measured {m.measured_at or '(date not recorded)'} by preflight {m.preflight} ({m.backend}, calibration "
            f"{m.calibration}): {', '.join(words[k] for k in measured)}" + (f"; {unmeasured}" if unmeasured else ""))


def _latency(seconds: float) -> str:
    """A latency constant in words: ``5 us``; 0 (a calibration held it at its bound) is no cost."""
    us = seconds * 1e6
    if us <= 0:
        return "none (0: a calibration found no fixed cost)"
    return f"{us:,.0f} us" if us >= 10 else f"{us:.3g} us"


def lossy_options(plan: Plan) -> list[str]:
    """The options on that trade quality for speed (each off by default), in words."""
    m, w = plan.model, plan.workload
    out = []
    if getattr(m, "quant", "none") != "none":
        out.append(f"model.quant {m.quant} (block weights in 1 byte, torchao)")
    if getattr(w, "attention_precision", "exact") != "exact":
        out.append(f"workload.attention_precision {w.attention_precision} (8-bit attention kernels allowed)")
    if w.cache is not None:
        out.append(f"workload.cache {w.cache.method} threshold {w.cache.threshold:g}")
    return out


def _first_frame_words(w) -> str:
    """A per-token-timestep model's (Wan2.2 TI2V) first frame, in words."""
    if w.kind == "generate" and w.image:
        return f"; the first latent frame is {w.image}'s, at timestep 0"
    return " (all equal without workload.image: text-to-video)"


def _expert_words(m, p, kind: str) -> str:
    """A two-expert model's switch and where the experts live, in words."""
    switch = (f"transformer (high noise) while t >= {m.boundary_ratio:g} x 1000, then transformer_2 (low noise)")
    if kind != "generate":
        return f"{switch}; {kind} runs transformer only"
    where = "both resident on the GPU" if p.experts == "resident" else "the idle one in host memory (offload)"
    return f"{switch}; {where}"


def _pipeline_words(p) -> str:
    """Where a generate job's text encoder and VAE run, in words."""
    text = {"leader": "text encoder on each replica's leader GPU",
            "sharded": f"text encoder sharded over each sequence group ({p.pipeline_degree} ranks, FSDP2)",
            "cpu": "text encoder on each leader's CPU"}[p.text_encoder]
    vae = {"leader": "VAE decode on the leader", "tiled": "VAE decoded in tiles on the leader",
           "parallel": f"VAE decode split by rows over the leader's sequence group ({p.pipeline_degree} ranks)"}[p.vae]
    return f"{text}; {vae}"


def _runs(values: list[int]) -> str:
    """[2, 2, 1] -> '2,2,1'; long uniform lists compress to '8 x 5'."""
    if len(set(values)) == 1:
        return f"{len(values)} x {values[0]}"
    out, prev, n = [], None, 0
    for v in values + [None]:
        if v == prev:
            n += 1
            continue
        if prev is not None:
            out.append(f"{n} x {prev}")
        prev, n = v, 1
    return " + ".join(out)


def groups_table(plan: Plan) -> Any:
    t = plain_table(title="groups")
    for col in ("dim", "size", "count", "first group", "nodes per group"):
        t.add_column(col, justify="right" if col in ("size", "count", "nodes per group") else "left")
    gpn = plan.gpus_per_node
    for dim in GROUP_DIMS:
        groups = plan.groups[dim]
        first = groups[0]
        ranks_text = ", ".join(str(r) for r in first[:8]) + (", ..." if len(first) > 8 else "")
        spans = sorted({len({r // gpn for r in g}) for g in groups})
        t.add_row(dim, str(len(first)), str(len(groups)), f"[{ranks_text}]", "/".join(str(x) for x in spans))
    return t


def rank_table(plan: Plan, all_ranks: bool = False) -> Any:
    t = plain_table(title=f"ranks ({plan.world_size})")
    for col in ("rank", "node", "local", "dp", "cfg", "ring", "ulysses", "seq idx"):
        t.add_column(col, justify="right")
    ranks = list(plan.ranks)
    if not all_ranks and plan.world_size > FULL_RANK_TABLE:
        last_node = plan.nodes - 1
        keep = [r for r in ranks if r.node in (0, last_node)]
        head = [r for r in keep if r.node == 0]
        tail = [r for r in keep if r.node == last_node]
        rows: list[Any] = head + [None] + tail
        t.caption = f"nodes 1..{last_node - 1} omitted ({len(ranks) - len(keep)} ranks); --all-ranks shows them"
    else:
        rows = ranks
    for r in rows:
        if r is None:
            t.add_row(*(["..."] * 8))
            continue
        t.add_row(*(str(x) for x in (r.rank, r.node, r.local_rank, r.dp, r.cfg, r.ring, r.ulysses, r.sequence_index)))
    return t


def estimates_table(plan: Plan) -> Any:
    e = plan.estimates
    t = plain_table(title="estimates (per GPU)")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    if e is None:  # a plan built by hand
        return t
    work, comm, weights, mem = e.compute, e.communication, e.weights, e.memory
    rows = [
        ("tokens per rank", fmt_int(work.tokens_per_rank)),
        ("samples per rank per step", str(work.samples_per_rank)),
        ("all-to-all bytes / attention call", human_bytes(comm.all_to_all_bytes_per_rank)),
        ("ring bytes / attention call", human_bytes(comm.ring_bytes_per_rank)),
        ("attention calls per step", str(work.attention_calls_per_step)),
        ("parameters", _count(work.parameters)),
        ("parameter memory", human_bytes(mem.parameter_bytes_per_gpu) + _shard_note(plan)),
        ("activation memory", human_bytes(mem.activation_bytes_per_gpu)),
        (
            "total vs GPU memory",
            f"{mem.memory_gib_per_gpu:.1f} / {mem.gpu_memory_gib:g} GiB ({100 * mem.memory_fraction:.0f}%)"
            + ("" if mem.fits else " DOES NOT FIT"),
        ),
        ("ideal compute per step", f"{work.compute_s_per_step_ideal:.3f} s"),
        ("ideal all-to-all per step", f"{comm.all_to_all_s_per_step_ideal:.3f} s at {comm.all_to_all_gb_per_s:g} GB/s"),
        ("ideal ring per step", f"{comm.ring_s_per_step_ideal:.3f} s at {comm.ring_gb_per_s:g} GB/s"),
    ]
    if weights.weight_gather_bytes_per_rank_per_step:
        rows.append(("ideal weight gather per step", f"{weights.weight_gather_s_per_step_ideal:.3f} s at "
                     f"{weights.weight_gather_gb_per_s:g} GB/s"))
    rows += prediction_rows(e, plan.world_size)
    rows += expert_rows(e.experts)
    rows += pipeline_rows(e.pipeline)
    if e.staging is not None:
        st = e.staging
        rows.append(("weights staged per node", f"{human_bytes(st.bytes)} to {st.node_local_dir} on each of "
                     f"{counted(st.nodes, 'node')}: ~{st.s:.0f} s at {st.shared_fs_gb_per_s:g} GB/s shared"))
    for k, v in rows:
        t.add_row(k, v)
    return t


def expert_rows(x: Optional[ExpertsEstimate]) -> list[tuple[str, str]]:
    """A two-expert generate job: the experts' memory and the switch's copies."""
    if x is None:
        return []
    bw = f"{x.host_gb_per_s:g} GB/s host <-> GPU ({'cluster gpu.host_gb_per_s' if x.host_gb_per_s_source == 'cluster' else 'default'})"
    if x.placement == "resident":
        return [("experts (2, resident)", f"{human_bytes(x.gpu_bytes_per_gpu)} on the GPU; switch moves nothing")]
    return [("experts (2, offload)", f"{human_bytes(x.gpu_bytes_per_gpu)} on the GPU, "
             f"{human_bytes(x.host_bytes_per_gpu)} in host memory"),
            ("expert switch", f"{human_bytes(x.switch_bytes_per_gpu)} moved: {x.switch_s:.2f} s at {bw}, "
             "per prompt batch (and back before the next)")]


def _shard_note(plan: Plan) -> str:
    """How the parameters are held: every rank all of them, or sharded (FSDP2)."""
    p = plan.placement
    if p.shard_degree <= 1 or plan.estimates is None:
        return " (all on every rank)"
    w = plan.estimates.weights
    group = "the sequence group" if p.shard_weights == "sequence" else _shard_group(p)
    return (f" (1/{p.shard_degree} of {human_bytes(w.parameter_bytes_full)} sharded over {group}, "
            f"+ {human_bytes(w.parameter_bytes_gathered)} gathered while a block runs)")


def _shard_group(p) -> str:
    """The ranks one copy of the parameters is spread over, in words."""
    return "each replica's sequence group" if p.shard_weights == "sequence" else "all ranks"


def _ranks_text(part: PipelinePart) -> str:
    """``rank 0`` or ``ranks 0, 8, ...`` (the first eight)."""
    listed = ", ".join(map(str, part.ranks[:8])) + (", ..." if len(part.ranks) > 8 else "")
    return f"{'rank' if len(part.ranks) == 1 else 'ranks'} {listed}"


def pipeline_rows(pipe: Optional[PipelineEstimate]) -> list[tuple[str, str]]:
    """A generate job: where the text encoder and the VAE run, and the busiest rank's memory
    broken down (DiT parameters and activations, text encoder, VAE, decode)."""
    if pipe is None:
        return []
    rows = []
    for name, p in (("text_encoder", pipe.text_encoder), ("vae", pipe.vae)):
        if p.bytes is None:
            size = "size unknown"
        elif name == "text_encoder":
            per_rank = p.bytes_per_rank or 0
            size = human_bytes(p.bytes) + (f", {human_bytes(per_rank)} per rank" if 0 < per_rank < p.bytes else "")
            size += " in host memory" if p.host_bytes else ""
        else:
            size = f"{human_bytes(p.bytes)} + decode {human_bytes((p.decode_bytes or 0) + (p.frames_bytes or 0))}"
        rows.append((name.replace("_", " "), f"{p.what}, {p.placement or 'leader'}, on {_ranks_text(p)} ({size})"))
    if pipe.image_encoder is not None:  # Wan2.1 I2V's CLIP image encoder, on the leaders after the text encoder
        p = pipe.image_encoder
        rows.append(("image encoder", f"{p.what}, leader, on {_ranks_text(p)} ({human_bytes(p.bytes or 0)})"))
    busy = pipe.busiest_rank
    rows.append(("busiest rank (a leader)", human_bytes(pipe.leader_memory_bytes) + f", peak in {busy.peak_stage}"))
    for key, label in (("dit_parameters", "DiT parameters"), ("dit_activations", "DiT activations"),
                       ("text_encoder", "text encoder (encode)"), ("image_encoder", "image encoder (encode)"),
                       ("vae", "VAE parameters"),
                       ("vae_decode", "VAE decode + frames"), ("reserved", "CUDA context, workspaces")):
        if key != "image_encoder" or busy.image_encoder:
            rows.append((f"  {label}", human_bytes(getattr(busy, key))))
    return rows


def memory_options_table(plan: Plan) -> Any:
    """What ``auto`` tried before its choice (plan.estimates.memory_options), cheapest first."""
    t = plain_table(title="memory options auto tried (cheapest in time first)", title_justify="left")
    experts = plan.model.boundary_ratio is not None
    for col in ("shard_weights", "text_encoder", "vae", *(("experts",) if experts else ()), "GiB/GPU", "fits"):
        t.add_column(col, justify="right" if col == "GiB/GPU" else "left")
    for o in plan.estimates.memory.memory_options if plan.estimates is not None else ():
        t.add_row(o.shard_weights, o.text_encoder, o.vae, *((o.experts,) if experts else ()),
                  f"{o.memory_gib_per_gpu:.1f}", "yes" if o.fits else "no")
    return t


def print_plan(plan: Plan, con: Any, all_ranks: bool = False, ranks: bool = True) -> None:
    for line in summary_lines(plan):
        labelled(con, line[:LABEL].rstrip(), line[LABEL:])
    for w in plan.warnings:
        labelled(con, "warning", w, "yellow")
    if plan.placement.reason.startswith("auto:") and "does not fit" in plan.placement.reason:
        labelled(con, "note", "memory " + plan.placement.reason, "cyan")
    if plan.estimates is not None and plan.estimates.layout_choice:
        labelled(con, "note", plan.estimates.layout_choice, "cyan")
    con.print(groups_table(plan))
    if ranks:
        con.print(rank_table(plan, all_ranks))
    con.print(estimates_table(plan))
    if plan.estimates is not None and plan.estimates.memory.memory_options:
        con.print(memory_options_table(plan))


def _count(n: float) -> str:
    """1234 -> '1.23 K', 1.4e9 -> '1.40 B' (parameter counts)."""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f}"


#: Short column headers of the cost model's terms (plan --rank).
TERM_HEADERS = {"attention": "attn", "gemm": "gemm", "elementwise": "elem", "all_to_all": "a2a",
                "ring_merge": "merge", "ring_exposed": "ring exp", "overhead": "ovh",
                "eager_host": "host", "weight_gather": "gather"}


def _weights_cell(plan: Plan) -> str:
    """How a ranked layout holds the parameters (``all`` or ``1/n seq|world``), and where a
    generate job's text encoder (``te``) and VAE run when not on the leader's GPU."""
    p = plan.placement
    cell = "all" if p.shard_degree <= 1 else f"1/{p.shard_degree} {'seq' if p.shard_weights == 'sequence' else 'world'}"
    moved = [f"{label} {getattr(p, key)}" for key, label in (("text_encoder", "te"), ("vae", "vae"))
             if getattr(p, key) != "leader"]  # a generate job's encoder / VAE off the leader's GPU
    return ", ".join([cell, *moved])


def ranking_table(ranked: list, chosen: Any = None, requested: Any = None, wide: bool = False) -> Any:
    """``plan --rank``: every feasible layout, fastest predicted first (sporch.orchestrator.plan.ranking).
    The default columns fit 80 columns; ``wide`` adds the cost model's terms and the peak-rate step."""
    from rich.text import Text

    t = plain_table(title=f"layouts ranked by predicted s/step ({len(ranked)}; dp x cfg x ring x ulysses)",
                    title_justify="left")
    cols = ["#", "layout", "step", "±", "vs #1", "job", *([TERM_HEADERS[x] for x in TERMS] + ["peak-rate"] if wide else []),
            "weights", "GiB", "fits"]
    for c in cols:
        t.add_column(c, justify="left" if c in ("layout", "fits", "weights") else "right", no_wrap=c == "layout")
    best = ranked[0].step_s if ranked else 0.0
    for i, r in enumerate(ranked, 1):
        pred, e = r.predicted, r.plan.estimates
        mark = (" <-auto" if chosen is not None and r.layout == chosen else "") + (
            " <-job" if requested is not None and r.layout == requested else "")
        band = pred.band
        t.add_row(str(i), compact(r.layout) + mark, f"{r.step_s:.4g}", f"{band:.0%}" if band else "-",
                  f"{r.step_s / best - 1:+.0%}" if best else "-", seconds_text(r.job_s),
                  *([f"{getattr(pred.breakdown_s_per_step, x):.3g}" for x in TERMS] + [f"{e.ideal_s_per_step:.4g}"]
                    if wide else []),
                  _weights_cell(r.plan), f"{e.memory.memory_gib_per_gpu:.1f}", "yes" if r.fits else Text("no", style="red"))
    return t
