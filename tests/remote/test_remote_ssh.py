"""The ssh layer: the Host seam of run_slurm, one-line connection errors, host keys, SFTP --
against a real sshd on loopback (fixture ``sshd``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sporch.orchestrator.errors import SporchError
from sporch.orchestrator.remote.login import login_dict
from sporch.orchestrator.remote.ssh import SshHost
from sporch.orchestrator.slurm.commands import SlurmCommandError, run_slurm, sbatch, scancel
from sporch.orchestrator.slurm.query import squeue_states, test_only
from .helpers import one_line_error

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "examples" / "tiny.yaml")


# -- the host seam (no ssh) ----------------------------------------------------------------------
class FakeRunner:
    """A remote Host's command side: answers every command with one canned reply."""

    where = "me@login:22"
    remote = True

    def __init__(self, rc=0, out="", err="", raise_timeout=False):
        self.answer = (rc, out, err)
        self.raise_timeout = raise_timeout
        self.calls = []

    def run(self, argv, *, timeout, input=None, env=None, cwd=None):
        self.calls.append({"argv": list(argv), "timeout": timeout, "input": input, "cwd": cwd})
        if self.raise_timeout:
            raise TimeoutError("slow")
        return self.answer


def test_runner_gets_the_same_argv_and_slurms_reason_is_parsed_the_same_way():
    r = FakeRunner(1, "", "sbatch: error: invalid partition specified: nosuch\n"
                          "sbatch: error: Batch job submission failed: Invalid partition name specified\n")
    with pytest.raises(SlurmCommandError) as ei:
        sbatch(script="job.sbatch", cwd="/remote/jd", host=r)
    assert str(ei.value) == "Slurm rejected the job (sbatch on login host me@login:22): invalid partition specified: nosuch"
    assert r.calls[0]["argv"] == ["sbatch", "--parsable", "job.sbatch"] and r.calls[0]["cwd"] == "/remote/jd"
    assert sbatch(script="x", host=FakeRunner(0, "4242\n")) == "4242"


def test_runner_timeout_missing_tool_and_queries():
    with pytest.raises(SlurmCommandError, match=r"^could not reach Slurm \(squeue on login host me@login:22\): no answer within 3 s"):
        run_slurm(["squeue"], timeout=3, host=FakeRunner(raise_timeout=True))
    with pytest.raises(SlurmCommandError, match=r"'sacct' not found on me@login:22.*login.setup"):
        run_slurm(["sacct"], host=FakeRunner(127, "", "bash: line 1: sacct: command not found\n"))
    states = squeue_states(["7"], host=FakeRunner(0, "7|RUNNING|None\n"))
    assert states["7"].name == "RUNNING"
    r = FakeRunner(1, "", "sbatch: error: invalid partition specified: nosuch\n")
    res = test_only(host=r, script_text="#!/bin/bash\n")
    assert not res.accepted and res.reason == "invalid partition specified: nosuch"
    assert r.calls[0]["argv"] == ["sbatch", "--test-only"] and r.calls[0]["input"] == "#!/bin/bash\n"
    r = FakeRunner()
    scancel(["5", "6"], host=r)
    assert r.calls[0]["argv"] == ["scancel", "5", "6"]


def test_ssh_runner_command_has_setup_first_and_quotes():
    host = SshHost("h", setup=["module load slurm", "export A=1"])
    cmd = host.command(["sbatch", "--parsable", "my job.sbatch"], env={"X": "a b"}, cwd="/w d")
    assert cmd.splitlines() == ["module load slurm", "export A=1",
                                "cd '/w d' && X='a b' sbatch --parsable 'my job.sbatch'"]


def test_login_dict_and_bad_policy():
    d = login_dict({"host": "h", "port": "2222"})
    assert d["port"] == 2222 and d["host_key_policy"] == "reject" and d["setup"] == []
    with pytest.raises(SporchError, match="host_key_policy"):
        SshHost("h", host_key_policy="yes")


# -- connection errors: one line --------------------------------------------------------------------

def test_unreachable_port_and_host_are_one_line(tmp_path):
    msg = one_line_error(lambda: SshHost("127.0.0.1", 1, user="me", known_hosts=str(tmp_path / "kh")).connect())
    assert msg.startswith("cannot reach me@127.0.0.1:1:")
    msg = one_line_error(lambda: SshHost("no-such-host.invalid", 22, user="me").connect())
    assert "cannot resolve host 'no-such-host.invalid'" in msg
    msg = one_line_error(lambda: SshHost("127.0.0.1", 22, identity_file=str(tmp_path / "nokey")).connect())
    assert "identity_file" in msg and "not found" in msg


