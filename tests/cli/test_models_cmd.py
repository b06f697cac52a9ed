"""``sporch models``: one row per family of the registry, read from the family records and the
planner's rules (orchestrator/plan/family_table.py), fitting the terminal; docs/model.md's family
table lists the same families in the same order."""

from __future__ import annotations

import json
import re

import pytest

from sporch.orchestrator.models.families import FAMILIES
from tests.testutil import ROOT


def test_models_json_rows_follow_the_records(run_cli):
    code, out, err = run_cli("models", "--json")
    assert code == 0, err
    rows = {r["family"]: r for r in json.loads(out)}
    assert list(rows) == [f.name for f in FAMILIES]
    # one model path: every family runs its diffusers class (verify, benchmark and inference) and
    # generate through its diffusers pipeline; no column says which path
    for fam in FAMILIES:
        row = rows[fam.name]
        assert "path" not in row and row["classes"] == list(fam.classes)
        assert row["workloads"] == ["verify", "benchmark", "inference"] + (["generate"] if fam.pipeline_class else [])
        assert row["presets"] == [p.name for p in fam.presets] and row["cache"] == list(fam.step_cache)
    assert {"wan2.1-i2v-14b-720p", "tiny"} <= set(rows["wan"]["presets"]) and "tiny-flux" in rows["flux"]["presets"]
    assert rows["wan"]["pipeline"] == "WanPipeline / WanImageToVideoPipeline"
    assert rows["wan"]["vae"] == ["leader", "parallel", "tiled"]
    assert rows["flux"]["cfg"] == "none"  # guidance-distilled
    assert rows["qwen-image"]["pipeline"] == "QwenImagePipeline" and "generate" in rows["qwen-image"]["workloads"]
    assert "fbcache" in rows["cogvideox"]["cache"] and "fbcache" in rows["wan"]["cache"]
    # every step cache on every family (SD3's and PixArt's pipelines open no cache context: the default one)
    every = ["fbcache", "teacache", "taylorseer", "magcache"]
    assert rows["sd3"]["cache"] == rows["pixart"]["cache"] == every and rows["sd3"]["cache_refusal"] == ""
    assert rows["ltx-video"]["cfg"] == "1/2" and rows["hunyuanvideo"]["cfg"] == "none"
    assert rows["sd3"]["split_plan"] == "SD3Transformer2DModel: shipped table"
    assert rows["ltx-video"]["split_plan"].endswith("the class's _cp_plan")
    assert rows["wan"]["split_plan"] == "WanTransformer3DModel: the class's _cp_plan"
    assert all(len(set(r["presets"])) == len(r["presets"]) for r in rows.values())


@pytest.mark.parametrize("columns", [80, 120])
def test_models_table_fits_the_terminal(run_cli, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    code, out, err = run_cli("models")
    assert code == 0, err
    assert max(len(line) for line in out.splitlines()) <= columns
    for fam in FAMILIES:
        assert fam.name in out
    assert "…" not in out  # folded, never cut


def test_docs_family_table_lists_the_registry():
    text = (ROOT / "docs" / "model.md").read_text(encoding="utf-8")
    header = text.index("| family | classes | split plan |")
    rows = re.findall(r"^\| `([a-z0-9.-]+)` \|", text[header:].split("\n\n")[0], flags=re.M)
    assert rows == [f.name for f in FAMILIES]
