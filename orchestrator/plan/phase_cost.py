"""The phases of a job besides its denoising steps, as a linear form over the cost model's
constants (docs/plan.md, "Every phase of a job"). Per job, on a replica's busiest rank (dp
replicas run side by side):

    startup = startup_s + process_group_s x log2(world)          process start, imports, CUDA
                                                                  context; rendezvous and communicators
    stage   = the staging copy (estimates.staging.s: nodes x checkpoint / shared file system)
    load    = load_fixed_s + read + copy to the GPU:
              read = nodes x checkpoint bytes / the shared file system (every node reads at once),
                     or bytes x local_read_s_per_gb from the node's disk after staging
              copy = the GPU's share (sharded: 1/n; the experts resident: both) / host <-> GPU rate
              (the one model path loads the text encoders and the VAE here too; the hand-built one
              loads its encoders inside encode and its VAE inside decode, as the runtime times them)
    encode  = encode_fixed_s + the text encoders' (and image encoder's) FLOPs over one replica's
              prompts (x2 with CFG: the negative prompt) at peak x encode_efficiency on the leader
              or a sharded group (+ the encoder's (n-1)/n gathered over the link), or
              x cpu_encode_s_per_tflop on the host
    denoise = loop steps x the predicted step (plan/cost.py)
    switch  = the expert switch's host <-> GPU copies (Wan2.2 A14B offloaded; plan/experts.py)
    decode  = decode_fixed_s + the busiest decoding rank's pixels x decode_bytes_per_pixel (video) or
              image_decode_bytes_per_pixel (image) / HBM bandwidth (+ decode_flops_per_pixel / peak);
              tiled: x (4/3)^2 (the tiles' overlaps), parallel: its rows + a halo row, and the
              frames gathered to the leader over the link
    save    = save_fixed_s + output megapixels x frames x save_s_per_mpixel (the MP4 or PNG writer)

Encode, decode (and ``fixed_s``) apply to a job timed end to end (generate, inference), save to a
generate job. Each phase is sum(feature x parameter) over the constants it uses (1 / value for the
efficiencies) plus what no constant scales (descriptor rates: reading, copying, staging, switching).
"""

from __future__ import annotations

import math
from typing import Mapping

from sporch.orchestrator.plan.cost_inputs import CostInputs
from sporch.orchestrator.plan.phase_inputs import PhaseInputs

#: A job's phases in the order they run (the runtime's names for those it times: metrics.stages).
PHASES = ("startup", "stage", "load", "encode", "denoise", "switch", "decode", "save")
#: The phases a published end-to-end table times: one generation, its pipeline already loaded.
GENERATION = ("encode", "denoise", "switch", "decode")
#: The constants of the phases other than denoise (the GPU table's columns).
PHASE_CONSTANTS = ("startup_s", "process_group_s", "load_fixed_s", "local_read_s_per_gb", "encode_efficiency",
                   "cpu_encode_s_per_tflop", "encode_fixed_s", "decode_fixed_s", "save_s_per_mpixel", "save_fixed_s")
#: The VAE's decode: a video VAE's FLOPs and bytes per output pixel x frame, an image VAE's bytes per pixel.
DECODE = ("decode_flops_per_pixel", "decode_bytes_per_pixel", "image_decode_bytes_per_pixel")

Linear = tuple[dict[str, float], float]  # (feature per constant, seconds no constant scales)


def phases_of(x: CostInputs) -> PhaseInputs:
    return x.phases if x.phases is not None else PhaseInputs.bare(x.steps)


def _read(p: PhaseInputs, read_bytes: float, gpu_bytes: float) -> Linear:
    """Reading ``read_bytes`` per node and copying ``gpu_bytes`` to each GPU."""
    f: dict[str, float] = {}
    rest = gpu_bytes / (p.host_gb_per_s * 1e9)
    if p.staged:
        f["local_read_s_per_gb"] = read_bytes / 1e9
    else:
        rest += p.nodes * read_bytes / (p.storage_gb_per_s * 1e9)
    return f, rest


def _merge(a: Linear, b: Linear) -> Linear:
    f = dict(a[0])
    for k, v in b[0].items():
        f[k] = f.get(k, 0.0) + v
    return f, a[1] + b[1]


