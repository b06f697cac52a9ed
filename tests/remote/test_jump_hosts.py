"""SSH through jump hosts (``login.proxy_jump``) and the user's ssh config (issue 19 item 5).

Two real sshd on loopback: the jump host ``sshd`` (127.0.0.1) and the login host
``target_sshd`` (127.0.0.2), both with host keys of their own, checked on every hop. The proof
that a connection went through the jump host: the login host's ``$SSH_CONNECTION`` names the
client end of its TCP connection, and that socket belongs to a process of the jump host's sshd
(found in /proc), not to this test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Set

import pytest

from sporch.orchestrator.config.cluster import load_cluster_file
from sporch.orchestrator.errors import Unreachable
from sporch.orchestrator.remote.route import (
    Hop,
    load_ssh_config,
    normalize_jump,
    parse_hop,
    resolve_route,
)
from sporch.orchestrator.remote.login import login_dict
from sporch.orchestrator.remote.pool import close_all
from sporch.orchestrator.remote.ssh import SshHost

from .conftest import running_sshd
from .helpers import descendants, one_line_error

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "examples" / "tiny.yaml")


# -- helpers -----------------------------------------------------------------------------------------
def _entry(server) -> str:
    """The known_hosts line of ``server`` (OpenSSH's ``[host]:port`` form)."""
    return f"[{server.host}]:{server.port} {server.host_pub}\n"


def _known(tmp_path: Path, *servers) -> str:
    kh = tmp_path / "known_hosts"
    kh.write_text("".join(_entry(s) for s in servers))
    return str(kh)


def _jump(sshd) -> str:
    return f"{sshd.user}@{sshd.host}:{sshd.port}"


def _socket_owners(local_port: int, remote_port: int) -> Set[int]:
    """Pids holding the TCP socket ``127.x:local_port -> 127.x:remote_port`` (from /proc)."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        if int(f[1].split(":")[1], 16) == local_port and int(f[2].split(":")[1], 16) == remote_port:
            inodes.add(f"socket:[{f[9]}]")
    owners = set()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in inodes for fd in (d / "fd").iterdir()):
                owners.add(int(d.name))
        except OSError:
            continue
    return owners


def _assert_through_jump(h: SshHost, jump, target) -> None:
    """The login host's connection comes from the jump host's sshd, not from this process."""
    rc, out, _ = h.run("echo $SSH_CONNECTION")
    client_ip, client_port, server_ip, server_port = out.split()
    assert rc == 0 and (server_ip, int(server_port)) == (target.host, target.port)
    _assert_owned_by(jump, int(client_port), target.port)


def _assert_owned_by(jump, client_port: int, target_port: int) -> None:
    owners = _socket_owners(client_port, target_port)
    assert owners, f"no socket 127.0.0.1:{client_port} -> :{target_port}"
    assert os.getpid() not in owners and owners <= descendants(jump.pid), (owners, jump.pid)


# -- hop strings, the loader --------------------------------------------------------------------------
def test_hop_strings():
    assert parse_hop("bastion") == Hop("bastion")
    assert parse_hop("me@b.example.org:2222") == Hop("b.example.org", "me", 2222)
    assert parse_hop("ssh://me@b:22") == Hop("b", "me", 22)
    assert parse_hop("[::1]:2200") == Hop("::1", None, 2200)
    for bad in ("", "me@", "b:0", "b:99999", "b:x", "a b", "me@b:22/x", "@b"):
        with pytest.raises(ValueError):
            parse_hop(bad)
    assert normalize_jump(None) is None and normalize_jump("") is None and normalize_jump([]) is None
    assert normalize_jump(" a , me@b:2 ") == ["a", "me@b:2"]
    assert normalize_jump("none") == ["none"] and normalize_jump(["None"]) == ["none"]
    with pytest.raises(ValueError, match="cannot be combined"):
        normalize_jump("none,a")
    with pytest.raises(ValueError, match="hop 2 must be a string"):
        normalize_jump(["a", 3])


def test_loader_splits_a_string_and_refuses_a_bad_hop_in_one_line(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("login: {host: login, proxy_jump: 'me@b1:2222, b2'}\n")
    c = load_cluster_file(good)
    assert c.login.proxy_jump == ["me@b1:2222", "b2"] and c.login.port is None
    good.write_text("login: {host: login, proxy_jump: [b1, 'me@b2:22'], ssh_config: /x/cfg}\n")
    c = load_cluster_file(good)
    assert c.login.proxy_jump == ["b1", "me@b2:22"] and c.login.ssh_config == "/x/cfg"
    assert login_dict(c.login)["proxy_jump"] == ["b1", "me@b2:22"]
    for text, needle in [("login: {host: h, proxy_jump: 'b1,me@b2:70000'}\n", "port 70000 is not in 1..65535"),
                         ("login: {host: h, proxy_jump: [b1, 'me @b2']}\n", "'me @b2' is not a jump host"),
                         ("login: {host: h, proxy_jump: 'b1,,b2'}\n", "'' is not a jump host")]:
        bad = tmp_path / "bad.yaml"
        bad.write_text(text)
        msg = one_line_error(lambda: load_cluster_file(bad))
        assert msg.startswith(f"{bad}: 'login.proxy_jump' ") and needle in msg, msg


# -- the route: ssh config ------------------------------------------------------------------------------
def test_route_applies_ssh_config_and_explicit_values_win(tmp_path, monkeypatch):
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"""\
Host cluster
  HostName 10.0.0.5
  Port 2200
  User alice
  IdentityFile {tmp_path}/cluster_key
  ProxyJump bastion
Host bastion
  HostName 10.0.0.1
  User bob
  ProxyJump outer
Host outer
  HostName 10.0.0.254
  Port 2022
Host loop1
  ProxyJump loop2
Host loop2
  ProxyJump loop1
""")
    config = load_ssh_config(str(cfg))
    r = resolve_route("cluster", config=config)
    assert [(h.name, h.address, h.user) for h in r.hops] == [
        ("outer", "10.0.0.254:2022", os.environ.get("USER") or r.hops[0].user),
        ("bastion", "10.0.0.1:22", "bob")]  # bastion's own ProxyJump first, as ssh -J does
    assert (r.target.address, r.target.user, r.target.identity_files) == \
        ("10.0.0.5:2200", "alice", (f"{tmp_path}/cluster_key",))
    r = resolve_route("cluster", 2222, "me", "~/k", ["carol@bastion:2022"], config)  # the descriptor wins
    assert (r.target.address, r.target.user) == ("10.0.0.5:2222", "me")
    assert [(h.address, h.user, h.identity_files) for h in r.hops] == [
        ("10.0.0.254:2022", r.hops[0].user, (str(Path("~/k").expanduser()),)),
        ("10.0.0.1:2022", "carol", (str(Path("~/k").expanduser()),))]
    assert resolve_route("cluster", proxy_jump="none", config=config).hops == ()
    assert resolve_route("plain", config=config).target.address == "plain:22"
    assert "ProxyJump loop" in one_line_error(lambda: resolve_route("loop1", config=config))
    monkeypatch.setenv("SPORCH_SSH_CONFIG", str(cfg))
    assert SshHost("cluster").where == "alice@10.0.0.5:2200"
    assert SshHost("cluster", ssh_config="none").where.endswith("@cluster:22")
    assert "not found" in one_line_error(lambda: SshHost("cluster", ssh_config=str(tmp_path / "nope")))


# -- live: through the jump host ---------------------------------------------------------------------------
def test_commands_and_files_go_through_the_jump_host(sshd, target_sshd, tmp_path):
    login = target_sshd.login(_known(tmp_path, sshd, target_sshd), policy="reject", proxy_jump=[_jump(sshd)])
    with SshHost.from_login(login) as h:
        assert h.where == f"{target_sshd.user}@127.0.0.2:{target_sshd.port}"
        _assert_through_jump(h, sshd, target_sshd)
        h.write_text(str(tmp_path / "f.txt"), "via the jump\n")
        assert h.read_text(str(tmp_path / "f.txt")) == "via the jump\n"
    assert not h.is_active() and h._hop_clients == []


def test_accept_new_records_every_hop_and_reject_names_the_hop(sshd, target_sshd, tmp_path):
    kh = tmp_path / "kh"
    login = target_sshd.login(str(kh), policy="reject", proxy_jump=_jump(sshd))
    msg = one_line_error(lambda: SshHost.from_login(login).connect())
    assert msg.startswith(f"host key of jump host 127.0.0.1:{sshd.port} (ssh-ed25519) is not known in {kh}; "
                          f"run `ssh -p {sshd.port} {sshd.user}@127.0.0.1` once"), msg
    kh.write_text(_entry(sshd))
    msg = one_line_error(lambda: SshHost.from_login(login).connect())
    assert msg.startswith(f"host key of 127.0.0.2:{target_sshd.port} (ssh-ed25519) is not known"), msg
    assert f"`ssh -J {_jump(sshd)} -p {target_sshd.port} {target_sshd.user}@127.0.0.2`" in msg
    kh.unlink()
    with SshHost.from_login({**login, "host_key_policy": "accept-new"}) as h:
        assert h.run("true")[0] == 0
    assert kh.read_text() == _entry(sshd) + _entry(target_sshd)  # [host]:port on each hop
    subprocess.run(["ssh-keygen", "-H", "-f", str(kh)], check=True, capture_output=True, timeout=30)
    assert "127.0.0" not in kh.read_text()  # hashed, as Debian's HashKnownHosts writes them
    with SshHost.from_login(login) as h:  # reject: both found
        assert h.run("true")[0] == 0


def test_a_wrong_key_on_the_jump_host_is_refused_in_one_line(sshd, target_sshd, tmp_path):
    other = " ".join(Path(sshd.other_key + ".pub").read_text().split()[:2])
    kh = tmp_path / "kh"
    kh.write_text(f"[127.0.0.1]:{sshd.port} {other}\n" + _entry(target_sshd))
    login = target_sshd.login(str(kh), policy="accept-new", proxy_jump=[_jump(sshd)])
    msg = one_line_error(lambda: SshHost.from_login(login).connect())
    assert msg.startswith(f"host key of jump host 127.0.0.1:{sshd.port} does NOT match known_hosts "
                          "(a changed host or a man-in-the-middle)"), msg
    assert f"ssh-keygen -R '[127.0.0.1]:{sshd.port}' -f {kh}" in msg
    assert kh.read_text().count("\n") == 2  # nothing recorded


def test_ssh_config_aliases_and_proxy_jump_are_honoured(sshd, target_sshd, tmp_path, monkeypatch):
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"""\
Host bastion
  HostName 127.0.0.1
  Port {sshd.port}
  IdentityFile {sshd.key}
Host cluster
  HostName 127.0.0.2
  Port {target_sshd.port}
  User {target_sshd.user}
  IdentityFile {target_sshd.key}
  ProxyJump bastion
""")
    kh = _known(tmp_path, sshd, target_sshd)
    monkeypatch.setenv("SPORCH_SSH_CONFIG", str(cfg))
    with SshHost.from_login({"host": "cluster", "known_hosts": kh}) as h:
        assert [hop.label for hop in h.hops] == [f"bastion (127.0.0.1:{sshd.port})"]
        _assert_through_jump(h, sshd, target_sshd)
        assert login_dict(h)["host"] == "cluster" and login_dict(h)["proxy_jump"] is None  # resolved again later
    monkeypatch.setenv("SPORCH_SSH_CONFIG", "none")  # the descriptor's field names it instead
    with SshHost.from_login({"host": "cluster", "known_hosts": kh, "ssh_config": str(cfg),
                             "proxy_jump": "bastion"}) as h:
        assert h.run("echo ok")[1] == "ok\n"


def test_jump_host_problems_are_one_line(sshd, target_sshd, tmp_path):
    with running_sshd(tmp_path, name="nofwd", keys=sshd.folder, extra="AllowTcpForwarding no\n") as nofwd:
        login = target_sshd.login(_known(tmp_path, nofwd, target_sshd), policy="reject", proxy_jump=_jump(nofwd))
        msg = one_line_error(lambda: SshHost.from_login(login).connect())
        assert msg.startswith(f"jump host 127.0.0.1:{nofwd.port} refuses to forward to 127.0.0.2:{target_sshd.port}")
        assert "AllowTcpForwarding yes" in msg
        # a process of its own (pytest's log capture would hide it): paramiko's log line of the refused
        # channel must not reach stderr next to the one-line error
        code = ("import sys; from sporch.orchestrator.remote.ssh import SshHost\n"
                f"try:\n    SshHost.from_login({login!r}).connect()\n"
                "except Exception as e:\n    print(e)")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "SPORCH_SSH_CONFIG": "none"})
        assert p.stdout.startswith(f"jump host 127.0.0.1:{nofwd.port} refuses") and p.stderr == "", p.stderr
    login = target_sshd.login(_known(tmp_path, sshd), port=1, policy="reject", proxy_jump=_jump(sshd))
    with pytest.raises(Unreachable) as ei:  # the jump host cannot connect: transient, retried
        SshHost.from_login(login).connect()
    assert str(ei.value).startswith(f"cannot reach {target_sshd.user}@127.0.0.2:1 through jump host "
                                    f"127.0.0.1:{sshd.port}: ")
    msg = one_line_error(lambda: SshHost.from_login({**login, "proxy_jump": f"{sshd.user}@127.0.0.1:1"}).connect())
    assert msg.startswith(f"cannot reach jump host {sshd.user}@127.0.0.1:1: ")
    bad_key = {**login, "port": target_sshd.port, "proxy_jump": _jump(sshd), "identity_file": sshd.other_key}
    msg = one_line_error(lambda: SshHost.from_login(bad_key).connect())
    assert msg.startswith(f"ssh authentication as {sshd.user}@127.0.0.1:{sshd.port} (jump host) failed"), msg


# -- the submission path, through the jump host ---------------------------------------------------------------
def _fake_slurm(folder: Path) -> Path:
    """sbatch (prints a job id, logs where it ran) and squeue (the job completed) on PATH."""
    folder.mkdir()
    (folder / "sbatch").write_text(f"#!/bin/sh\necho \"$PWD $*\" >> {folder}/sbatch.log\n"
                                   f"echo \"$SSH_CONNECTION\" > {folder}/connection\necho 4242\n")
    (folder / "squeue").write_text("#!/bin/sh\necho '4242|COMPLETED|None|0:09|node1'\n")
    for tool in ("sbatch", "squeue"):
        (folder / tool).chmod(0o755)
    return folder


def test_cli_submit_and_status_go_through_the_jump_host(sshd, target_sshd, tmp_path, sporch_home, run_cli):
    bin_dir = _fake_slurm(tmp_path / "bin")
    kh = _known(tmp_path, sshd, target_sshd)
    login = {"host": "127.0.0.2", "port": target_sshd.port, "user": target_sshd.user,
             "identity_file": target_sshd.key, "workdir": str(tmp_path / "work"), "known_hosts": kh,
             "setup": [f"export PATH={bin_dir}:$PATH"], "proxy_jump": f"{_jump(sshd)}"}  # -J's string form
    cluster = tmp_path / "jumplab.yaml"
    cluster.write_text((ROOT / "clusters" / "slurmlab.yaml").read_text().replace("name: slurmlab", "name: jumplab")
                       + "login: " + json.dumps(login) + "\n")
    code, out, err = run_cli("submit", "--json", "--cluster", cluster, TINY)
    assert code == 0, err
    rec = json.loads(out)
    job_dir = Path(rec["job_dir"])
    assert job_dir.is_relative_to(tmp_path / "work") and (job_dir / "job.sbatch").is_file()
    assert (bin_dir / "sbatch.log").read_text().split() == [str(job_dir), "--parsable", str(job_dir / "job.sbatch")]
    client_port = int((bin_dir / "connection").read_text().split()[1])  # the pooled connection is still open
    _assert_owned_by(sshd, client_port, target_sshd.port)
    saved = json.loads(next((sporch_home / "jobs").glob("*.json")).read_text())
    assert saved["remote"]["proxy_jump"] == [_jump(sshd)] and saved["remote"]["host"] == "127.0.0.2"
    (job_dir / "result.json").write_text('{"status": "completed"}')  # as the job would
    close_all()  # status reconnects from the record alone
    code, out, err = run_cli("status", "--json", rec["id"])
    assert code == 0, err
    st = json.loads(out)[0]
    assert st["state"] == "COMPLETED" and st["result_status"] == "completed", st

    Path(kh).write_text(f"[127.0.0.1]:{sshd.port} {' '.join(Path(sshd.other_key + '.pub').read_text().split()[:2])}\n")
    close_all()
    code, out, err = run_cli("submit", "--cluster", cluster, TINY)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"host key of jump host 127.0.0.1:{sshd.port} does NOT match" in err
