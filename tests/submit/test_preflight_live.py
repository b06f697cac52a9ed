"""Issue 19 item 3 on the loopback Slurm lab: ``sporch preflight --cluster slurmlab`` submits
the preflight job through the rendered script (4 nodes x 2 ranks), prints a table per node and
link, and names the node whose transfers are slowed (fault injection, exported to the job by
sbatch) and the node that cannot read the weights."""

from __future__ import annotations

import json

import pytest

from .test_submit_live import sporch  # noqa: F401 - the module's own fixture (its own jobs)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]



def test_preflight_on_the_lab(sporch, tmp_path):
    weights = tmp_path / "w.safetensors"
    weights.write_bytes(b"0" * 4096)
    base = ["preflight", "--cluster", "slurmlab", "--output-dir", str(sporch.runs), "--weights", str(weights)]
    healthy = sporch(*base, timeout=300)
    assert healthy.returncode in (0, 1), healthy.stderr
    for text in ("preflight on slurmlab: nodes", "node1", "node4", "links (GB/s per rank)", "ring_p2p",
                 f"{'4.00 KiB'} ok"):
        assert text in healthy.stdout, (text, healthy.stdout[-3000:])
    assert "differs" not in healthy.stdout and "weights path" not in healthy.stdout

    faulty = sporch(*base, "--json", timeout=300,
                    env={"SPORCH_FAULT_SLOW_NODE": "node3", "SPORCH_FAULT_HIDE_WEIGHTS": "node2"})
    assert faulty.returncode == 1, faulty.stderr
    report = json.loads(faulty.stdout)
    assert sorted(n["node"] for n in report["nodes"]) == ["node1", "node2", "node3", "node4"]
    assert report["slowest_node"] == "node3", report["problems"]
    assert f"node2: the weights path {weights} does not exist" in report["problems"]


def test_preflight_that_outlives_its_timeout_says_so_and_cancels_its_job(sporch, tmp_path):
    """Issue 32 item 16: --timeout passes with the job still queued or running: preflight names its
    state and cancels it (it never leaves a check nobody waits for holding the nodes)."""
    import re

    p = sporch("preflight", "--cluster", "slurmlab", "--output-dir", str(sporch.runs / "pf-timeout"),
               "--timeout", "1", timeout=120)
    assert p.returncode == 2 and p.stderr.count("sporch: error:") == 1, p.stderr
    m = re.search(r"the preflight job (\S+) \(Slurm job \d+\) was still (PENDING|RUNNING|CONFIGURING) after "
                  r"--timeout 1 s; cancelled it", p.stderr)
    assert m, p.stderr
    assert "exit 124" not in p.stderr and "without a result.json" not in p.stderr
    sporch.wait_until(m.group(1), lambda st: st["state"] == "CANCELLED", timeout=60)
