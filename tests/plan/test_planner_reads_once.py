"""The planner reads the checkpoint's metadata once per plan: with every parallel dimension ``auto``
the layout search plans many candidates, each from the model resolved before it (issue 33, item 3).

Files opened are counted with an audit hook (``open`` events), so the count is of real reads,
whatever function reads them."""

from __future__ import annotations

import json
import struct
import sys
from collections import Counter
from pathlib import Path
from typing import Optional

from sporch.orchestrator.config.cluster import find_cluster
from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.plan import planner

# a tiny diffusers Wan transformer config (tests/plan/test_experts.py's)
CONFIG = {"_class_name": "WanTransformer3DModel", "num_attention_heads": 4, "attention_head_dim": 16,
          "num_layers": 2, "ffn_dim": 64, "in_channels": 4, "out_channels": 4, "patch_size": [1, 2, 2],
          "text_dim": 32, "freq_dim": 256, "eps": 1e-6, "qk_norm": "rms_norm_across_heads", "cross_attn_norm": True}

_opened: Optional[Counter] = None


def _audit(event: str, args: tuple) -> None:
    if _opened is not None and event == "open" and isinstance(args[0], (str, Path)):
        _opened[Path(args[0]).name] += 1


sys.addaudithook(_audit)


def safetensors_file(path: Path, tensors: dict[str, list[int]]) -> Path:
    """A float32 safetensors file (the format: header length, JSON header, data): zeros, but a
    scalar (a LoRA alpha) is 4.0, as a zero alpha is refused."""
    header, offset, scalars = {}, 0, []
    for name, shape in tensors.items():
        size = 4 * (shape[0] * shape[1] if len(shape) == 2 else 1)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        if not shape:
            scalars.append(offset)
        offset += size
    text = json.dumps(header).encode()
    data = bytearray(offset)
    for at in scalars:
        struct.pack_into("<f", data, at, 4.0)
    path.write_bytes(struct.pack("<Q", len(text)) + text + bytes(data))
    return path


def job(tmp_path: Path) -> dict:
    weights = tmp_path / "wan"
    weights.mkdir()
    (weights / "config.json").write_text(json.dumps(CONFIG))
    key = "lora_unet_blocks_0_self_attn_q"
    lora = safetensors_file(tmp_path / "adapter.safetensors", {f"{key}.lora_down.weight": [2, 64],
                                                               f"{key}.lora_up.weight": [64, 2], f"{key}.alpha": []})
    return {"name": "reads", "model": {"weights": str(weights), "lora": [{"path": str(lora)}]},
            "parallel": {d: "auto" for d in ("dp", "cfg", "ring", "ulysses")},
            "workload": {"kind": "inference", "frames": 9, "height": 64, "width": 64, "guidance_scale": 5.0,
                         "batch": 2, "dtype": "bfloat16"}}


def opened_by(fn, *args):
    """(what ``fn(*args)`` returns, the names of the files it opened, counted)."""
    global _opened
    _opened = Counter()
    try:
        return fn(*args), _opened
    finally:
        _opened = None


def test_plan_with_every_dim_auto_reads_config_json_and_the_adapter_once(tmp_path):
    spec, cluster = job_from_dict(job(tmp_path), "<test>"), find_cluster("a100x8")
    model, once = opened_by(planner.resolve_job_model, spec)
    assert model.lora and model.depth == 2 and once["config.json"] == 1 and once["adapter.safetensors"] >= 1
    plan, opened = opened_by(planner.make_plan, cluster, spec)
    assert "auto chose" in plan.estimates.layout_choice  # a search over several candidates
    assert opened["config.json"] == 1, opened
    assert opened["adapter.safetensors"] == once["adapter.safetensors"], opened
    (_ctx, ranked), opened = opened_by(planner.rank_feasible, cluster, spec)
    assert len(ranked) > 1
    assert opened["config.json"] == 1 and opened["adapter.safetensors"] == once["adapter.safetensors"], opened
