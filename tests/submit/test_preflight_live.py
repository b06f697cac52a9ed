"""Issue 19 item 3 on the loopback Slurm lab: ``sporch preflight --cluster slurmlab`` submits
the preflight job through the rendered script (4 nodes x 2 ranks), prints a table per node and
link, and names the node whose transfers are slowed (fault injection, exported to the job by
sbatch) and the node that cannot read the weights (one job: the tables themselves are
tests/cli/test_preflight.py's)."""

from __future__ import annotations

import json

import pytest

from .test_submit_live import sporch  # noqa: F401 - the module's own fixture (its own jobs)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]



def test_preflight_on_the_lab(sporch, tmp_path):
    """One job (was two, a healthy one and this faulty one): the nodes' real names, the weights
    everywhere but on the node they are hidden from, nothing else wrong. The tables it prints are
    tests/cli/test_preflight.py's (the same printing, of a --local run)."""
    weights = tmp_path / "w.safetensors"
    weights.write_bytes(b"0" * 4096)
    base = ["preflight", "--cluster", "slurmlab", "--output-dir", str(sporch.runs), "--weights", str(weights)]
    faulty = sporch(*base, "--json", timeout=300,
                    env={"SPORCH_FAULT_SLOW_NODE": "node3", "SPORCH_FAULT_HIDE_WEIGHTS": "node2"})
    assert faulty.returncode == 1, faulty.stderr
    report = json.loads(faulty.stdout)
    assert sorted(n["node"] for n in report["nodes"]) == ["node1", "node2", "node3", "node4"]
    assert report["slowest_node"] == "node3", report["problems"]
    assert f"node2: the weights path {weights} does not exist" in report["problems"]
    # from the healthy run: the other nodes read the weights (its "4.00 KiB ok"), no version
    # differs and no other node's weights path is named; every link kind was measured
    assert all(n["weights"].get("readable") is True and n["weights"].get("bytes") == 4096
               for n in report["nodes"] if n["node"] != "node2"), report["nodes"]
    assert not [p for p in report["problems"] if "differs" in p or ("weights path" in p and "node2" not in p)]
    assert {link["kind"] for link in report["links"]} == {"all_reduce", "all_to_all", "ring_p2p"}


def test_preflight_that_outlives_its_timeout_says_so_and_cancels_its_job(sporch, tmp_path):
    """Issue 32 item 16: --timeout passes with the job still queued or running: preflight names its
    state and cancels it (it never leaves a check nobody waits for holding the nodes)."""
    import re

    p = sporch("preflight", "--cluster", "slurmlab", "--nodes", "1", "--output-dir", str(sporch.runs / "pf-timeout"),
               "--timeout", "1", timeout=120)
    assert p.returncode == 2 and p.stderr.count("sporch: error:") == 1, p.stderr
    m = re.search(r"the preflight job (\S+) \(Slurm job \d+\) was still (PENDING|RUNNING|CONFIGURING) after "
                  r"--timeout 1 s; cancelled it", p.stderr)
    assert m, p.stderr
    assert "exit 124" not in p.stderr and "without a result.json" not in p.stderr
    sporch.wait_until(m.group(1), lambda st: st["state"] == "CANCELLED", timeout=60)