def test_unknown_host_key_is_rejected_by_default(sshd, tmp_path):
    kh = tmp_path / "known_hosts"
    msg = one_line_error(lambda: SshHost.from_login(sshd.login(str(kh), policy="reject")).connect())
    assert f"host key of 127.0.0.1:{sshd.port}" in msg and "is not known" in msg
    assert "ssh -p" in msg and "accept-new" in msg and "login.known_hosts" in msg
    assert not kh.exists()


def test_accept_new_writes_known_hosts_then_reject_accepts_it(sshd, tmp_path):
    kh = tmp_path / "sub" / "known_hosts"
    with SshHost.from_login(sshd.login(str(kh), policy="accept-new")) as h:
        assert h.run("echo hi")[:2] == (0, "hi\n")
    line = kh.read_text().strip()
    assert line == f"[127.0.0.1]:{sshd.port} {sshd.host_pub}"
    with SshHost.from_login(sshd.login(str(kh), policy="reject")) as h:
        assert h.run(["true"])[0] == 0
    assert kh.read_text().strip() == line  # nothing added


def test_changed_host_key_is_refused(sshd, tmp_path):
    kh = tmp_path / "known_hosts"
    other = (Path(sshd.other_key + ".pub").read_text().split())
    kh.write_text(f"[127.0.0.1]:{sshd.port} {other[0]} {other[1]}\n")
    msg = one_line_error(lambda: SshHost.from_login(sshd.login(str(kh), policy="accept-new")).connect())
    assert "does NOT match" in msg


def test_auth_failure_is_one_line(sshd, tmp_path):
    login = sshd.login(str(tmp_path / "kh"), identity_file=sshd.other_key)
    msg = one_line_error(lambda: SshHost.from_login(login).connect())
    assert msg.startswith(f"ssh authentication as {sshd.user}@127.0.0.1:{sshd.port} failed (key {sshd.other_key})")


def test_run_and_sftp_round_trip(sshd, tmp_path):
    with SshHost.from_login(sshd.login(str(tmp_path / "kh"))) as h:
        rc, out, err = h.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
        assert (rc, out, err) == (3, "out\n", "err\n")
        assert h.run("cat", input="fed on stdin")[1] == "fed on stdin"
        with pytest.raises(TimeoutError):
            h.run("sleep 5", timeout=0.5)
        base = str(tmp_path / "remote" / "a" / "b")
        assert h.makedirs(base) == str(tmp_path / "remote")
        assert h.makedirs(base) is None
        h.write_text(base + "/f.txt", "héllo\n")
        assert h.read_text(base + "/f.txt") == "héllo\n" and (Path(base) / "f.txt").read_text() == "héllo\n"
        assert h.exists(base + "/f.txt") and not h.exists(base + "/nope")
        with pytest.raises(FileExistsError):
            h.mkdir(base)
        assert h.abspath("~/x") == h.home() + "/x" and h.abspath("rel") == h.home() + "/rel"
        h.remove_tree(str(tmp_path / "remote"))
        assert not (tmp_path / "remote").exists()


def test_ssh_runner_runs_setup_then_the_tool(sshd, tmp_path):
    with SshHost.from_login(sshd.login(str(tmp_path / "kh"), setup=[f"export PATH={tmp_path}/bin:$PATH"])) as h:
        (tmp_path / "bin").mkdir()
        fake = tmp_path / "bin" / "squeue"
        fake.write_text("#!/bin/sh\necho \"9|PENDING|Priority $PWD\"\n")
        fake.chmod(0o755)
        proc = run_slurm(["squeue"], host=h, cwd=str(tmp_path))
        assert proc.stdout.strip() == f"9|PENDING|Priority {tmp_path}"


def test_cli_unknown_host_key_is_one_line_and_writes_nothing(sshd, tmp_path):
    remote = tmp_path / "remote.yaml"
    remote.write_text((ROOT / "clusters" / "slurmlab.yaml").read_text() + (
        f"login: {{host: 127.0.0.1, port: {sshd.port}, user: {sshd.user}, identity_file: {sshd.key}, "
        f"workdir: {tmp_path}/work, known_hosts: {tmp_path}/kh}}\n"))
    env = {"SPORCH_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    for args in (["submit"], ["submit", "--check"]):
        p = subprocess.run([sys.executable, "-m", "sporch.orchestrator.cli.main", *args, "-c", str(remote), TINY],
                           capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)
        assert p.returncode == 2, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1 and "is not known" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "home").exists() and not (tmp_path / "work").exists() and not (tmp_path / "kh").exists()
