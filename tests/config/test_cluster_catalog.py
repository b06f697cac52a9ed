from __future__ import annotations

import pytest

from sporch.orchestrator.config.cluster import (
    GPU_DIRECTIVES,
    available_clusters,
    find_cluster,
    load_cluster_file,
)
from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.paths import clusters_dir

from tests.testutil import write

BUILTINS = {"a100x8", "a100x32", "h100x64", "h200x16", "l40x16", "local", "slurmlab"}


def test_builtins_present_and_valid():
    names = set(available_clusters())
    assert BUILTINS <= names
    for name in BUILTINS:
        c = find_cluster(name)
        assert c.name == name
        assert c.slurm.gpu_directive in GPU_DIRECTIVES
        assert c.source.startswith(str(clusters_dir().resolve()))


@pytest.mark.parametrize(
    "name,nodes,gpn,model,intra,inter,nics",
    [
        ("a100x32", 4, 8, "A100-SXM4-80GB", "nvlink", "infiniband", 4),
        ("h100x64", 8, 8, "H100-SXM5-80GB", "nvlink", "infiniband", 8),
        ("l40x16", 2, 8, "L40S-48GB", "pcie", "ethernet", 1),
        ("local", 1, 4, "cpu", "pcie", "ethernet", 1),
        ("slurmlab", 4, 2, "fake", "pcie", "ethernet", 1),
    ],
)
def test_shapes(name, nodes, gpn, model, intra, inter, nics):
    c = find_cluster(name)
    assert (c.nodes, c.gpus_per_node, c.gpu.model) == (nodes, gpn, model)
    assert (c.intra_node.fabric, c.inter_node.fabric, c.inter_node.nics_per_node) == (intra, inter, nics)


def test_a100x32_bandwidths():
    c = find_cluster("a100x32")
    assert c.inter_node.gb_per_s == 100  # 4 x 200 Gb/s
    assert c.gpu.memory_gib == 80 and c.gpu.bf16_tflops == 312


def test_slurmlab_matches_contract():
    c = find_cluster("slurmlab")
    assert c.slurm.partition == "lab"
    assert c.slurm.gpu_directive == "gpus-per-node"
    assert c.slurm.cpus_per_task == 1
    env = c.resolved_env()
    assert env["NCCL_IB_DISABLE"] == "1"


def test_fabric_env_defaults_and_override(tmp_path):
    ib = find_cluster("a100x32").resolved_env()
    assert ib["NCCL_IB_DISABLE"] == "0" and ib["NCCL_IB_HCA"].startswith("mlx5_0")
    eth = find_cluster("l40x16").resolved_env()
    assert eth["NCCL_IB_DISABLE"] == "1" and eth["NCCL_SOCKET_IFNAME"] == "eno1"
    p = write(tmp_path, "roce.yaml", "nodes: 2\ninter_node: {fabric: roce}\nenv: {NCCL_IB_GID_INDEX: 5}\n")
    env = load_cluster_file(p).resolved_env()
    assert env["NCCL_IB_GID_INDEX"] == "5"  # cluster env wins, ints become strings
    p2 = write(tmp_path, "bare.yaml", "env_defaults: false\nenv: {A: b}\n")
    assert load_cluster_file(p2).resolved_env() == {"A": "b"}


def test_name_defaults_to_file_stem(tmp_path):
    p = write(tmp_path, "mine.yaml", "nodes: 2\ngpus_per_node: 4\n")
    assert load_cluster_file(p).name == "mine"


@pytest.mark.parametrize(
    "text,needle",
    [
        ("nodes: 2\nnode: 3\n", "'node'"),
        ("slurm: {partiton: gpu}\n", "'slurm.partiton'"),
        ("gpu: {model: x, memry_gib: 3}\n", "'gpu.memry_gib'"),
        ("nodes: many\n", "'nodes'"),
        ("slurm: {gpu_directive: gpus}\n", "slurm.gpu_directive"),
        ("inter_node: {fabric: myrinet}\n", "inter_node.fabric"),
        ("intra_node: {fabric: xgmi}\n", "intra_node.fabric"),
        ("slurm: {time: soon}\n", "slurm.time"),
        ("login: {host: h, prot: 22}\n", "'login.prot'"),
        ("nodes: [1\n", "YAML syntax error"),
    ],
)
def test_bad_descriptors_one_line(tmp_path, text, needle):
    p = write(tmp_path, "bad.yaml", text)
    with pytest.raises(SporchError) as ei:
        load_cluster_file(p)
    msg = str(ei.value)
    assert needle in msg and "bad.yaml" in msg
    assert "\n" not in msg.strip()


def test_login_section(tmp_path):
    p = write(tmp_path, "remote.yaml", "login: {host: login.example.org, user: me, workdir: /scratch/me}\n")
    c = load_cluster_file(p)
    # port unset: ssh config's Port, else 22 (sporch.orchestrator.remote.route)
    assert c.login.host == "login.example.org" and c.login.port is None and c.login.workdir == "/scratch/me"


def test_lookup_order_and_paths(tmp_path, monkeypatch):
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    d1.mkdir(), d2.mkdir()
    write(d1, "mycluster.yaml", "nodes: 3\n")
    write(d2, "mycluster.yaml", "nodes: 5\n")
    write(d2, "a100x32.yaml", "nodes: 99\n")  # the user's own wins over a built-in (issue 32 item 19)
    monkeypatch.setenv("SPORCH_CLUSTERS", f"{d1}:{d2}")
    assert find_cluster("mycluster").nodes == 3
    assert find_cluster("a100x32").nodes == 99
    user = tmp_path / "home" / ".config" / "sporch" / "clusters"
    user.mkdir(parents=True)
    write(user, "usercl.yaml", "nodes: 7\n")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert find_cluster("usercl").nodes == 7
    assert find_cluster(str(d2 / "mycluster.yaml")).nodes == 5


def test_unknown_cluster_lists_known():
    with pytest.raises(SporchError) as ei:
        find_cluster("a100x33")
    assert "a100x32" in str(ei.value) and "slurmlab" in str(ei.value)
    with pytest.raises(SporchError, match="not found"):
        find_cluster("/no/such/cluster.yaml")


def test_interpolation_in_cluster(tmp_path, monkeypatch):
    monkeypatch.setenv("SPORCH_TEST_USER", "alice")
    p = write(tmp_path, "c.yaml", "login: {host: h, user: '${oc.env:SPORCH_TEST_USER}', workdir: '/home/${login.user}'}\n")
    c = load_cluster_file(p)
    assert c.login.user == "alice" and c.login.workdir == "/home/alice"
