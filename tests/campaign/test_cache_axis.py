"""``matrix.caches`` (issue 21): step caching swept as an axis beside layouts; the output
metrics of a cached point are against the uncached reference point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sporch.orchestrator.campaign.collect import collect, columns
from sporch.orchestrator.campaign.expand import expand
from sporch.orchestrator.campaign.outputs import pick_reference
from sporch.orchestrator.campaign.spec import load_campaign

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "campaigns" / "tiny-cache.yaml"


def test_the_example_sweeps_cache_x_layouts(monkeypatch):
    monkeypatch.chdir(ROOT)  # the example names its cluster file relative to the repository
    exp = expand(load_campaign(EXAMPLE))
    got = sorted((p.match_values()["layout"], p.match_values()["cache"]) for p in exp.points)
    caches = ["fbcache@0.45/max2", "none", "teacache@1.5"]
    assert got == sorted((lay, c) for lay in ("1x1x1x1", "1x1x2x1", "1x1x1x2") for c in caches)
    for p in exp.points:
        cache = p.plan.workload.cache
        assert (cache is None) == (p.match_values()["cache"] == "none")
        if cache is not None:
            assert cache.method in p.match_values()["cache"] and cache.threshold in (0.45, 1.5)
    assert len({p.id for p in exp.points}) == 9


def test_a_campaign_without_caches_keeps_its_point_ids(monkeypatch):
    """Adding the axis changes no id of a campaign that does not use it."""
    monkeypatch.chdir(ROOT)
    exp = expand(load_campaign(ROOT / "examples" / "campaigns" / "tiny-same-output.yaml"))
    assert all("cache" not in p.params and "cache" not in p.match_values() for p in exp.points)


class _Row:
    def __init__(self, id, layout, cache, gpus=1):
        self.id, self.values = id, {"layout": layout, "cache": cache, "gpus": gpus}


@pytest.mark.parametrize("reference", [None, "1x1x1x1"])
def test_the_reference_is_the_uncached_point(reference):
    rows = [_Row("a", "1x1x1x1", "fbcache@0.1"), _Row("b", "1x1x1x1", "none"), _Row("c", "1x1x2x1", "none", 2)]
    assert pick_reference(rows, reference).id == "b"
    assert pick_reference(rows, "a").id == "a"  # a point id is taken as named


def test_report_rows_carry_the_cache_column(tmp_path):
    np = pytest.importorskip("numpy")
    pytest.importorskip("skimage")
    iio = pytest.importorskip("imageio.v3")
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    lat = rng.standard_normal((4, 2, 4, 4)).astype(np.float32)
    img = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
    root = tmp_path / "c"
    root.mkdir()
    (root / "campaign.yaml").write_text("name: c\n")
    for pid, cache, noise in (("p1", "fbcache@0.1", 8), ("p2", "none", 0)):
        d = root / "points" / pid
        (d / "latents").mkdir(parents=True)
        (d / "point.json").write_text(json.dumps({"id": pid, "values": {
            "cluster": "local", "nodes": 1, "gpus": 1, "layout": "1x1x1x1", "preset": "tiny", "shape": "1x32x32",
            "dtype": "float32", "repeat": 0, "cache": cache}}))
        save_file({"latents": lat + np.float32(noise / 100)}, str(d / "latents" / "00000.safetensors"),
                  metadata={"fingerprint": "fp", "index": "0"})
        iio.imwrite(d / "0000-fox.png", np.clip(img.astype(int) + noise, 0, 255).astype(np.uint8))
        (d / "result.json").write_text(json.dumps({"status": "completed", "workload": "generate",
                                                   "metrics": {"kind": "generate"},
                                                   "outputs": [{"index": 0, "file": "0000-fox.png"}],
                                                   **({"step_cache": {"steps_skipped": 3}} if noise else {})}))
    rows = {r.id: r for r in collect(root)}
    assert rows["p1"].output_ref == "p2" and rows["p2"].metrics["psnr_db"] == float("inf")
    assert 20 < rows["p1"].metrics["psnr_db"] < 60 and rows["p1"].metrics["latent_max_abs_err"] == pytest.approx(0.08)
    assert rows["p1"].metrics["steps_skipped"] == 3 and rows["p2"].metrics["steps_skipped"] is None
    cols = columns(list(rows.values()))
    assert cols[cols.index("dtype") + 1] == "cache" and "steps_skipped" in cols
