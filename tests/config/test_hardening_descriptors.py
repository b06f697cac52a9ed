"""Newcomer traps in cluster descriptors (issue 32 item 19).

* a bandwidth beyond what any NIC (per NIC) or GPU link of its kind carries is warned about, naming
  the unit (InfiniBand sold as 400 Gb/s written as ``gb_per_s: 400`` with one NIC: 8 x too fast);
  the warning is in the Plan's warnings and in ``clusters show/list``; the built-ins raise none;
* a user's descriptor named like a built-in (a copy made to change the account) is the one used,
  and ``clusters list/show`` say which file each name comes from.
"""

from __future__ import annotations

import pytest
import yaml

from sporch.orchestrator.config.cluster import available_clusters, bandwidth_warnings, find_cluster
from sporch.orchestrator.config.job import job_from_dict
from sporch.orchestrator.plan.planner import make_plan
from sporch.orchestrator.paths import clusters_dir

JOB = {"name": "j", "model": {"preset": "tiny"}, "workload": {"kind": "verify", "frames": 9, "height": 64,
                                                              "width": 64}}


def _descriptor(folder, name="mine", **changes) -> str:
    doc = yaml.safe_load((clusters_dir() / "local.yaml").read_text())
    doc["name"] = name
    for key, value in changes.items():
        section, field = key.split("__")
        doc[section][field] = value
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


@pytest.mark.parametrize("changes,needle", [
    ({"inter_node__fabric": "infiniband", "inter_node__gb_per_s": 400, "inter_node__nics_per_node": 1},
     "inter_node.gb_per_s 400 over 1 NIC(s) is 400 GB/s per NIC, more than any infiniband NIC carries"),
    ({"inter_node__fabric": "ethernet", "inter_node__gb_per_s": 200, "inter_node__nics_per_node": 0},
     "is 200 GB/s per NIC, more than any ethernet NIC"),
    ({"inter_node__fabric": "roce", "inter_node__gb_per_s": 1600, "inter_node__nics_per_node": 8},
     "is 200 GB/s per NIC"),
    ({"intra_node__fabric": "pcie", "intra_node__gb_per_s": 512}, "intra_node.gb_per_s 512 is more than any pcie"),
    ({"intra_node__fabric": "nvlink", "intra_node__gb_per_s": 7200}, "more than any nvlink link"),
])
def test_an_impossible_bandwidth_is_warned_naming_the_unit(tmp_path, run_cli, changes, needle):
    path = _descriptor(tmp_path, **changes)
    plan = make_plan(find_cluster(path), job_from_dict(JOB))
    hits = [w for w in plan.warnings if needle in w]
    assert hits and "gigaBYTES per second" in hits[0], plan.warnings
    code, out, err = run_cli("clusters", "show", path)
    assert code == 0 and needle in err and "warning:" in err, err


def test_builtins_and_plausible_ones_are_not_warned(tmp_path):
    for name, (label, path) in available_clusters().items():
        assert bandwidth_warnings(find_cluster(str(path))) == [], name
    ok = _descriptor(tmp_path, inter_node__fabric="infiniband", inter_node__gb_per_s=400, inter_node__nics_per_node=8)
    assert bandwidth_warnings(find_cluster(ok)) == []  # 8 x 400 Gb/s


def test_a_user_descriptor_named_like_a_builtin_wins(tmp_path, run_cli, isolated_cluster_search, monkeypatch):
    user = isolated_cluster_search / ".config" / "sporch" / "clusters"
    path = _descriptor(user, name="a100x8", gpu__model="MY-A100")
    assert find_cluster("a100x8").gpu.model == "MY-A100"
    assert find_cluster("a100x8").source == str((user / "a100x8.yaml").resolve())
    code, out, err = run_cli("clusters", "show", "a100x8")
    assert code == 0 and path in out and "instead of the builtin descriptor" in out, out
    monkeypatch.setenv("COLUMNS", "250")  # a table, not one block per row: the test folder's paths are long
    code, out, err = run_cli("clusters", "list")
    row = next(line for line in out.splitlines() if line.lstrip("│ ").startswith("a100x8"))
    assert "user" in row, out  # (the table may wrap the file names; the label starts the cell)
    env = tmp_path / "env"
    _descriptor(env, name="a100x8", gpu__model="ENV-A100")
    monkeypatch.setenv("SPORCH_CLUSTERS", str(env))
    assert find_cluster("a100x8").gpu.model == "ENV-A100"  # $SPORCH_CLUSTERS before the user folder