def linear_phases(x: CostInputs, c: Mapping[str, float]) -> dict[str, Linear]:
    """Every phase but denoise as (features, unscaled seconds); ``c`` gives the HBM bandwidth."""
    p = phases_of(x)
    out: dict[str, Linear] = {ph: ({}, 0.0) for ph in PHASES if ph != "denoise"}
    out["startup"] = ({"startup_s": 1.0, "process_group_s": math.log2(max(1, p.world))}, 0.0)
    out["stage"] = ({}, p.stage_s)
    out["switch"] = ({}, x.switch_s)
    load = _merge(({"load_fixed_s": 1.0}, 0.0), _read(p, p.dit_read_bytes, p.dit_gpu_bytes))
    encoders = _read(p, p.encoder_read_bytes, p.encoder_gpu_bytes) if p.encoder_read_bytes else ({}, 0.0)
    vae = _read(p, p.vae_read_bytes, p.vae_gpu_bytes) if p.vae_read_bytes else ({}, 0.0)
    out["load"] = _merge(_merge(load, encoders), vae)  # the whole pipeline is loaded before it runs
    if x.inference_kind:
        encode: dict[str, float] = {"encode_fixed_s": 1.0}
        if p.encoder_placement == "cpu":
            encode["cpu_encode_s_per_tflop"] = p.encode_flops / 1e12
        else:
            encode["encode_efficiency"] = p.encode_flops / x.peak_flops
            if p.encoder_placement == "sharded" and p.encode_degree > 1:
                gathered = p.encoder_bytes * (p.encode_degree - 1) / p.encode_degree
                encode["link_efficiency"] = gathered / (p.link_gb_per_s * 1e9)
        out["encode"] = (encode, 0.0)
        out["decode"] = _decode(x, p, c)
    if p.writes:
        out["save"] = ({"save_fixed_s": 1.0, "save_s_per_mpixel": x.pixels / 1e6}, 0.0)
    return out


def _decode(x: CostInputs, p: PhaseInputs, c: Mapping[str, float]) -> Linear:
    if not x.pixels:
        return {}, 0.0
    work = p.decode_work(x.pixels)
    hbm = c["hbm_gb_per_s"] * 1e9
    f = {"decode_fixed_s": 1.0}
    if x.video:
        f["decode_flops_per_pixel"] = work / x.peak_flops
        f["decode_bytes_per_pixel"] = work / hbm
    else:
        f["image_decode_bytes_per_pixel"] = work / hbm
    gathered = p.gathered_bytes(x.pixels)
    if gathered:
        f["link_efficiency"] = gathered / (p.link_gb_per_s * 1e9)
    return f, 0.0


def phase_times(x: CostInputs, c: Mapping[str, float]) -> dict[str, float]:
    """Seconds of every phase but denoise: :func:`linear_phases` evaluated, written out (a plan's
    prediction is made for every point of a campaign; tests/plan/test_cost_model.py holds the two
    equal)."""
    p = phases_of(x)
    staged = p.staged

    def read(read_bytes: float, gpu_bytes: float) -> float:
        per_node = read_bytes / 1e9 * (c["local_read_s_per_gb"] if staged else p.nodes / p.storage_gb_per_s)
        return per_node + gpu_bytes / (p.host_gb_per_s * 1e9)

    encoders = read(p.encoder_read_bytes, p.encoder_gpu_bytes) if p.encoder_read_bytes else 0.0
    vae = read(p.vae_read_bytes, p.vae_gpu_bytes) if p.vae_read_bytes else 0.0
    load = c["load_fixed_s"] + read(p.dit_read_bytes, p.dit_gpu_bytes) + encoders + vae
    encode = decode = save = 0.0
    if x.inference_kind:
        encode = c["encode_fixed_s"]
        if p.encoder_placement == "cpu":
            encode += p.encode_flops / 1e12 * c["cpu_encode_s_per_tflop"]
        else:
            encode += p.encode_flops / (x.peak_flops * c["encode_efficiency"])
            if p.encoder_placement == "sharded" and p.encode_degree > 1:
                gathered = p.encoder_bytes * (p.encode_degree - 1) / p.encode_degree
                encode += gathered / (p.link_gb_per_s * 1e9 * c["link_efficiency"])
        if x.pixels:
            work = p.decode_work(x.pixels)
            hbm = c["hbm_gb_per_s"] * 1e9
            decode = c["decode_fixed_s"] + (work / x.peak_flops * c["decode_flops_per_pixel"]
                                             + work / hbm * c["decode_bytes_per_pixel"] if x.video
                                             else work / hbm * c["image_decode_bytes_per_pixel"])
            decode += p.gathered_bytes(x.pixels) / (p.link_gb_per_s * 1e9 * c["link_efficiency"])
    if p.writes:
        save = c["save_fixed_s"] + x.pixels / 1e6 * c["save_s_per_mpixel"]
    return {"startup": c["startup_s"] + c["process_group_s"] * math.log2(max(1, p.world)), "stage": p.stage_s,
            "load": load, "encode": encode, "switch": x.switch_s, "decode": decode, "save": save}
