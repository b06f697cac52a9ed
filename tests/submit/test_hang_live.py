"""Hangs name the rank on the loopback Slurm lab (issue 19 item 4): rank 3 of a 2-node job sleeps
before its first all-to-all (fault injection, SPORCH_FAULT_HANG_*, which Slurm passes to the job
from the submitter's environment); the collective watchdog ends the job (no earlier than the
collective timeout: how soon after it is load, not judged), ``sporch status`` names rank 3 and its
node, and the stack files of ranks 0-2 show the all-to-all they waited in. Through both backends
(sbatch and submitit), side by side. (The suite's 2-node launch through submitit: the verify
jobs of test_submit_live.py and test_container_live.py run submitit on one node.)

The ranks run the descriptor's ``python`` (the lab's: the sporch installed there).
``SPORCH_HANG_LIVE_CLUSTER=/path/to/descriptor.yaml`` runs the test on another descriptor of the
lab, e.g. a copy of clusters/slurmlab.yaml whose ``python`` is a worktree's virtual environment.
About 1.5 minutes on the 2-core dev machine.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.submit.test_submit_live import TINY, sporch  # noqa: F401 - the module's own fixture (its own jobs)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

TIMEOUT_S = 20
CLUSTER = os.environ.get("SPORCH_HANG_LIVE_CLUSTER", "slurmlab")



def test_a_rank_that_never_arrives_is_named_with_its_node(sporch):
    env = {"SPORCH_FAULT_HANG_RANK": "3", "SPORCH_FAULT_HANG_BEFORE": "all_to_all", "SPORCH_FAULT_HANG_S": "600"}
    recs = []
    for via in ("sbatch", "submitit"):
        p = sporch("submit", "--json", "--cluster", CLUSTER, TINY, f"output_dir={sporch.runs}", "resources.nodes=2",
                   "parallel.ring=1", "parallel.ulysses=4", f"resources.collective_timeout={TIMEOUT_S}",
                   f"name=hang-{via}", "--via", via, env=env)
        assert p.returncode == 0, p.stderr
        recs.append(json.loads(p.stdout))
    for rec in recs:
        p = sporch("wait", rec["id"], "--interval", "1", "--timeout", "170", timeout=200)
        assert p.returncode == 1, p.stdout + p.stderr
        job_dir = Path(rec["job_dir"])
        records = {r: json.loads((job_dir / "hang" / f"rank{r}.json").read_text()) for r in range(4)}

        # every other rank's stacks show the all-to-all it waited in; the first to time out
        # alerts the rest (one that entered later may hear it before its own timeout), and no
        # watchdog fired before the timeout (a lower bound: load cannot break it)
        timed_out = [r for r in range(3) if records[r]["state"] == "timeout"]
        assert timed_out and all(records[r]["collective"]["waited_s"] >= TIMEOUT_S for r in timed_out), records
        for r in range(3):
            assert records[r]["state"] in ("timeout", "alerted") and records[r]["collective"]["name"] == "ulysses_qkv"
            text = (job_dir / "hang" / f"rank{r}.txt").read_text()
            assert "ulysses_qkv (all_to_all" in text.splitlines()[1] and "in qkv_in" in text
        assert records[3]["state"] == "alerted" and records[3]["collective"] is None
        assert "in _injected_hang" in (job_dir / "hang" / "rank3.txt").read_text()

        node = records[3]["host"]
        assert node in {"node1", "node2", "node3", "node4"} and node != records[0]["host"]
        st = sporch.status(rec["id"])
        assert st["state"] == "FAILED" and st["failed_rank"] == 3, st
        assert st["error"].startswith(f"rank 3 ({node}) never arrived at ulysses_qkv (all_to_all"), st
        assert f"rank 3 ({node}) never arrived" in sporch("status", rec["id"]).stdout
        result = json.loads((job_dir / "result.json").read_text())
        assert result["hang"]["never_arrived"] == [3] and result["failed_rank"] == 3
